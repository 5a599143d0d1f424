"""Proposes person boxes for hand-checking on frames of vtest.avi (the labels' first step).

    python bench/label_propose.py [--every 40] [--first 20] [--out DIR]

Slow and exhaustive on purpose: the bundled FP32 model (``yolo11n-pose-640-fp32.onnx``)
on the whole frame plus overlapping 320 px tiles upscaled 2x to the model's 640 input
(stride 224 px, so 96 px of overlap), merged with class-agnostic NMS (IoU 0.5) and a
containment rule (a box mostly inside a higher-scoring one is dropped). Writes
``proposals.json`` (same layout as bench/data/vtest_people.json) and one PNG per frame
with the boxes drawn and numbered, for checking by eye. The checked result is
bench/data/vtest_people.json; this script is how its first draft was made.

Frame index = 0-based decode order of OpenCV's sequential read, the same numbering as the
agent's DetectionMessage ``frame_id`` for a file source (it counts from 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.detect.detector import Detector, Thresholds  # noqa: E402
from agent.detect.runtime import SessionSpec  # noqa: E402

VIDEO = ROOT / "assets" / "vtest.avi"
MODEL = ROOT / "models" / "yolo11n-pose-640-fp32.onnx"
TILE, STRIDE, SCALE = 320, 224, 2.0


def tile_origins(size: int) -> list[int]:
    """Tile starts along one axis so tiles of TILE px cover ``size`` with overlap."""
    starts = list(range(0, max(1, size - TILE) + 1, STRIDE))
    if starts[-1] + TILE < size:
        starts.append(size - TILE)
    return starts


def iou_and_cover(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """IoU of two xyxy boxes, and the share of ``b``'s area inside ``a``."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    return inter / max(1e-6, area_a + area_b - inter), inter / max(1e-6, area_b)


def propose(det: Detector, image: np.ndarray) -> list[tuple[list[float], float]]:
    boxes: list[np.ndarray] = []
    scores: list[float] = []
    r = det.detect(image).detections
    boxes += list(r.xyxy)
    scores += r.score.tolist()
    h, w = image.shape[:2]
    for y in tile_origins(h):
        for x in tile_origins(w):
            crop = image[y : y + TILE, x : x + TILE]
            up = cv2.resize(crop, None, fx=SCALE, fy=SCALE, interpolation=cv2.INTER_LINEAR)
            d = det.detect(up).detections
            for b, s in zip(d.xyxy, d.score.tolist(), strict=True):
                boxes.append(b / SCALE + np.array([x, y, x, y], dtype=np.float32))
                scores.append(s)
    order = np.argsort(-np.asarray(scores))
    kept: list[int] = []
    for i in order:
        clashes = (iou_and_cover(boxes[k], boxes[i]) for k in kept)
        if all(io < 0.5 and cov < 0.8 for io, cov in clashes):
            kept.append(int(i))
    return [([round(float(v), 1) for v in boxes[i]], round(scores[i], 3)) for i in kept]


def draw(image: np.ndarray, people: list[list[float]], dont_care: list[list[float]]) -> np.ndarray:
    out = image.copy()
    for color, group, tag in (((0, 255, 0), people, "p"), ((0, 200, 255), dont_care, "d")):
        for i, b in enumerate(group):
            x1, y1, x2, y2 = (round(v) for v in b)
            cv2.rectangle(out, (x1, y1), (x2, y2), color, 1)
            cv2.putText(out, f"{tag}{i}", (x1, max(10, y1 - 2)), 0, 0.4, color, 1, cv2.LINE_AA)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=int, default=40)
    p.add_argument("--first", type=int, default=20)
    p.add_argument("--conf", type=float, default=0.3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "labels")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = SessionSpec(providers=("CPUExecutionProvider",), threads=1)
    det = Detector(MODEL, spec, thresholds=Thresholds(conf=args.conf, classes=("person",)))
    cap = cv2.VideoCapture(str(VIDEO))
    frames: dict[str, dict[str, list[list[float]]]] = {}
    scores: dict[str, list[float]] = {}
    idx = -1
    while True:
        ok, image = cap.read()
        if not ok:
            break
        idx += 1
        if idx < args.first or (idx - args.first) % args.every:
            continue
        found = propose(det, image)
        people = [b for b, _ in found if b[3] - b[1] >= 40]
        small = [b for b, _ in found if b[3] - b[1] < 40]
        frames[str(idx)] = {"people": people, "dont_care": small}
        scores[str(idx)] = [s for b, s in found if b[3] - b[1] >= 40]
        cv2.imwrite(str(args.out / f"frame{idx:03d}.png"), draw(image, people, small))
        print(idx, len(people), len(small), flush=True)
    doc = {"source": "vtest.avi", "method": "proposals, not checked", "frames": frames}
    (args.out / "proposals.json").write_text(json.dumps(doc, indent=1))
    (args.out / "scores.json").write_text(json.dumps(scores, indent=1))


if __name__ == "__main__":
    main()
