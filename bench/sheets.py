"""Region sheets: what a model run costs by its size.

    python bench/sheets.py [--seconds 4]

The bundled 320 INT8 model, made to take any size as region mode runs it, on sheets of
several sizes: ms a run and million model pixels a second with one session alone, and
with two sessions running at once on two threads (the agent's throughput layout on 2
cores). A run costs a fixed part whatever it holds and less per pixel the larger it is;
where two vCPUs share one core, the second session adds less than the first.

Drawing the sheets of several cameras' frames waiting at once side by side, to run fewer
and larger inputs, was tried with this (docs/regions.md, the twenty-third VM): the model
took 17-28 % less time a vtest.avi frame on one thread, but the live agent got no faster.

Prints a table and writes bench/results/sheets.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RESULTS, ROOT, VIDEO, machine_info, machine_line

from agent.detect.detector import Detector
from agent.detect.inputs import build_detector
from agent.settings import AgentSettings

SIZES = ((32, 32), (128, 320), (256, 288), (320, 320), (320, 640), (320, 1280), (640, 640))


def _detector() -> Detector:
    """The bundled 320 model as region mode loads it for its sheets (the defaults)."""
    settings = AgentSettings(cameras=[{"id": "c", "source": str(VIDEO), "fps": 10}])
    return build_detector(settings.detector, any_size=True)


def _runs(det: Detector, image: np.ndarray, seconds: float, out: list[float]) -> None:
    """Runs ``det`` on ``image`` for ``seconds``; appends each run's ms to ``out``."""
    for _ in range(2):
        det.detect_exact(image)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        det.detect_exact(image)
        out.append((time.perf_counter() - t0) * 1e3)


def part_sizes(seconds: float) -> list[dict[str, Any]]:
    dets = (_detector(), _detector())
    rng = np.random.default_rng(0)
    rows = []
    for hw in SIZES:
        image = rng.integers(0, 255, (*hw, 3), dtype=np.uint8)
        alone: list[float] = []
        _runs(dets[0], image, seconds, alone)
        both: list[list[float]] = [[], []]
        threads = [
            threading.Thread(target=_runs, args=(d, image, seconds, ms))
            for d, ms in zip(dets, both, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        px = hw[0] * hw[1]
        one = float(np.median(alone))
        rows.append(
            {
                "hw": list(hw),
                "ms_alone": round(one, 2),
                "mpx_s_alone": round(px / one / 1e3, 2),
                "ms_two_at_once": round(float(np.median(both[0] + both[1])), 2),
                "mpx_s_two_at_once": round(sum(len(b) for b in both) * px / seconds / 1e6, 2),
            }
        )
        r = rows[-1]
        print(f"  sizes: {hw[0]}x{hw[1]}: {r['ms_alone']} ms alone ({r['mpx_s_alone']} Mpx/s), "
              f"two at once {r['mpx_s_two_at_once']} Mpx/s in all")  # fmt: skip
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=4.0, help="seconds per size")
    args = p.parse_args()
    info = machine_info()
    out: dict[str, Any] = {"machine": info}
    print(machine_line(info))
    out["sizes"] = part_sizes(args.seconds)
    print("\nsheet size  ms alone  Mpx/s alone  ms two at once  Mpx/s two at once")
    for r in out["sizes"]:
        print(f"{r['hw'][0]:>4}x{r['hw'][1]:<5} {r['ms_alone']:>9} {r['mpx_s_alone']:>12} "
              f"{r['ms_two_at_once']:>15} {r['mpx_s_two_at_once']:>18}")  # fmt: skip
    dest = RESULTS / "sheets.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {dest.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
