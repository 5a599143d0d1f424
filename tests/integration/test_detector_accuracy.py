"""The bundled models find the people in real photos, in source-image pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.cv import cv2
from agent.detect.detector import Detector
from agent.detect.nms import iou_matrix
from agent.detect.runtime import SessionSpec
from agent.settings import PROJECT_ROOT

MEDIA = PROJECT_ROOT.parent / "shared" / "data" / "media"
BUS_PEOPLE = np.array(
    [[48, 396, 246, 906], [222, 405, 344, 859], [669, 392, 810, 876], [1, 556, 72, 869]],
    np.float32,
)
MODELS = sorted(p for p in (PROJECT_ROOT / "models").glob("yolo11n-pose-640-*.onnx"))


@pytest.fixture(scope="module", params=MODELS, ids=lambda p: p.stem)
def detector(request) -> Detector:
    return Detector(Path(request.param), SessionSpec(threads=2))


def _people(det: Detector, image: np.ndarray) -> np.ndarray:
    d = det.detect(image).detections
    return d.xyxy[[lbl == "person" for lbl in d.labels]]


def _match(found: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Best IoU of each expected box with any found box."""
    return iou_matrix(expected, found).max(axis=1) if len(found) else np.zeros(len(expected))


def test_bus_four_people(detector):
    """bus.jpg: the four people, each matched with IoU >= 0.9."""
    image = cv2.imread(str(MEDIA / "bus.jpg"))
    found = _people(detector, image)
    assert len(found) == 4
    assert (_match(found, BUS_PEOPLE) >= 0.9).all(), _match(found, BUS_PEOPLE)


@pytest.mark.parametrize(("name", "at_least"), [("zidane.jpg", 2), ("messi5.jpg", 2)])
def test_other_photos(detector, name, at_least):
    """zidane.jpg and messi5.jpg: people found, boxes inside the image, 17 keypoints each."""
    image = cv2.imread(str(MEDIA / name))
    d = detector.detect(image).detections
    h, w = image.shape[:2]
    assert sum(lbl == "person" for lbl in d.labels) >= at_least
    assert (d.xyxy[:, [0, 2]] >= 0).all() and (d.xyxy[:, [0, 2]] <= w).all()
    assert (d.xyxy[:, [1, 3]] >= 0).all() and (d.xyxy[:, [1, 3]] <= h).all()
    assert d.keypoints is not None and d.keypoints.shape[1:] == (17, 3)


def test_crop_and_pad_boxes_follow(detector):
    """A non-square crop and a padded copy of bus.jpg: the boxes move with the pixels."""
    image = cv2.imread(str(MEDIA / "bus.jpg"))
    x0, y0 = 30, 300
    crop = np.ascontiguousarray(image[y0:1000, x0:800])  # 770 x 700, not square
    moved = BUS_PEOPLE - np.array([x0, y0, x0, y0], np.float32)
    moved = np.clip(moved, 0, [770, 700, 770, 700])
    found = _people(detector, crop)
    assert (_match(found, moved[:3]) >= 0.85).all(), _match(found, moved[:3])
    pad = cv2.copyMakeBorder(image, 100, 0, 250, 0, cv2.BORDER_CONSTANT, value=(0, 0, 0))
    shifted = BUS_PEOPLE + np.array([250, 100, 250, 100], np.float32)
    found = _people(detector, pad)
    assert (_match(found, shifted) >= 0.85).all(), _match(found, shifted)
