"""Keypoint agreement: matching, distance as a share of box height, OKS, visibility."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.modeltools.ap import Boxes
from agent.modeltools.keypoints import COCO_SIGMAS, Poses, keypoint_agreement, score_pairs

BOX = [0, 0, 50, 100]  # height 100: a distance of d px is d % of the box height
FAR = [200, 200, 250, 300]


def _poses(boxes: list[list[float]], kps: list[list[tuple[float, float, float]]], score=None):
    return Poses.of(Boxes.of(boxes, score=score), np.asarray(kps, np.float64))


def _kp(n: int, dx: float = 0.0, dy: float = 0.0, conf: float = 0.9):
    return [(10.0 + i + dx, 20.0 + 2 * i + dy, conf) for i in range(n)]


@pytest.mark.parametrize(
    ("ref_kp", "cand_kp", "mean_pct"),
    [
        (_kp(2), _kp(2), 0.0),
        (_kp(2), _kp(2, dx=3), 3.0),
        (_kp(2), _kp(2, dx=3, dy=4), 5.0),
        # Only keypoints the reference sees count: the second (conf 0.2) is ignored.
        ([(10, 20, 0.9), (11, 22, 0.2)], [(10, 21, 0.9), (60, 90, 0.9)], 1.0),
        # The candidate's own confidence does not matter.
        ([(10, 20, 0.9)], [(12, 20, 0.01)], 2.0),
    ],
    ids=["same", "dx3", "dx3-dy4", "invisible-ignored", "cand-conf-ignored"],
)
def test_distance_is_a_share_of_box_height(ref_kp, cand_kp, mean_pct):
    """Mean distance over visible reference keypoints, in percent of the reference box height."""
    ag = keypoint_agreement([(_poses([BOX], [ref_kp]), _poses([BOX], [cand_kp]))], conf=0.25)
    assert ag.pairs == 1
    assert ag.mean_dist_pct == pytest.approx(mean_pct)
    assert ag.max_dist_pct is not None and ag.max_dist_pct >= mean_pct - 1e-9


def test_only_matched_boxes_count():
    """A candidate box with no reference box at IoU >= 0.5 adds no keypoint distance."""
    ref = _poses([BOX], [_kp(3)])
    cand = _poses([BOX, FAR], [_kp(3, dx=1), _kp(3, dx=40)], score=[0.9, 0.95])
    ag = keypoint_agreement([(ref, cand)], conf=0.25)
    assert (ag.pairs, ag.keypoints) == (1, 3)
    assert ag.mean_dist_pct == pytest.approx(1.0)


def test_pairs_are_cut_at_the_operating_threshold():
    """Candidate boxes below ``conf`` are not matched (their keypoints are not scored)."""
    ref = _poses([BOX], [_kp(2)])
    cand = _poses([BOX], [_kp(2, dx=5)], score=[0.1])
    ag = keypoint_agreement([(ref, cand)], conf=0.25)
    assert (ag.pairs, ag.keypoints, ag.mean_dist_pct, ag.mean_oks) == (0, 0, None, None)


def test_distances_pool_over_frames():
    """The mean is over every scored keypoint of every frame, not a mean of frame means."""
    one = (_poses([BOX], [_kp(1)]), _poses([BOX], [_kp(1, dx=4)]))
    three = (_poses([BOX], [_kp(3)]), _poses([BOX], [_kp(3)]))
    ag = keypoint_agreement([one, three], conf=0.25)
    assert ag.keypoints == 4
    assert ag.mean_dist_pct == pytest.approx(1.0)


@pytest.mark.parametrize("d", [0.0, 2.0, 10.0])
def test_oks_follows_coco(d):
    """OKS with the 17 COCO sigmas: exp(-d^2 / (2 s^2 k^2)), s^2 = box area, k = 2 sigma."""
    ref = _poses([BOX], [_kp(17)])
    cand = _poses([BOX], [_kp(17, dx=d)])
    s = score_pairs(ref, cand)
    want = np.mean(np.exp(-(d**2) / (2 * 50 * 100 * (2 * COCO_SIGMAS) ** 2)))
    assert s.oks.tolist() == pytest.approx([want])
    assert bool(s.oks[0] == 1.0) is (d == 0.0)


def test_no_oks_for_non_coco_keypoints():
    """A keypoint set other than COCO's 17 gets distances but no OKS."""
    ag = keypoint_agreement([(_poses([BOX], [_kp(5)]), _poses([BOX], [_kp(5, dy=2)]))], 0.25)
    assert ag.mean_dist_pct == pytest.approx(2.0)
    assert ag.mean_oks is None and ag.pairs == 1


def test_mismatched_keypoint_sets_are_an_error():
    """Two models with different keypoint counts cannot be compared."""
    with pytest.raises(ValueError, match="keypoint sets differ"):
        score_pairs(_poses([BOX], [_kp(3)]), _poses([BOX], [_kp(4)]))


def test_p95_is_a_percentile():
    """p95 is the 95th percentile of the distances (here 20 keypoints 0..19 px off)."""
    ref = _poses([BOX], [[(0.0, 0.0, 1.0)] * 20])
    cand = _poses([BOX], [[(float(i), 0.0, 1.0) for i in range(20)]])
    ag = keypoint_agreement([(ref, cand)], conf=0.25)
    assert ag.p95_dist_pct == pytest.approx(float(np.percentile(np.arange(20.0), 95)))
    assert ag.max_dist_pct == 19.0
    assert math.isclose(ag.mean_dist_pct or 0, 9.5)
