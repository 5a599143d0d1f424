"""Class-aware non-maximum suppression."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from agent.cv import cv2


def nms(
    xyxy: npt.NDArray[np.float32],
    score: npt.NDArray[np.float32],
    class_id: npt.NDArray[np.int32],
    *,
    iou_threshold: float,
    max_det: int,
) -> npt.NDArray[np.intp]:
    """Indices of the boxes kept by per-class NMS, highest score first, at most ``max_det``.

    Boxes of different classes never suppress each other. Uses OpenCV's batched NMS
    (about 8x faster than a numpy loop at a few hundred candidates).
    """
    n = len(score)
    if n == 0 or max_det <= 0:
        return np.zeros((0,), dtype=np.intp)
    xywh = np.empty((n, 4), dtype=np.float32)
    xywh[:, :2] = xyxy[:, :2]
    xywh[:, 2:] = xyxy[:, 2:] - xyxy[:, :2]
    keep = cv2.dnn.NMSBoxesBatched(
        xywh, score.astype(np.float32), class_id.astype(np.int32), 0.0, float(iou_threshold)
    )
    keep = np.asarray(keep, dtype=np.intp).reshape(-1)
    # OpenCV orders by score within its batches; make the global order explicit and stable.
    order = np.argsort(-score[keep], kind="stable")
    return keep[order][:max_det]


def iou_matrix(a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """Pairwise IoU of (n, 4) and (m, 4) xyxy boxes (float64 ones are not copied)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    tl = np.maximum(a[:, None, :2], b[None, :, :2])
    br = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(br - tl, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)
