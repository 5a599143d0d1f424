"""Issue 38: far people standing still from the first frame, in region mode.

    python bench/farstill.py [--frames 100,300,500,700] [--seconds 20]
                             [--also KEY=VALUE[,...]] [--out bench/results/farstill.json]

A camera that starts while small, far people stand still has no motion to look at: region
mode finds them with the coarse look (the whole frame, on the first frame) when they are big
enough for it, else with the sweep (one square of the frame every ``detector.sweep_s``). A
hand-checked frame of vtest.avi (bench/data/vtest_people.json, people 55-100 px tall on a
576 px frame) is frozen, with fresh Gaussian sensor noise each frame (sigma 3 grey levels,
fixed seed), for ``--seconds`` at 10 fps, and run offline in this process through the path of
``edge-agent track`` (motion, planning, the detector, the tracker; the frame at t = i / 10,
as a 10 fps camera gives it): for each labelled person, the time of the first frame whose
detections hold them (IoU >= 0.5). Variants: ``full`` (``regions: full``), ``defaults``, and
``--also`` (the defaults with these detector keys; repeatable). Prints the machine and a
table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import also_variants, machine_info, machine_line, rnd, write_result
from regions import LABELS, VIDEO, iou, report, video_frames

ROOT = Path(__file__).resolve().parents[1]
FPS = 10
SIGMA = 3.0


def first_seen(
    image: np.ndarray, people: list[list[float]], detector_keys: dict[str, Any], seconds: float
) -> list[float | None]:
    """Seconds from the first frame to the first frame holding each of ``people``."""
    from agent.commands.track import Offline
    from agent.settings import AgentSettings

    settings = AgentSettings(
        cameras=[{"id": "front", "source": str(VIDEO), "fps": FPS}], detector=detector_keys
    )
    pipe = Offline.of(settings, settings.cameras[0])
    rng = np.random.default_rng(0)
    first: list[float | None] = [None] * len(people)
    for i in range(int(seconds * FPS)):
        noisy = image.astype(np.float32) + rng.normal(0.0, SIGMA, image.shape)
        frame = np.clip(noisy, 0, 255).astype(np.uint8)
        dets, _ = pipe.step(frame, i / FPS, 1e9 + i / FPS)
        if dets is None:
            continue
        boxes = dets.xyxy.tolist()
        for k, person in enumerate(people):
            if first[k] is None and any(iou(person, b) >= 0.5 for b in boxes):
                first[k] = i / FPS
    return first


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", default="100,300,500,700", help="vtest.avi's labelled frames")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--also", action="append", default=[], metavar="KEY=VALUE[,...]")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "farstill.json")
    args = p.parse_args()
    labels = json.loads(LABELS.read_text())["frames"]
    wanted = [int(f) for f in args.frames.split(",") if f]
    images = {i: img for i, img in enumerate(video_frames(VIDEO)) if i in wanted}
    variants: dict[str, dict[str, Any]] = {
        "full": {"regions": "full"},
        "defaults": {},
        **also_variants(args.also),
    }
    info = machine_info()
    print(machine_line(info), flush=True)
    t0 = time.monotonic()
    rows, detail = [], []
    for name, keys in variants.items():
        times: list[float | None] = []
        for f in wanted:
            seen = first_seen(images[f], labels[str(f)]["people"], keys, args.seconds)
            detail.append({"variant": name, "frame": f, "first_seen_s": seen})
            times += seen
        found = sorted(t for t in times if t is not None)
        rows.append(
            {
                "variant": name,
                "people": len(times),
                "at_start": sum(t == 0.0 for t in found),
                "found": len(found),
                "median_s": rnd(float(np.median(found)), 1) if found else None,
                "last_s": found[-1] if found else None,
            }
        )
        print(f"  {name}: {len(found)} of {len(times)} found", flush=True)
    result: dict[str, Any] = {"machine": info, "args": vars(args) | {"out": str(args.out)}}
    cols = [
        ("variant", "variant", 0),
        ("people", "people", 0),
        ("at_start", "on the first frame", 0),
        ("found", f"found in {args.seconds:g} s", 0),
        ("median_s", "median s", 1),
        ("last_s", "last s", 1),
    ]
    title = (
        f"\nfar people still from the first frame (vtest.avi frames {args.frames} frozen, "
        f"{FPS} fps, offline)"
    )
    report(result, "farstill", title, cols, rows)
    result["detail"] = detail
    write_result(result, args.out, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
