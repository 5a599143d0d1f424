"""Keypoint agreement of a candidate pose model with a reference pose model.

Boxes are matched as in ``ap.match`` (IoU >= 0.5, same class, greedy by candidate score),
both at the operating threshold. For every matched pair, each keypoint the reference sees
(its confidence >= ``visible``) is scored by its distance to the candidate's, as a share
of the reference box's height (so a figure means the same for a near and a far person),
and by COCO's object keypoint similarity (OKS, with the 17 COCO person sigmas; none for
other keypoint sets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.modeltools.ap import Boxes, match

Array = npt.NDArray[np.float64]

#: COCO person keypoint sigmas (nose, eyes, ears, shoulders, elbows, wrists, hips, knees,
#: ankles), as in pycocotools.
COCO_SIGMAS = np.array(
    [
        *(0.026, 0.025, 0.025, 0.035, 0.035),
        *(0.079, 0.079, 0.072, 0.072, 0.062, 0.062),
        *(0.107, 0.107, 0.087, 0.087, 0.089, 0.089),
    ],
    np.float64,
)
VISIBLE = 0.5  # keypoint confidence at which the reference's keypoint counts


@dataclass(frozen=True, slots=True)
class Poses:
    """One image's detections with keypoints: boxes and (n, K, 3) keypoints (x, y, conf)."""

    boxes: Boxes
    keypoints_xyc: Array

    def __post_init__(self) -> None:
        kp = self.keypoints_xyc
        if kp.ndim != 3 or kp.shape[0] != len(self.boxes) or kp.shape[2] != 3:
            raise ValueError(f"Poses: expected ({len(self.boxes)}, K, 3) keypoints, got {kp.shape}")

    @classmethod
    def of(cls, boxes: Boxes, keypoints_xyc: npt.ArrayLike) -> Poses:
        kp = np.asarray(keypoints_xyc, np.float64)
        return cls(boxes, kp.reshape(len(boxes), -1, 3) if kp.size else kp.reshape(0, 0, 3))

    def above(self, threshold: float) -> Poses:
        keep = self.boxes.score >= threshold
        return Poses(self.boxes.above(threshold), self.keypoints_xyc[keep])


@dataclass(frozen=True, slots=True)
class PairScores:
    """Per matched pair: distances as a share of the box height, and OKS (NaN if none)."""

    pairs: int  # matched pairs with at least one visible reference keypoint
    dist_frac: Array  # one entry per visible reference keypoint, all pairs together
    oks: Array  # one entry per such pair (COCO's 17 keypoints only, else empty)


def score_pairs(ref: Poses, cand: Poses, iou: float = 0.5, visible: float = VISIBLE) -> PairScores:
    """Keypoint distances and OKS of ``cand``'s boxes matched to ``ref``'s."""
    m = match(ref.boxes, cand.boxes, iou)
    dists: list[Array] = []
    oks: list[float] = []
    for ci, ri in enumerate(m.pred_gt.tolist()):
        if ri < 0:
            continue
        r, c = ref.keypoints_xyc[ri], cand.keypoints_xyc[ci]
        if r.shape != c.shape:
            raise ValueError(f"keypoint sets differ: reference {r.shape}, candidate {c.shape}")
        seen = r[:, 2] >= visible
        if not seen.any():
            continue
        x1, y1, x2, y2 = ref.boxes.xyxy[ri]
        height = max(float(y2 - y1), 1.0)
        d = np.hypot(*(r[seen, :2] - c[seen, :2]).T)
        dists.append(d / height)
        if len(r) == len(COCO_SIGMAS):
            area = max(float((x2 - x1) * (y2 - y1)), 1.0)
            k2 = (2 * COCO_SIGMAS[seen]) ** 2
            oks.append(float(np.mean(np.exp(-(d**2) / (2 * area * k2)))))
    return PairScores(
        len(dists), np.concatenate(dists) if dists else np.zeros(0), np.asarray(oks, np.float64)
    )


@dataclass(frozen=True, slots=True)
class KeypointAgreement:
    """Keypoint agreement over frames (None where no matched pair had a visible keypoint).

    ``mean_dist_pct``/``p95_dist_pct``/``max_dist_pct``: distance from the reference's
    keypoint, in percent of the reference box height; ``mean_oks``: mean OKS per pair.
    """

    pairs: int
    keypoints: int
    mean_dist_pct: float | None
    p95_dist_pct: float | None
    max_dist_pct: float | None
    mean_oks: float | None


def keypoint_agreement(
    frames: Sequence[tuple[Poses, Poses]], conf: float, iou: float = 0.5
) -> KeypointAgreement:
    """Agreement over frames given as (reference, candidate), both cut at ``conf``."""
    scores = [score_pairs(r.above(conf), c.above(conf), iou) for r, c in frames]
    d = np.concatenate([s.dist_frac for s in scores]) * 100 if scores else np.zeros(0)
    oks = np.concatenate([s.oks for s in scores]) if scores else np.zeros(0)
    pairs = sum(s.pairs for s in scores)
    if not len(d):
        return KeypointAgreement(pairs, 0, None, None, None, None)
    return KeypointAgreement(
        pairs=pairs,
        keypoints=len(d),
        mean_dist_pct=float(d.mean()),
        p95_dist_pct=float(np.percentile(d, 95)),
        max_dist_pct=float(d.max()),
        mean_oks=float(oks.mean()) if len(oks) else None,
    )
