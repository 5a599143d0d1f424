"""Objects over time on the demo video: every ``new`` gets its ``end``, updates stay rare.

    python bench/objects_vtest.py [--config FILE] [--out bench/results/objects_vtest.json]

Runs ``edge-agent track`` (the agent's own detector and objects stage, every frame, with
the file's timing) on ``assets/vtest.avi`` with a zone over the street and a line across
it, then reads the events it wrote. Reports, against issue 22's acceptance: events per
kind, whether every ``new`` has exactly one ``end``, updates per object per second (mean
over objects, and the busiest object), and line totals. The detector settings are the
config's (default: the embedded defaults), so this measures whatever region mode is on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RESULTS, ROOT, VIDEO, machine_info, machine_line, print_table, rnd

CAMERA = {
    "id": "front",
    "source": str(VIDEO),
    "zones": {"street": {"polygon": [[0, 0.3], [1, 0.3], [1, 0.8], [0, 0.8]]}},
    "lines": {"middle": {"points": [[0.5, 0.0], [0.5, 1.0]]}},
}


def _t(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def analyse(events: list[dict[str, Any]]) -> dict[str, Any]:
    kinds = Counter(e["type"] for e in events)
    news = Counter(e["id"] for e in events if e["type"] == "new")
    ends = Counter(e["id"] for e in events if e["type"] == "end")
    rates = []
    for eid in news:
        mine = [e for e in events if e["id"] == eid]
        updates = sum(1 for e in mine if e["type"] == "update")
        life = max(0.1, _t(mine[-1]["ts"]) - _t(mine[0]["start_ts"]))
        rates.append(updates / life)
    return {
        "new": kinds["new"],
        "update": kinds["update"],
        "end": kinds["end"],
        "every_new_one_end": news == ends and set(news.values()) <= {1},
        "updates_per_object_s_mean": rnd(sum(rates) / len(rates), 3) if rates else None,
        "updates_per_object_s_max": rnd(max(rates), 3) if rates else None,
        "at_most_1_update_per_s": bool(rates) and sum(rates) / len(rates) <= 1.0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=None, help="agent config (default: embedded)")
    p.add_argument("--out", type=Path, default=RESULTS / "objects_vtest.json")
    args = p.parse_args()
    base: dict[str, Any] = {}
    if args.config is not None:
        base = yaml.safe_load(args.config.read_text()) or {}
    with tempfile.TemporaryDirectory(prefix="bench-objects-") as tmp:
        cfg = Path(tmp) / "agent.yaml"
        cfg.write_text(yaml.safe_dump({**base, "cameras": [CAMERA]}))
        events_path = Path(tmp) / "events.jsonl"
        cmd = [sys.executable, "-m", "agent", "track", str(VIDEO), "--config", str(cfg)]
        cmd += ["--events", str(events_path)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        events = [json.loads(x) for x in events_path.read_text().splitlines()]
    row = {"frames": summary["frames"], **analyse(events), "lines": summary["lines"]}
    info = machine_info()
    print(machine_line(info))
    cols = [
        ("frames", "frames", 0),
        ("new", "new", 0),
        ("update", "update", 0),
        ("end", "end", 0),
        ("every_new_one_end", "new=end", 0),
        ("updates_per_object_s_mean", "upd/obj/s mean", 3),
        ("updates_per_object_s_max", "upd/obj/s max", 3),
    ]
    print_table("objects on vtest.avi", cols, [row])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": info, "result": row}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
