"""Is a live source still delivering new images, or repeating its last one?

After a USB unplug some V4L2 drivers keep returning the last frame forever, and ``read()``
says True each time. We compare a sparse grid of pixels (about 32 x 32 points, all three
channels) with the previous frame's: a copy and a compare of ~3,000 bytes per frame.

Why exact equality, and only after ``stall_timeout_s``: a real sensor never produces two
byte-identical frames, even of a static scene in the dark (shot and read noise change the
low bits of many of the 3,000 sampled values), so a tolerance would only add false alarms
for scenes with little texture. A source must repeat itself *exactly* for the whole
timeout (10 s by default) before it is called frozen. Encoded network streams can repeat
frames legitimately (a static scene coded as skip blocks), so sources decide whether this
check applies (``FrameSource.detect_frozen``); file and image sources never use it.
"""

from __future__ import annotations

import numpy as np

from agent.capture.base import Image

_GRID = 32


class FreezeDetector:
    """Seconds since a live source last delivered an image different from the previous."""

    def __init__(self) -> None:
        self._prev: Image | None = None
        self._changed_at = 0.0

    def frozen_for(self, image: Image, t: float) -> float:
        """Feed one image read at monotonic time ``t``; 0.0 when it differs."""
        h, w = image.shape[:2]
        sy, sx = max(1, h // _GRID), max(1, w // _GRID)
        # Offset by half a step: borders are often constant (letterboxing, OSD bars).
        sample = image[sy // 2 :: sy, sx // 2 :: sx]
        prev = self._prev
        if prev is not None and prev.shape == sample.shape:
            if np.array_equal(prev, sample):
                return t - self._changed_at
            np.copyto(prev, sample)
        else:
            self._prev = sample.copy()
        self._changed_at = t
        return 0.0
