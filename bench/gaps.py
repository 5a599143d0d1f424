"""Issue 38: what a busy frame costs when the frames come further apart (a camera the box
has no time for every frame of), offline.

    python bench/gaps.py [--fps 10,5] [--also KEY=VALUE[,...]] [--out bench/results/gaps.json]

vtest.avi, whole, through the path of ``edge-agent track`` in this process (motion,
planning, the detector, the tracker), sampled at each ``--fps`` as the live reader samples
a 10 fps file: per frame looked at, the model-input pixels of its sheets and coarse look,
its regions, the share of its sheets' pixels that the regions fill (the rest: gutters,
borders, the sides' rounding to the model's stride), the share of frames with a coarse
look, and the CPU of the look (the process's: planning, the model's runs on the calling
thread and on onnxruntime's pool threads, merging, tracking); the
``new`` events too (tracks broken by the gaps), and recall and precision on the
hand-labelled frames looked at (as ``--parts accuracy`` of ``bench/regions.py`` scores the
live agent's messages, here frame for frame the same on every run).
Variants: ``defaults`` and ``--also`` (the defaults with these detector keys; repeatable).
Prints the machine and a table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness import also_variants, machine_info, machine_line, rnd, write_result
from regions import LABELS, VIDEO, report, score, video_frames

ROOT = Path(__file__).resolve().parents[1]
MEDIA_FPS = 10.0  # vtest.avi's


def one(fps: float, detector_keys: dict[str, Any], limit: int | None = None) -> dict[str, Any]:
    """vtest.avi (its first ``limit`` frames; None: all) at ``fps`` through region mode:
    per-look costs, ``new`` events, and recall and precision on the hand-labelled frames
    among those looked at (``bench/data/vtest_people.json``; None: none was)."""
    from agent.capture.pacing import file_gate
    from agent.commands.track import Offline
    from agent.regions.looker import Look
    from agent.regions.pack import model_pixels
    from agent.regions.planner import region_pixels
    from agent.settings import AgentSettings

    settings = AgentSettings(
        cameras=[{"id": "front", "source": str(VIDEO), "fps": fps}], detector=detector_keys
    )
    pipe = Offline.of(settings, settings.cameras[0])
    assert pipe.looker is not None, "region mode only"
    looks: list[Look] = []
    plan = pipe.looker.look

    def look(*a: Any, **k: Any) -> Look:
        got = plan(*a, **k)
        looks.append(got)
        return got

    pipe.looker.look = look  # type: ignore[method-assign]
    gate = file_gate(fps, MEDIA_FPS)
    labels = json.loads(LABELS.read_text())
    cpu, new, dets = [], 0, {}
    for i, image in enumerate(video_frames(VIDEO)):
        if limit is not None and i >= limit:
            break
        t = i / MEDIA_FPS
        if gate is not None and not gate.admit(t):
            continue
        # The process's CPU, not this thread's: the session's intra-op pool runs part of
        # each model run on threads of its own (this thread alone read 19.6 ms a frame
        # where the process spent 37 on an AVX2 EPYC); nothing else runs here meanwhile.
        c0 = time.process_time()
        found, out = pipe.step(image, t, 1e9 + t)
        cpu.append(time.process_time() - c0)
        new += sum(e.type == "new" for e in out.events)
        if str(i) in labels["frames"] and found is not None:
            people = zip(found.xyxy.tolist(), found.score.tolist(), found.labels, strict=True)
            dets[i] = [(b, sc) for b, sc, label in people if label == "person"]
    n = len(looks)
    sheet_px = [model_pixels(lk.sheets) for lk in looks]
    px = [
        p + (model_pixels([lk.coarse]) if lk.coarse else 0)
        for p, lk in zip(sheet_px, looks, strict=True)
    ]
    sheets = sum(sheet_px)
    plans = [lk.plan for lk in looks]
    held = sum(region_pixels(*rs) for p in plans for rs in zip(p.regions, p.scales, strict=True))
    s = score({"frames": {str(i): labels["frames"][str(i)] for i in dets}}, dets)
    return {
        "frames": n,
        "kpx_per_frame": rnd(sum(px) / n / 1e3, 1),
        "sheet_kpx_per_frame": rnd(sheets / n / 1e3, 1),
        "region_share": rnd(held / sheets, 3) if sheets else None,
        "regions_per_frame": rnd(sum(len(lk.plan.regions) for lk in looks) / n, 2),
        "coarse_share": rnd(sum(lk.coarse is not None for lk in looks) / n, 3),
        "cpu_ms_mean": rnd(1e3 * statistics.fmean(cpu), 2),
        "cpu_ms_median": rnd(1e3 * statistics.median(cpu), 2),
        "new_events": new,
        "labelled_frames": len(dets),
        "recall": rnd(s["recall"], 3),
        "precision": rnd(s["precision"], 3),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fps", default="10,5", help="sampling rates, comma-separated")
    p.add_argument("--also", action="append", default=[], metavar="KEY=VALUE[,...]")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gaps.json")
    args = p.parse_args()
    variants: dict[str, dict[str, Any]] = {"defaults": {}, **also_variants(args.also)}
    info = machine_info()
    print(machine_line(info), flush=True)
    t0 = time.monotonic()
    rows = []
    for name, keys in variants.items():
        for fps in (float(x) for x in args.fps.split(",") if x):
            rows.append({"variant": name, "fps": fps, **one(fps, keys)})
            print(f"  {name} at {fps:g} fps: {rows[-1]['kpx_per_frame']} k pixels", flush=True)
    result: dict[str, Any] = {"machine": info, "args": vars(args) | {"out": str(args.out)}}
    cols = [
        ("variant", "variant", 0),
        ("fps", "fps", 1),
        ("frames", "frames", 0),
        ("kpx_per_frame", "model k pixels / frame", 1),
        ("sheet_kpx_per_frame", "of them sheets", 1),
        ("region_share", "regions' share of the sheets", 3),
        ("regions_per_frame", "regions / frame", 2),
        ("coarse_share", "frames with a coarse look", 3),
        ("cpu_ms_mean", "CPU ms / frame, mean", 2),
        ("cpu_ms_median", "median", 2),
        ("new_events", "new events", 0),
        ("labelled_frames", "labelled frames", 0),
        ("recall", "recall", 3),
        ("precision", "precision", 3),
    ]
    report(result, "gaps", "\nvtest.avi in region mode at each sampling rate (offline)", cols, rows)
    write_result(result, args.out, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
