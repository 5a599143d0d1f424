"""Region sheets: what a model run costs by its size, and what drawing several frames'
sheets side by side (the engine's batches, ``agent.regions.pack.stack_frames``) saves.

    python bench/sheets.py [--parts sizes,batch] [--seconds 4] [--video PATH]

- ``sizes``: the bundled 320 INT8 model, made to take any size as region mode runs it, on
  sheets of several sizes: ms a run and million model pixels a second with one session
  alone, and with two sessions running at once on two threads (the agent's throughput
  layout on 2 cores).
- ``batch``: the plans of every frame of vtest.avi (or ``--video``: the close-up clip of
  ``bench/nearstill.py``, say) as the agent makes them (one camera,
  the embedded defaults, ``Offline``), each frame on its own sheets (as a camera the box
  keeps up with) and k frames' sheets side by side (k = 2-4; frames about 10 s of the
  clip apart, as other cameras' frames): the model's ms a frame and the stacking's, and
  whether the people each frame finds plainly alone (score >= 0.5) come back together.

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

from harness import VIDEO, machine_info, machine_line

from agent.commands.track import Offline
from agent.detect.detector import Detector
from agent.detect.inputs import build_detector
from agent.detect.nms import iou_matrix
from agent.modeltools.media import read_video_frames
from agent.regions import pack
from agent.regions.looker import Look
from agent.regions.merge import Found
from agent.settings import AgentSettings

ROOT = Path(__file__).resolve().parent.parent
SIZES = ((32, 32), (128, 320), (256, 288), (320, 320), (320, 640), (320, 1280), (640, 640))
#: Frames of a batch are this many frames of the clip apart (other cameras' frames).
APART = 97


def _settings(video: Path = VIDEO) -> AgentSettings:
    return AgentSettings(cameras=[{"id": "c", "source": str(video), "fps": 10}])


def _detector() -> Detector:
    return build_detector(_settings().detector, any_size=True)


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


def _looks(video: Path) -> tuple[list[np.ndarray], list[Look], Detector]:
    """The video's frames and each frame's look, as one camera of the defaults plans them."""
    settings = _settings(video)
    pipe = Offline.of(settings, settings.cameras[0])
    looker = pipe.looker
    assert looker is not None
    looks: list[Look] = []
    plan = looker.look

    def recording(*a: Any, **kw: Any) -> Look:
        look = plan(*a, **kw)
        looks.append(look)
        return look

    looker.look = recording  # type: ignore[method-assign]
    frames = [f.image for f in read_video_frames(video, range(10**6))]
    for i, image in enumerate(frames):
        pipe.step(image, i / 10, 1.7e9 + i / 10)
    return frames, looks, pipe.detector


def _plain(found: list[Found], score: float) -> tuple[np.ndarray, np.ndarray]:
    boxes = [f.dets.xyxy[f.dets.score >= score] for f in found]
    scores = [f.dets.score[f.dets.score >= score] for f in found]
    if not boxes:
        return np.zeros((0, 4), np.float32), np.zeros(0, np.float32)
    return np.concatenate(boxes), np.concatenate(scores)


def part_batch(video: Path) -> list[dict[str, Any]]:
    frames, looks, det = _looks(video)
    planned = [i for i, look in enumerate(looks) if look.plan.regions and i >= 30]
    n = len(planned)
    rows = []
    for k in (1, 2, 3, 4):
        model_ms = stack_ms = 0.0
        runs = count = plain = kept = plain_any = 0
        diffs: list[float] = []
        for start in range(0, n - (k - 1) * APART, 5):
            group = [planned[start + j * APART] for j in range(k)]
            images = [frames[g] for g in group]
            t0 = time.perf_counter()
            sheets = pack.stack_frames([looks[g].sheets for g in group], det.info.input_hw)
            stack_ms += (time.perf_counter() - t0) * 1e3
            together: list[list[Found]] = [[] for _ in group]
            for sheet in sheets:
                found, times = pack.detect_frames(det, images, sheet)
                model_ms += times.inference_ms
                runs += 1
                for j, f in enumerate(found):
                    together[j].append(f)
            count += k
            if k == 1:
                continue
            for j, g in enumerate(group):
                alone = [pack.detect_sheet(det, images[j], s)[0] for s in looks[g].sheets]
                want, want_score = _plain(alone, 0.5)
                got, _ = _plain(together[j], 0.5)
                any_box, any_score = _plain(together[j], 0.0)
                plain += len(want)
                if len(want) and len(got):
                    kept += int((iou_matrix(want, got).max(axis=1) >= 0.5).sum())
                if len(want) and len(any_box):
                    iou = iou_matrix(want, any_box)
                    hit = iou.max(axis=1) >= 0.5
                    plain_any += int(hit.sum())
                    diffs += (any_score[iou.argmax(axis=1)][hit] - want_score[hit]).tolist()
        row: dict[str, Any] = {
            "frames_together": k,
            "frames": count,
            "model_ms_per_frame": round(model_ms / count, 2),
            "stack_ms_per_frame": round(stack_ms / count, 2),
            "runs_per_frame": round(runs / count, 2),
        }
        if k > 1:
            row |= {
                "plain_alone": plain,
                "plain_kept": round(kept / plain, 3),
                "plain_found_any_score": round(plain_any / plain, 3),
                "mean_score_change": round(float(np.mean(diffs)), 3),
            }
        rows.append(row)
        print(f"  batch: {k} together: {row}")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="sizes,batch")
    p.add_argument("--seconds", type=float, default=4.0, help="sizes: seconds per size")
    p.add_argument("--video", type=Path, default=VIDEO, help="batch: the clip (vtest.avi)")
    args = p.parse_args()
    parts = args.parts.split(",")
    info = machine_info()
    out: dict[str, Any] = {"machine": info}
    print(machine_line(info))
    if "sizes" in parts:
        out["sizes"] = part_sizes(args.seconds)
    if "batch" in parts:
        out["video"] = str(args.video)
        out["batch"] = part_batch(args.video)
    if "sizes" in out:
        print("\nsheet size  ms alone  Mpx/s alone  ms two at once  Mpx/s two at once")
        for r in out["sizes"]:
            print(f"{r['hw'][0]:>4}x{r['hw'][1]:<5} {r['ms_alone']:>9} {r['mpx_s_alone']:>12} "
                  f"{r['ms_two_at_once']:>15} {r['mpx_s_two_at_once']:>18}")  # fmt: skip
    if "batch" in out:
        heads = ["together", "model ms/frame", "stack ms/frame", "runs/frame", "plain kept",
                 "any score", "score change"]  # fmt: skip
        print("\n" + "  ".join(f"{h:>13}" for h in heads))
        for r in out["batch"]:
            keys = ["frames_together", "model_ms_per_frame", "stack_ms_per_frame", "runs_per_frame",
                    "plain_kept", "plain_found_any_score", "mean_score_change"]  # fmt: skip
            cells = [r.get(k, "-") for k in keys]
            print("  ".join(f"{c!s:>13}" for c in cells))
    dest = ROOT / "bench" / "results" / "sheets.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {dest.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
