"""Global change of one camera's view: a scene cut, a camera knocked or moved, lights switched.

Per frame, the share of a small grey copy of the frame that changed since the last frame,
after a global gain (auto exposure, a cloud) is taken out. Cheap (a frame shrunk to
``height_px`` rows), the same in region mode and with ``regions: full``, and fed every frame
the objects stage sees, looked at or not. Nothing a person does changes most of a frame from
one frame to the next; a cut does: the objects stage then counts no line crossing or zone
entry from that frame and ends the tracks that no longer fit (docs/objects.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.cv import cv2


@dataclass(frozen=True, slots=True)
class SceneParams:
    height_px: int = 48  # rows of the grey copy compared
    min_diff: float = 16.0  # grey levels (of 255) that make one of its pixels changed
    global_share: float = 0.6  # a change of this share of the frame is a global change


class SceneWatch:
    """The global change of one camera's frames, fed in order."""

    def __init__(self, params: SceneParams | None = None) -> None:
        self.params = params or SceneParams()
        self._prev: npt.NDArray[np.float32] | None = None
        self._prev_mean = 0.0  # its mean grey level
        self.share = 0.0  # of the last frame fed

    def _small(self, image: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
        h, w = image.shape[:2]
        # Every k-th pixel first, then an area resize of that: a frame of any size costs
        # about the same, and the blur of the area resize hides sensor noise. (OpenCV's
        # nearest resize takes the same pixels as image[::k, ::k] at a quarter of the cost
        # of numpy's strided copy: 0.16 ms instead of 0.61 for a 768x576 frame.)
        k = max(1, h // (self.params.height_px * 4))
        sub = image
        if k > 1:  # (the rows and columns past a multiple of k are left out)
            sub_wh = (w // k, h // k)
            sub = image[: sub_wh[1] * k, : sub_wh[0] * k]
            sub = cv2.resize(sub, sub_wh, interpolation=cv2.INTER_NEAREST)
        gray = cv2.cvtColor(sub, cv2.COLOR_BGR2GRAY) if sub.ndim == 3 else sub
        size_wh = (max(1, round(w * self.params.height_px / h)), self.params.height_px)
        small: npt.NDArray[np.float32] = cv2.resize(
            gray, size_wh, interpolation=cv2.INTER_AREA
        ).astype(np.float32)
        return small

    def update(self, image: npt.NDArray[np.uint8]) -> bool:
        """Whether ``image`` changed most of the view since the frame fed before it."""
        now = self._small(image)
        mean = float(now.mean())
        prev, prev_mean = self._prev, self._prev_mean
        self._prev, self._prev_mean = now, mean
        if prev is None or prev.shape != now.shape:
            self.share = 0.0
            return False
        gain = min(max(mean / max(1.0, prev_mean), 0.5), 2.0)
        changed = np.abs(now - gain * prev) > self.params.min_diff
        self.share = int(np.count_nonzero(changed)) / changed.size
        return self.share > self.params.global_share
