"""Zone membership per object, with inertia and loitering time.

An object is in a zone once its position (feet) was inside for ``inertia`` looks in a row
and, with ``loiter_s``, for that many seconds; it leaves after ``inertia`` looks in a row
outside. Inertia keeps a box that jitters on a zone's border from flapping in and out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agent.frames import lasted
from agent.objects.geometry import F64, points_in_polygon, polygon_px
from agent.settings import ZoneSettings


@dataclass(slots=True)
class _Member:
    inside_run: int = 0
    outside_run: int = 0
    inside_since: float | None = None
    member: bool = False


@dataclass(slots=True)
class Zone:
    """One zone of one camera: its polygon in pixels and each track's membership."""

    name: str
    settings: ZoneSettings
    image_wh: tuple[int, int]
    polygon_px_xy: F64 = field(init=False)
    _tracks: dict[int, _Member] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.polygon_px_xy = polygon_px(self.settings.polygon, self.image_wh)

    def watches(self, label: str) -> bool:
        objects = self.settings.objects
        return objects is None or label in objects

    def step(self, track_ids: list[int], px_xy: F64, t: float) -> set[int]:
        """Feed one look at these tracks' positions; returns the tracks in the zone now."""
        inside = points_in_polygon(px_xy, self.polygon_px_xy) if track_ids else np.zeros(0, bool)
        need = self.settings.inertia
        for tid, now_in in zip(track_ids, inside.tolist(), strict=True):
            m = self._tracks.setdefault(tid, _Member())
            if now_in:
                m.inside_run += 1
                m.outside_run = 0
                if m.inside_since is None:
                    m.inside_since = t
                loitered = lasted(t - m.inside_since, self.settings.loiter_s)
                if not m.member and m.inside_run >= need and loitered:
                    m.member = True
            else:
                m.outside_run += 1
                m.inside_run = 0
                m.inside_since = None
                if m.member and m.outside_run >= need:
                    m.member = False
        return self.members()

    def members(self) -> set[int]:
        return {tid for tid, m in self._tracks.items() if m.member}

    def forget(self, track_id: int) -> None:
        self._tracks.pop(track_id, None)
