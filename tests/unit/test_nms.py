"""Class-aware NMS: a table of overlap cases, max_det and empty input."""

from __future__ import annotations

import numpy as np
import pytest

from agent.detect.nms import iou_matrix, nms


def _run(boxes, scores, classes, iou=0.5, max_det=100):
    return nms(
        np.array(boxes, np.float32).reshape(-1, 4),
        np.array(scores, np.float32),
        np.array(classes, np.int32),
        iou_threshold=iou,
        max_det=max_det,
    ).tolist()


@pytest.mark.parametrize(
    ("boxes", "scores", "classes", "iou", "max_det", "kept"),
    [
        # identical boxes, same class: only the best survives
        ([[0, 0, 10, 10], [0, 0, 10, 10]], [0.9, 0.8], [0, 0], 0.5, 100, [0]),
        # identical boxes, different classes: both survive (class-aware)
        ([[0, 0, 10, 10], [0, 0, 10, 10]], [0.9, 0.8], [0, 1], 0.5, 100, [0, 1]),
        # IoU 0.25 < 0.5: both survive, ordered by score
        ([[0, 0, 10, 10], [5, 0, 15, 10]], [0.7, 0.9], [0, 0], 0.5, 100, [1, 0]),
        # IoU ~0.33 > 0.3 threshold: the weaker is suppressed
        ([[0, 0, 10, 10], [5, 0, 15, 10]], [0.7, 0.9], [0, 0], 0.3, 100, [1]),
        # disjoint boxes, max_det caps to the best two
        (
            [[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5], [6, 6, 7, 7]],
            [0.1, 0.4, 0.3, 0.2],
            [0, 0, 0, 0],
            0.5,
            2,
            [1, 2],
        ),
        # empty input
        ([], [], [], 0.5, 100, []),
        # chain: A suppresses B, B would suppress C, but C survives because B is gone
        (
            [[0, 0, 10, 10], [4, 0, 14, 10], [8, 0, 18, 10]],
            [0.9, 0.8, 0.7],
            [0, 0, 0],
            0.4,
            100,
            [0, 2],
        ),
    ],
)
def test_nms_cases(boxes, scores, classes, iou, max_det, kept):
    """NMS keeps exactly the expected indices, highest score first."""
    assert _run(boxes, scores, classes, iou, max_det) == kept


def test_many_candidates_keeps_best_per_cluster():
    """With hundreds of jittered copies of 3 objects, one box per object survives."""
    rng = np.random.default_rng(0)
    centres = np.array([[50, 50], [200, 80], [400, 300]], np.float32)
    boxes, scores = [], []
    for c in centres:
        for _ in range(100):
            j = rng.normal(0, 0.5, 2)  # small jitter: copies overlap with IoU > 0.9
            boxes.append([*(c - 20 + j), *(c + 20 + j)])
            scores.append(rng.uniform(0.3, 0.9))
    kept = _run(boxes, scores, [0] * len(scores), 0.5)
    assert len(kept) == 3
    for k in kept:
        cluster = k // 100
        assert scores[k] == max(scores[cluster * 100 : cluster * 100 + 100])


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([0, 0, 10, 10], [0, 0, 10, 10], 1.0),
        ([0, 0, 10, 10], [10, 10, 20, 20], 0.0),
        ([0, 0, 10, 10], [5, 0, 15, 10], 1 / 3),
        ([0, 0, 10, 10], [2, 2, 8, 8], 0.36),
        ([0, 0, 0, 0], [0, 0, 0, 0], 0.0),
    ],
)
def test_iou_matrix(a, b, expected):
    """iou_matrix agrees with hand-computed IoUs, including degenerate boxes."""
    got = iou_matrix(np.array([a], np.float32), np.array([b], np.float32))
    assert got[0, 0] == pytest.approx(expected)
