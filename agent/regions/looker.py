"""One camera's eyes: motion, then the plan of where the detector looks this frame."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.regions.motion import Motion, MotionDetector, MotionParams
from agent.regions.planner import Plan, PlannerParams, RegionPlanner, TrackHint


@dataclass(frozen=True, slots=True)
class Look:
    """Where to run the detector on one frame (``plan.regions``; () = nowhere), and why."""

    plan: Plan
    motion: Motion


class Looker:
    """Motion and region planning of one camera, fed its frames in order.

    The objects stage hands in its tracks after each frame (``set_tracks``, any thread);
    planning reads the latest it has, a frame or two behind, which the regions' context
    margin absorbs.
    """

    def __init__(
        self,
        motion: MotionParams | None = None,
        planner: PlannerParams | None = None,
        masks: Sequence[Sequence[tuple[float, float]]] = (),
    ) -> None:
        self.motion = MotionDetector(motion)
        self.motion.set_masks(masks)
        self.planner = RegionPlanner(planner)
        self._tracks: tuple[tuple[int, TrackHint], ...] = ()
        self._lock = threading.Lock()

    def set_tracks(self, tracks: Sequence[tuple[int, TrackHint]]) -> None:
        with self._lock:
            self._tracks = tuple(tracks)

    def set_masks(self, masks: Sequence[Sequence[tuple[float, float]]]) -> None:
        with self._lock:
            self.motion.set_masks(masks)

    def look(self, image: npt.NDArray[np.uint8], t: float, input_px: int) -> Look:
        """Motion of ``image`` and where to look; ``input_px``: the model's input side."""
        with self._lock:
            motion = self.motion.update(image)
            tracks = self._tracks
        wh = (int(image.shape[1]), int(image.shape[0]))
        return Look(self.planner.plan(t, wh, motion.boxes, tracks, input_px), motion)
