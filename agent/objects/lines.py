"""Directed counting lines: which way an object's position crossed a segment A -> B.

``in`` is a pass from the side where (B-A)x(P-A) > 0 to the side where it is < 0, in image
coordinates (for A=(0.5,0), B=(0.5,1), left to right). Positions within ``deadband_px``
of the line keep the last side, so feet that jitter on the line do not count twice; a pass
counts only when the path between the two looks meets the segment itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from agent.objects.geometry import F64, line_side, polygon_px, segments_cross
from agent.settings import LineSettings

Direction = Literal["in", "out"]
#: Positions this close to a line (fraction of the image diagonal) keep their last side.
DEADBAND = 0.01


@dataclass(slots=True)
class _Side:
    side: int
    px_xy: F64


@dataclass(slots=True)
class Line:
    """One line of one camera and the side each track was last seen on."""

    name: str
    settings: LineSettings
    image_wh: tuple[int, int]
    a_px: F64 = field(init=False)
    b_px: F64 = field(init=False)
    deadband_px: float = field(init=False)
    _last: dict[int, _Side] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ab = polygon_px(self.settings.points, self.image_wh)
        self.a_px, self.b_px = ab[0], ab[1]
        self.deadband_px = DEADBAND * float(np.hypot(*self.image_wh))

    def counts(self, label: str) -> bool:
        objects = self.settings.objects
        return objects is None or label in objects

    def step(self, track_ids: list[int], px_xy: F64) -> list[tuple[int, Direction]]:
        """Feed one look at these tracks' positions; returns (track_id, 'in'|'out') passes."""
        if not track_ids:
            return []
        dist = line_side(px_xy, self.a_px, self.b_px)
        out: list[tuple[int, Direction]] = []
        for i, (tid, d) in enumerate(zip(track_ids, dist.tolist(), strict=True)):
            if abs(d) <= self.deadband_px:
                continue
            side = 1 if d > 0 else -1
            prev = self._last.get(tid)
            here = px_xy[i].copy()
            passed = prev is not None and prev.side != side
            if passed and segments_cross(prev.px_xy, here, self.a_px, self.b_px):  # type: ignore[union-attr]
                out.append((tid, "in" if side < 0 else "out"))
            self._last[tid] = _Side(side, here)
        return out

    def forget(self, track_id: int) -> None:
        self._last.pop(track_id, None)
