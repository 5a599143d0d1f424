"""Detection metrics: matching, all-point AP, mAP and agreement on hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.modeltools.ap import Boxes, agreement, average_precision, match, mean_ap

A = [0, 0, 10, 10]
B = [20, 20, 30, 30]
C = [40, 40, 50, 50]
A_SHIFT = [1, 0, 11, 10]  # IoU with A = 90 / 110
A_HALF = [5, 0, 15, 10]  # IoU with A = 50 / 150 (below 0.5)


@pytest.mark.parametrize(
    ("tp", "score", "n_gt", "expected"),
    [
        ([True], [0.9], 1, 1.0),
        ([True, True], [0.9, 0.8], 2, 1.0),
        ([False], [0.9], 1, 0.0),
        ([], [], 3, 0.0),
        # FP ranked first, then a TP: precision 1/2 at recall 1.
        ([False, True], [0.9, 0.8], 1, 0.5),
        # TP, FP, TP over 2 truths: P(R=.5)=1, P(R=1)=2/3 -> 0.5*1 + 0.5*2/3.
        ([True, False, True], [0.9, 0.8, 0.7], 2, 0.5 + 1 / 3),
        # Envelope: TP, FP, FP, TP, TP over 3: P at R=1/3 is 1, then max(P at R>=2/3)=3/5.
        ([True, False, False, True, True], [0.9, 0.8, 0.7, 0.6, 0.5], 3, 1 / 3 + 2 / 3 * 3 / 5),
        # Half the truths never found: recall stops at 0.5.
        ([True], [0.9], 2, 0.5),
        # Order comes from the scores, not from the input order.
        ([True, False], [0.1, 0.9], 1, 0.5),
    ],
    ids=[
        "one-hit",
        "two-hits",
        "one-miss",
        "no-predictions",
        "fp-first",
        "tp-fp-tp",
        "envelope",
        "half-recall",
        "sorted-by-score",
    ],
)
def test_average_precision(tp, score, n_gt, expected):
    """All-point interpolated AP matches the hand-computed area under the envelope."""
    got = average_precision(np.array(tp, bool), np.array(score, float), n_gt)
    assert got == pytest.approx(expected)


def test_average_precision_needs_ground_truth():
    """AP with no ground truth is undefined and refused."""
    with pytest.raises(ValueError, match="ground-truth"):
        average_precision(np.array([True]), np.array([0.5]), 0)


@pytest.mark.parametrize(
    ("gt", "pred", "scores", "tp", "gt_found"),
    [
        ([A], [A_SHIFT], [0.9], [True], [True]),
        ([A], [A_HALF], [0.9], [False], [False]),
        # Duplicate: the higher score takes the truth, the other is a false positive.
        ([A], [A, A_SHIFT], [0.5, 0.9], [False, True], [True]),
        # Each prediction takes the best *unmatched* truth (COCO rule).
        ([A, A_SHIFT], [A, A], [0.9, 0.8], [True, True], [True, True]),
        ([A, B], [C], [0.9], [False], [False, False]),
        ([], [A], [0.9], [False], []),
        ([A], [], [], [], [False]),
    ],
    ids=["shifted", "below-iou", "duplicate", "best-unmatched", "elsewhere", "no-gt", "no-pred"],
)
def test_match(gt, pred, scores, tp, gt_found):
    """Greedy matching by descending score, IoU >= 0.5, one truth per prediction."""
    m = match(Boxes.of(gt), Boxes.of(pred, score=scores))
    assert m.tp.tolist() == tp
    assert m.gt_matched.tolist() == gt_found


def test_match_is_class_aware():
    """A box of another class never matches, however well it overlaps."""
    m = match(Boxes.of([A], [0]), Boxes.of([A], [1], [0.9]))
    assert m.tp.tolist() == [False]


def test_mean_ap_over_classes_and_images():
    """mAP averages per-class APs pooled over images; classes without truth are ignored."""
    pairs = [
        (Boxes.of([A, B], [0, 1]), Boxes.of([A, B], [0, 1], [0.9, 0.8])),
        # Image 2: class 0 found after a false positive; class 2 predicted, never in truth.
        (Boxes.of([C], [0]), Boxes.of([B, C, A], [0, 0, 2], [0.95, 0.7, 0.6])),
    ]
    r = mean_ap(pairs)
    # Class 0 ranking over both images: 0.95 FP, 0.9 TP (P 1/2), 0.7 TP (P 2/3), 2 truths;
    # the envelope lifts P at recall 1/2 to 2/3.
    assert r.per_class[0] == pytest.approx(2 / 3)
    assert r.per_class[1] == pytest.approx(1.0)
    assert set(r.per_class) == {0, 1}
    assert r.map == pytest.approx((2 / 3 + 1.0) / 2)
    assert (r.n_gt, r.n_pred) == (3, 5)


def test_mean_ap_without_ground_truth_is_none():
    """No truth anywhere: AP is undefined (None), not zero or one."""
    assert mean_ap([(Boxes.of([]), Boxes.of([A], score=[0.9]))]).map is None


def test_agreement_counts_at_operating_threshold():
    """AP ranks every candidate; matched/missed/extra/IoU only count those >= conf."""
    ref = Boxes.of([A, B])
    cand = Boxes.of([A_SHIFT, B, C], score=[0.9, 0.2, 0.3])
    a = agreement([(ref, cand)], conf=0.25)
    # Ranking: A_SHIFT TP, C FP, B TP -> AP = 0.5 * 1 + 0.5 * 2/3.
    assert a.ap50 == pytest.approx(0.5 + 1 / 3)
    assert (a.frames, a.reference, a.candidate) == (1, 2, 2)
    assert (a.matched, a.missed, a.extra) == (1, 1, 1)
    assert a.mean_iou == pytest.approx(90 / 110)


def test_agreement_identical_is_perfect():
    """A candidate equal to the reference agrees perfectly."""
    boxes = Boxes.of([A, B, C], [0, 1, 0], [0.9, 0.8, 0.7])
    a = agreement([(boxes.above(0.25), boxes)] * 3, conf=0.25)
    assert a.ap50 == pytest.approx(1.0)
    assert (a.missed, a.extra) == (0, 0)
    assert a.mean_iou == pytest.approx(1.0)


def test_agreement_empty_frames():
    """Frames where neither model finds anything: AP None, no IoU, nothing missed."""
    a = agreement([(Boxes.of([]), Boxes.of([]))], conf=0.25)
    assert a.ap50 is None
    assert a.mean_iou is None
    assert (a.missed, a.extra) == (0, 0)


def test_boxes_validates_shapes():
    """Boxes with mismatched array lengths are rejected with both shapes in the message."""
    with pytest.raises(ValueError, match="expected xyxy"):
        Boxes(np.zeros((2, 4)), np.zeros(3), np.zeros(2, np.int64))
    assert math.isclose(float(Boxes.of([A]).score[0]), 1.0)
