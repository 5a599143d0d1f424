"""The ``Detections`` record handed from the detector to the publisher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class Detections:
    """Detections of one image, in source-image pixels.

    xyxy: (n, 4) float32; score: (n,) float32; class_id: (n,) int32; labels: n names;
    keypoints: (n, K, 3) float32 as (x, y, conf) for pose models, else None.
    """

    xyxy: npt.NDArray[np.float32]
    score: npt.NDArray[np.float32]
    class_id: npt.NDArray[np.int32]
    labels: tuple[str, ...]
    keypoints: npt.NDArray[np.float32] | None = None

    def __post_init__(self) -> None:
        n = len(self.score)
        checks = [
            ("xyxy", self.xyxy.shape, (n, 4), self.xyxy.dtype, np.float32),
            ("score", self.score.shape, (n,), self.score.dtype, np.float32),
            ("class_id", self.class_id.shape, (n,), self.class_id.dtype, np.int32),
        ]
        for name, shape, want, dtype, want_dtype in checks:
            if shape != want or dtype != want_dtype:
                raise ValueError(
                    f"Detections.{name}: expected shape {want} {np.dtype(want_dtype).name}, "
                    f"got {shape} {np.dtype(dtype).name}"
                )
        if len(self.labels) != n:
            raise ValueError(f"Detections.labels: expected {n} labels, got {len(self.labels)}")
        kp = self.keypoints
        if kp is not None and (kp.ndim != 3 or kp.shape[0] != n or kp.shape[2] != 3):
            raise ValueError(f"Detections.keypoints: expected ({n}, K, 3), got {kp.shape}")

    @classmethod
    def empty(cls, with_keypoints: int | None = None) -> Detections:
        """No detections (``with_keypoints`` = K keeps the pose shape)."""
        kp = None if with_keypoints is None else np.zeros((0, with_keypoints, 3), np.float32)
        return cls(
            np.zeros((0, 4), np.float32),
            np.zeros((0,), np.float32),
            np.zeros((0,), np.int32),
            (),
            kp,
        )

    def __len__(self) -> int:
        return len(self.score)

    def counts(self) -> dict[str, int]:
        """Number of detections per label."""
        out: dict[str, int] = {}
        for label in self.labels:
            out[label] = out.get(label, 0) + 1
        return out

    def to_dicts(self, ndigits: int = 1) -> list[dict[str, Any]]:
        """Detections as the MQTT contract's list of objects."""
        boxes = np.round(self.xyxy.astype(np.float64), ndigits).tolist()
        scores = np.round(self.score.astype(np.float64), 3).tolist()
        ids = self.class_id.tolist()
        kps = None
        if self.keypoints is not None:
            kp = self.keypoints.astype(np.float64)
            kp[..., :2] = np.round(kp[..., :2], ndigits)
            kp[..., 2] = np.round(kp[..., 2], 3)
            kps = kp.tolist()
        out: list[dict[str, Any]] = []
        for i, label in enumerate(self.labels):
            d: dict[str, Any] = {
                "label": label,
                "class_id": ids[i],
                "score": scores[i],
                "xyxy": boxes[i],
            }
            if kps is not None:
                d["keypoints"] = kps[i]
            out.append(d)
        return out
