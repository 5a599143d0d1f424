"""Detections of several regions of one frame, put back together in source pixels.

Each region's detections are shifted by the region's corner. Where regions overlap, one
object is found twice: NMS across regions keeps the best. An object cut by a region's edge
(one that is not the image's edge) gives a partial box; it is dropped where another box
holds most of it, and kept otherwise (nothing better saw it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.detect.nms import nms
from agent.regions.planner import XyXy

#: A box this close to an inner edge of its region (share of the region's side, at least
#: 2 px) is cut by it: a partial object's box often stops a little short of the edge.
EDGE_SHARE = 0.03
#: A cut box is dropped when another box covers this share of it.
COVERED = 0.6
#: A box filling this share of a region that is not the whole image is a piece of something
#: larger than the region (magnified texture), never an object: dropped.
FILLS = 0.8


def shift(dets: Detections, dx: float, dy: float) -> Detections:
    """``dets`` moved by (dx, dy) pixels (a crop's detections into the frame's pixels)."""
    if not len(dets) or (dx == 0 and dy == 0):
        return dets
    xyxy = dets.xyxy + np.array([dx, dy, dx, dy], np.float32)
    kp = dets.keypoints
    if kp is not None:
        kp = kp.copy()
        kp[..., 0] += dx
        kp[..., 1] += dy
    return Detections(xyxy, dets.score, dets.class_id, dets.labels, kp)


def concat(parts: Sequence[Detections]) -> Detections:
    """All detections of ``parts``, in order."""
    parts = [d for d in parts if len(d)]
    if not parts:
        return Detections.empty()
    kps = [d.keypoints for d in parts]
    kp = None
    if all(k is not None for k in kps):
        kp = np.concatenate([k for k in kps if k is not None])
    return Detections(
        np.concatenate([d.xyxy for d in parts]),
        np.concatenate([d.score for d in parts]),
        np.concatenate([d.class_id for d in parts]),
        tuple(label for d in parts for label in d.labels),
        kp,
    )


def _cut(
    xyxy: npt.NDArray[np.float32], region: XyXy, image_wh: tuple[int, int]
) -> npt.NDArray[np.bool_]:
    x1, y1, x2, y2 = region
    w, h = image_wh
    edge = max(2.0, EDGE_SHARE * max(x2 - x1, y2 - y1))
    cut = np.zeros((len(xyxy),), np.bool_)
    if x1 > 0:
        cut |= xyxy[:, 0] <= x1 + edge
    if y1 > 0:
        cut |= xyxy[:, 1] <= y1 + edge
    if x2 < w:
        cut |= xyxy[:, 2] >= x2 - edge
    if y2 < h:
        cut |= xyxy[:, 3] >= y2 - edge
    return cut


def merge_regions(
    parts: Sequence[tuple[XyXy, Detections]],
    image_wh: tuple[int, int],
    *,
    iou_threshold: float,
    max_det: int,
) -> Detections:
    """One frame's detections from its regions' (region, detections in region pixels)."""
    w, h = image_wh
    shifted = []
    for r, found in parts:
        moved = shift(found, r[0], r[1])
        area = (r[2] - r[0]) * (r[3] - r[1])
        if len(moved) and area < w * h * FILLS:
            b = moved.xyxy.astype(np.float64)
            boxes = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
            moved = _select(moved, boxes < FILLS * area)
        shifted.append(moved)
    if len(shifted) == 1:
        return shifted[0]
    cut = np.concatenate(
        [_cut(d.xyxy, r, image_wh) for (r, _), d in zip(parts, shifted, strict=True)]
    ) if shifted else np.zeros(0, np.bool_)  # fmt: skip
    dets = concat(shifted)
    if not len(dets):
        return dets
    keep = np.ones((len(dets),), np.bool_)
    if cut.any():
        b = dets.xyxy.astype(np.float64)
        area = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
        for i in np.nonzero(cut)[0].tolist():
            tl = np.maximum(b[i, :2], b[:, :2])
            br = np.minimum(b[i, 2:], b[:, 2:])
            inter = np.prod(np.clip(br - tl, 0, None), axis=1)
            inter[i] = 0.0
            same = (dets.class_id == dets.class_id[i]) & (area > area[i])
            if area[i] > 0 and np.any(same & (inter / area[i] >= COVERED) & ~cut):
                keep[i] = False
    idx = np.nonzero(keep)[0]
    order = nms(dets.xyxy[idx], dets.score[idx], dets.class_id[idx],
                iou_threshold=iou_threshold, max_det=max_det)  # fmt: skip
    return take(dets, idx[order])


def take(dets: Detections, idx: npt.NDArray[np.intp]) -> Detections:
    return Detections(
        dets.xyxy[idx],
        dets.score[idx],
        dets.class_id[idx],
        tuple(dets.labels[i] for i in idx.tolist()),
        None if dets.keypoints is None else dets.keypoints[idx],
    )


def _select(dets: Detections, keep: npt.NDArray[np.bool_]) -> Detections:
    return dets if bool(keep.all()) else take(dets, np.nonzero(keep)[0])
