"""The unit of work handed from capture to inference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Scene times are sums of frame periods (a recording's index / fps, on whichever clock's
#: origin): a span a hair under a period has lasted it, on any clock's numbers, so the
#: live agent and ``edge-agent track`` decide alike on frames that fall on a cadence.
#: One microsecond: far under any two frames' gap.
HAIR_S = 1e-6


def lasted(span: float, period: float) -> bool:
    """Whether ``span`` seconds of scene time have lasted ``period``: a hair under it has
    (``HAIR_S``), so a cadence due on a frame is due there on any clock's origin."""
    return span >= period - HAIR_S


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded camera frame.

    ``image`` is BGR uint8 of shape (H, W, 3); ``t_capture`` is ``time.monotonic()`` when the
    frame was read, ``ts_capture`` the wall-clock time (epoch seconds) for messages;
    ``t_media``: for a recording read frame by frame as fast as the agent takes it
    (``realtime: false``), the recording's own time on the ``t_capture`` clock, else None.
    """

    image: npt.NDArray[np.uint8]
    camera_id: str
    frame_id: int
    t_capture: float
    ts_capture: float
    t_media: float | None = None

    @property
    def t_scene(self) -> float:
        """The time the scene's logic goes by (motion, planning, tracks, events): the
        recording's (``t_media``) where it has one, so its seconds are seconds of the scene
        however fast the box reads it, else the capture time."""
        return self.t_capture if self.t_media is None else self.t_media

    def __post_init__(self) -> None:
        img = self.image
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(
                f"Frame.image must be uint8 HxWx3 BGR, got dtype={img.dtype} shape={img.shape}"
            )

    @property
    def image_wh(self) -> tuple[int, int]:
        """(width, height) of the source image in pixels."""
        return int(self.image.shape[1]), int(self.image.shape[0])
