"""Detection metrics on arrays: per-image matching, all-point interpolated AP, agreement.

Matching (COCO rule): per image and class, predictions in descending score order each
take the unmatched ground-truth box of highest IoU, if that IoU is >= the threshold;
otherwise they are false positives. AP per class is the area under the precision envelope
(VOC 2010+ / COCO "all-point" interpolation, no 101-point sampling); mAP is the mean over
classes that have ground truth. With no ground truth at all, AP is None (undefined).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.detect.nms import iou_matrix

Array = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Boxes:
    """Boxes of one image: xyxy (n, 4), score (n,) (1.0 for ground truth), class_id (n,)."""

    xyxy: npt.NDArray[np.float64]
    score: npt.NDArray[np.float64]
    class_id: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        n = len(self.score)
        if self.xyxy.shape != (n, 4) or self.class_id.shape != (n,):
            raise ValueError(
                f"Boxes: expected xyxy ({n}, 4) and class_id ({n},), "
                f"got {self.xyxy.shape} and {self.class_id.shape}"
            )

    @classmethod
    def of(
        cls,
        xyxy: Sequence[Sequence[float]] | npt.NDArray[np.floating],
        class_id: Sequence[int] | npt.NDArray[np.integer] | None = None,
        score: Sequence[float] | npt.NDArray[np.floating] | None = None,
    ) -> Boxes:
        """Build from lists/arrays; class 0 and score 1.0 when not given."""
        b = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4)
        n = len(b)
        c = np.zeros(n, np.int64) if class_id is None else np.asarray(class_id, np.int64)
        s = np.ones(n, np.float64) if score is None else np.asarray(score, np.float64)
        return cls(b, s.reshape(n), c.reshape(n))

    def above(self, threshold: float) -> Boxes:
        keep = self.score >= threshold
        return Boxes(self.xyxy[keep], self.score[keep], self.class_id[keep])

    def __len__(self) -> int:
        return len(self.score)


@dataclass(frozen=True, slots=True)
class Matches:
    """Result of matching one image's predictions to its ground truth.

    ``pred_iou[i]`` is the IoU with the matched ground truth, or NaN for a false positive;
    ``gt_matched[j]`` says whether ground truth j was found.
    """

    pred_iou: Array
    gt_matched: npt.NDArray[np.bool_]
    #: index of the ground truth each prediction matched, -1 for a false positive
    pred_gt: npt.NDArray[np.int64]

    @property
    def tp(self) -> npt.NDArray[np.bool_]:
        return ~np.isnan(self.pred_iou)


def match(gt: Boxes, pred: Boxes, iou_threshold: float = 0.5) -> Matches:
    """Greedy COCO matching of ``pred`` (by descending score) to ``gt``, class by class."""
    pred_iou = np.full(len(pred), np.nan)
    gt_matched = np.zeros(len(gt), dtype=bool)
    pred_gt = np.full(len(pred), -1, np.int64)
    if len(pred) == 0 or len(gt) == 0:
        return Matches(pred_iou, gt_matched, pred_gt)
    ious = iou_matrix(pred.xyxy, gt.xyxy)
    ious[pred.class_id[:, None] != gt.class_id[None, :]] = -1.0
    for i in np.argsort(-pred.score, kind="stable"):
        row = np.where(gt_matched, -1.0, ious[i])
        j = int(np.argmax(row))
        if row[j] >= iou_threshold:
            gt_matched[j] = True
            pred_iou[i] = row[j]
            pred_gt[i] = j
    return Matches(pred_iou, gt_matched, pred_gt)


def average_precision(tp: npt.NDArray[np.bool_], score: Array, n_gt: int) -> float:
    """All-point interpolated AP of predictions (``tp`` flags, scores) against ``n_gt`` truths."""
    if n_gt <= 0:
        raise ValueError("average_precision needs at least one ground-truth box")
    if len(tp) == 0:
        return 0.0
    order = np.argsort(-score, kind="stable")
    hits = tp[order].astype(np.float64)
    tps = np.cumsum(hits)
    fps = np.cumsum(1.0 - hits)
    recall = tps / n_gt
    precision = tps / np.maximum(tps + fps, np.finfo(np.float64).eps)
    # Precision envelope: the best precision at any recall >= r, then area under the steps.
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


@dataclass(frozen=True, slots=True)
class ApResult:
    """mAP over classes with ground truth (None when there is none) and the per-class APs."""

    map: float | None
    per_class: dict[int, float]
    n_gt: int
    n_pred: int


def mean_ap(pairs: Sequence[tuple[Boxes, Boxes]], iou_threshold: float = 0.5) -> ApResult:
    """mAP@``iou_threshold`` over images given as (ground truth, predictions) pairs."""
    tps: list[npt.NDArray[np.bool_]] = []
    scores: list[Array] = []
    classes: list[npt.NDArray[np.int64]] = []
    gt_classes: list[npt.NDArray[np.int64]] = []
    for gt, pred in pairs:
        m = match(gt, pred, iou_threshold)
        tps.append(m.tp)
        scores.append(pred.score)
        classes.append(pred.class_id)
        gt_classes.append(gt.class_id)
    tp = np.concatenate(tps) if tps else np.zeros(0, bool)
    score = np.concatenate(scores) if scores else np.zeros(0)
    cls = np.concatenate(classes) if classes else np.zeros(0, np.int64)
    gcls = np.concatenate(gt_classes) if gt_classes else np.zeros(0, np.int64)
    per_class: dict[int, float] = {}
    for c in np.unique(gcls).tolist():
        sel = cls == c
        per_class[int(c)] = average_precision(tp[sel], score[sel], int(np.sum(gcls == c)))
    value = float(np.mean(list(per_class.values()))) if per_class else None
    return ApResult(value, per_class, len(gcls), len(cls))


@dataclass(frozen=True, slots=True)
class Agreement:
    """How well candidate detections reproduce reference detections.

    ``ap50``: mAP@0.5 with the reference's detections (at the operating threshold) as
    ground truth and the candidate's (at a low threshold, so its ranking counts) as
    predictions. ``matched``/``missed``/``extra``/``mean_iou``: both at the operating
    threshold; ``mean_iou`` over matched pairs (None when nothing matched).
    """

    frames: int
    reference: int
    candidate: int
    ap50: float | None
    matched: int
    missed: int
    extra: int
    mean_iou: float | None


def agreement(pairs: Sequence[tuple[Boxes, Boxes]], conf: float, iou: float = 0.5) -> Agreement:
    """Agreement over frames given as (reference at ``conf``, candidate at a lower conf)."""
    ap = mean_ap(pairs, iou)
    ious: list[Array] = []
    matched = missed = extra = cand = 0
    for ref, pred in pairs:
        op = pred.above(conf)
        m = match(ref, op, iou)
        cand += len(op)
        matched += int(m.tp.sum())
        missed += int((~m.gt_matched).sum())
        extra += int((~m.tp).sum())
        ious.append(m.pred_iou[m.tp])
    all_iou = np.concatenate(ious) if ious else np.zeros(0)
    return Agreement(
        frames=len(pairs),
        reference=ap.n_gt,
        candidate=cand,
        ap50=ap.map,
        matched=matched,
        missed=missed,
        extra=extra,
        mean_iou=float(all_iou.mean()) if len(all_iou) else None,
    )
