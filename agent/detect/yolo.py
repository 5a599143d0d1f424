"""Decoders for Ultralytics YOLO output layouts. Pure functions on arrays.

Layouts (one output tensor, batch 1):
- YOLOv8/YOLO11 detect: (1, 4 + nc, N), rows cx, cy, w, h, class scores.
- YOLOv8/YOLO11 pose:   (1, 4 + nc + K*D, N), keypoints as (x, y[, conf]) per point.
- YOLOv5 detect:        (1, N, 5 + nc), columns cx, cy, w, h, objectness, class scores.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.detect.metadata import ModelMeta
from agent.errors import ModelError


class LayoutKind(enum.Enum):
    V8_DETECT = "yolov8-detect"
    V8_POSE = "yolov8-pose"
    V5_DETECT = "yolov5-detect"


@dataclass(frozen=True, slots=True)
class YoloLayout:
    """How to read one model output: kind, class count and keypoint shape (K, D)."""

    kind: LayoutKind
    num_classes: int
    kpt_shape: tuple[int, int] | None = None

    @property
    def task(self) -> str:
        return "pose" if self.kind is LayoutKind.V8_POSE else "detect"


@dataclass(frozen=True, slots=True)
class Candidates:
    """Boxes over the confidence threshold, before NMS, in model-input pixels."""

    xyxy: npt.NDArray[np.float32]
    score: npt.NDArray[np.float32]
    class_id: npt.NDArray[np.int32]
    keypoints: npt.NDArray[np.float32] | None


def detect_layout(shape: Sequence[int | str | None], meta: ModelMeta) -> YoloLayout:
    """Work out the layout from the output shape and the model metadata.

    Raises ModelError naming the shape when it is not a layout we can read.
    """
    if len(shape) != 3 or not all(isinstance(d, int) for d in shape[1:]):
        raise ModelError(
            f"unsupported model output shape {list(shape)}: expected [1, 4+nc(+K*3), N] "
            "(YOLOv8/11) or [1, N, 5+nc] (YOLOv5)"
        )
    a, b = int(shape[1]), int(shape[2])  # type: ignore[arg-type]
    nc_meta = len(meta.labels) if meta.labels else None
    if meta.task == "pose" or meta.kpt_shape is not None:
        kpt = meta.kpt_shape or (17, 3)
        nc = nc_meta if nc_meta is not None else a - 4 - kpt[0] * kpt[1]
        if a != 4 + nc + kpt[0] * kpt[1] or nc < 1:
            raise ModelError(
                f"pose model output {list(shape)} does not match {nc} classes and "
                f"keypoints {list(kpt)} (expected channel count {4 + nc + kpt[0] * kpt[1]})"
            )
        return YoloLayout(LayoutKind.V8_POSE, nc, kpt)
    if a < b:  # channels first: YOLOv8/11
        nc = a - 4
        if nc < 1 or (nc_meta is not None and nc != nc_meta):
            raise ModelError(
                f"detect model output {list(shape)} does not match {nc_meta} labels "
                f"(expected [1, {4 + (nc_meta or 1)}, N])"
            )
        return YoloLayout(LayoutKind.V8_DETECT, nc)
    nc = b - 5
    if nc < 1 or (nc_meta is not None and nc != nc_meta):
        raise ModelError(
            f"model output {list(shape)} is neither YOLOv8 [1, 4+nc, N] nor YOLOv5 "
            f"[1, N, 5+nc] for {nc_meta} labels"
        )
    return YoloLayout(LayoutKind.V5_DETECT, nc)


def _best_class(
    scores: npt.NDArray[np.float32], allowed: npt.NDArray[np.int32] | None
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32]]:
    """Best score and class per column of a (nc, N) score block."""
    if allowed is not None:
        scores = scores[allowed]
    if scores.shape[0] == 1:
        best = scores[0]
        cls = np.zeros(best.shape, dtype=np.int32)
    else:
        idx = scores.argmax(axis=0)
        best = np.take_along_axis(scores, idx[None, :], axis=0)[0]
        cls = idx.astype(np.int32)
    if allowed is not None:
        cls = allowed[cls]
    return best, cls


def _cxcywh_to_xyxy(b: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out = np.empty((b.shape[0], 4), dtype=np.float32)
    half_w = b[:, 2] * 0.5
    half_h = b[:, 3] * 0.5
    out[:, 0] = b[:, 0] - half_w
    out[:, 1] = b[:, 1] - half_h
    out[:, 2] = b[:, 0] + half_w
    out[:, 3] = b[:, 1] + half_h
    return out


def _top(
    score: npt.NDArray[np.float32], idx: npt.NDArray[np.intp], limit: int
) -> npt.NDArray[np.intp]:
    if len(idx) <= limit:
        return idx
    part = np.argpartition(-score[idx], limit - 1)[:limit]
    return idx[part]


def decode(
    output: npt.NDArray[np.float32],
    layout: YoloLayout,
    *,
    conf_threshold: float,
    allowed_classes: npt.NDArray[np.int32] | None = None,
    max_candidates: int = 30000,
) -> Candidates:
    """Candidates over ``conf_threshold`` from one raw output tensor (batch 1)."""
    if output.ndim != 3 or output.shape[0] != 1:
        raise ModelError(f"expected a batch-1 output tensor, got shape {output.shape}")
    out = output[0]
    nc = layout.num_classes
    if layout.kind is LayoutKind.V5_DETECT:
        cols = out.T  # (5 + nc, N) view: same code path as v8 below
        obj = cols[4]
        best, cls = _best_class(cols[5 : 5 + nc] * obj, allowed_classes)
        box_rows = cols[:4]
        kpt_rows = None
    else:
        best, cls = _best_class(out[4 : 4 + nc], allowed_classes)
        box_rows = out[:4]
        kpt_rows = out[4 + nc :] if layout.kind is LayoutKind.V8_POSE else None
    # NaN compares false with every threshold: without this check a broken model would
    # look like an empty scene. Checking the best-score row costs microseconds.
    if not np.isfinite(best).all():
        raise ModelError("model output has non-finite scores (NaN or inf)")
    idx = _top(best, np.flatnonzero(best > conf_threshold), max_candidates)
    xyxy = _cxcywh_to_xyxy(np.ascontiguousarray(box_rows[:, idx].T, dtype=np.float32))
    keypoints = None
    if kpt_rows is not None and layout.kpt_shape is not None:
        k, d = layout.kpt_shape
        raw = kpt_rows[:, idx].T.reshape(-1, k, d).astype(np.float32)
        if d == 3:
            keypoints = np.ascontiguousarray(raw)
        else:  # (x, y) only: report full confidence so consumers see a uniform shape
            keypoints = np.concatenate([raw, np.ones((len(idx), k, 1), np.float32)], axis=2)
    return Candidates(
        xyxy=xyxy,
        score=best[idx].astype(np.float32),
        class_id=cls[idx].astype(np.int32),
        keypoints=keypoints,
    )
