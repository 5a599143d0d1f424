"""Packed regions on the real model: the people of hand-checked vtest.avi frames, each in
a tight rectangle scaled to 80 model pixels tall, packed side by side into few 320 inputs,
are found where they are in the frame (``agent.regions.pack``, real onnxruntime)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from agent.detect.detector import Detector
from agent.detect.runtime import SessionSpec
from agent.regions.merge import merge_found
from agent.regions.pack import detect_sheet, pack, trim
from agent.regions.planner import around

ROOT = Path(__file__).resolve().parents[2]
LABELS = ROOT / "bench" / "data" / "vtest_people.json"
FRAMES = (100, 380, 700)


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.fixture(scope="module")
def frames() -> dict[int, np.ndarray]:
    cap = cv2.VideoCapture(str(ROOT / "assets" / "vtest.avi"))
    out, i = {}, 0
    while len(out) < len(FRAMES):
        ok, image = cap.read()
        assert ok, f"vtest.avi ended before frame {i}"
        if i in FRAMES:
            out[i] = image
        i += 1
    cap.release()
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("any_size", [False, True], ids=["whole-sheets", "trimmed-sheets"])
def test_packed_people_are_found_in_frame_pixels(frames, any_size):
    spec = SessionSpec(("CPUExecutionProvider",), threads=1)
    det = Detector(ROOT / "models" / "yolo11n-pose-320-int8.onnx", spec, any_size=any_size)
    assert det.sheet_stride == (32 if any_size else None)
    labels = json.loads(LABELS.read_text())["frames"]
    found = runs = people = pixels = 0
    for i, image in frames.items():
        truth = labels[str(i)]["people"]
        wh = (image.shape[1], image.shape[0])
        regions = [around(tuple(b), 0.15 * (b[3] - b[1]), 0, wh) for b in truth]
        scales = [80 / (b[3] - b[1]) for b in truth]
        sheets = pack(regions, scales, det.info.input_hw, wh)
        if det.sheet_stride is not None:
            sheets = [trim(sheet, det.sheet_stride) for sheet in sheets]
        pixels += sum(sheet.hw[0] * sheet.hw[1] for sheet in sheets)
        looked = [detect_sheet(det, image, sheet)[0] for sheet in sheets]
        dets, _ = merge_found(looked, wh, iou_threshold=0.45, max_det=100)
        boxes = [dets.xyxy[k].tolist() for k in range(len(dets)) if dets.labels[k] == "person"]
        found += sum(any(iou(t, b) >= 0.5 for b in boxes) for t in truth)
        runs += len(sheets)
        people += len(truth)
    # Several people share one model run, and nearly all of them are found in place.
    assert runs <= people / 2, (runs, people)
    assert found >= 0.85 * people, (found, people)
    # Trimmed sheets cost only the pixels their regions (and a border) take.
    whole = runs * det.info.input_hw[0] * det.info.input_hw[1]
    assert pixels < 0.95 * whole if any_size else pixels == whole
