"""Which squares of a frame the detector looks at, frame by frame, for one camera.

Every frame gets regions around:

- **motion**: each moving blob, covered by squares of ``region_px`` source pixels (the
  model's input over 2: small objects are magnified 2x), or, where the objects moving
  there are too big for that (the tracks in the blob say how tall they are), one square
  around the blob;
- **tracked objects that move**: around where the tracker puts them, so a slow walker whose
  motion blob is weak is still looked at; still objects are re-checked every ``recheck_s``;
- **a sweep**: one square of a grid over the whole frame every ``sweep_s`` seconds, in turn,
  so nothing still is missed forever (a person standing since before the agent started).

Squares that overlap merge while the merged square stays small enough to magnify; at most
``max_regions`` per frame, the most urgent first (motion, moving objects, re-checks, then
the sweep, which waits for a quieter frame). A frame with no motion, no moving object and
no square due skips inference altogether.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

XyXy = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class PlannerParams:
    region_px: int | None = None  # square for small objects; None: 1/2 of the input
    object_scale: float = 1.4  # a square is at least this many times its object's size
    max_regions: int = 8
    merge_growth: float = 1.3  # merge two squares while the result is at most this x larger
    max_merged: float = 1.0  # ... and at most this x region_px (magnification is the point)
    recheck_s: float = 2.0
    sweep_s: float = 0.5


@dataclass(frozen=True, slots=True)
class TrackHint:
    """What the planner needs of a tracked object: its box, whether it moves, when seen."""

    xyxy: XyXy
    moving: bool
    last_seen_t: float


@dataclass(frozen=True, slots=True)
class Plan:
    """Regions (source pixels, xyxy, inside the image) for one frame; () = skip inference."""

    regions: tuple[XyXy, ...]
    reasons: tuple[str, ...]  # motion, track, recheck, sweep (per region, merged: joined)


def square(xyxy: XyXy, side: float, image_wh: tuple[int, int]) -> XyXy:
    """A square of ``side`` centred on ``xyxy``, shifted (and shrunk) to lie in the image."""
    w, h = image_wh
    side = min(side, w, h)
    cx, cy = (xyxy[0] + xyxy[2]) / 2, (xyxy[1] + xyxy[3]) / 2
    x1 = min(max(0.0, cx - side / 2), w - side)
    y1 = min(max(0.0, cy - side / 2), h - side)
    return (x1, y1, x1 + side, y1 + side)


def _union(a: XyXy, b: XyXy) -> XyXy:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _side(r: XyXy) -> float:
    return max(r[2] - r[0], r[3] - r[1])


def _overlap(a: XyXy, b: XyXy) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def cover(box: XyXy, region_px: float, max_merged: float, image_wh: tuple[int, int]) -> list[XyXy]:
    """Squares over a moving area: one if it fits a square of ``max_merged * region_px``,
    else a grid of ``region_px`` squares (a group of small people stays magnified)."""
    w, h = box[2] - box[0], box[3] - box[1]
    if max(w, h) <= max_merged * region_px:
        return [square(box, max(region_px, w, h), image_wh)]
    step = region_px * 0.8
    nx = max(1, math.ceil((w - region_px * 0.2) / step))
    ny = max(1, math.ceil((h - region_px * 0.2) / step))
    out = []
    for j in range(ny):
        for i in range(nx):
            cx = box[0] + (w / 2 if nx == 1 else region_px / 2 + i * (w - region_px) / (nx - 1))
            cy = box[1] + (h / 2 if ny == 1 else region_px / 2 + j * (h - region_px) / (ny - 1))
            half = region_px / 2
            out.append(square((cx - half, cy - half, cx + half, cy + half), region_px, image_wh))
    return out


def sweep_grid(image_wh: tuple[int, int], side: float) -> list[XyXy]:
    """Squares of ``side`` covering the image with some overlap, row by row."""
    w, h = image_wh
    side = min(side, w, h)
    nx = max(1, math.ceil((w - side * 0.2) / (side * 0.8)))
    ny = max(1, math.ceil((h - side * 0.2) / (side * 0.8)))
    xs = [0.0] if nx == 1 else [i * (w - side) / (nx - 1) for i in range(nx)]
    ys = [0.0] if ny == 1 else [j * (h - side) / (ny - 1) for j in range(ny)]
    return [(x, y, x + side, y + side) for y in ys for x in xs]


def _seen_whole(box: XyXy, wanted: Sequence[tuple[XyXy, str]]) -> bool:
    """Whether a square already wanted this frame holds ``box`` with a margin (a tenth of
    its size each side): that square sees the object whole, a second one would not add."""
    mx, my = 0.1 * (box[2] - box[0]), 0.1 * (box[3] - box[1])
    return any(
        r[0] <= box[0] - mx and r[1] <= box[1] - my and box[2] + mx <= r[2] and box[3] + my <= r[3]
        for r, _ in wanted
    )


def _object_height(blob: XyXy, tracks: Sequence[tuple[int, TrackHint]]) -> float:
    """How tall the objects moving in ``blob`` are: the median height of the tracked
    objects whose centre is in it, else the blob's own height. A blob is often several
    people at different depths, taller than any of them: the tracks know their size."""
    heights = sorted(
        h.xyxy[3] - h.xyxy[1]
        for _, h in tracks
        if blob[0] <= (h.xyxy[0] + h.xyxy[2]) / 2 <= blob[2]
        and blob[1] <= (h.xyxy[1] + h.xyxy[3]) / 2 <= blob[3]
    )
    if not heights:
        return blob[3] - blob[1]
    return min(blob[3] - blob[1], heights[len(heights) // 2])


#: What goes first when a frame wants more than ``max_regions`` squares (sweep waits).
_PRIORITY = {"motion": 0, "track": 1, "recheck": 2, "sweep": 3}


def merge(
    regions: Sequence[tuple[XyXy, str]],
    image_wh: tuple[int, int],
    growth: float,
    max_side: float,
    cap: int,
) -> list[tuple[XyXy, str]]:
    """Merge overlapping squares while cheap and small; keep the ``cap`` most urgent."""
    items = [(square(r, _side(r), image_wh), why) for r, why in regions]
    while len(items) > 1:
        best: tuple[float, int, int, XyXy] | None = None
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                a, b = items[i][0], items[j][0]
                u = _union(a, b)
                grown = _side(u) / max(_side(a), _side(b))
                small = _side(u) <= max(max_side, _side(a), _side(b))
                if (
                    _overlap(a, b)
                    and grown <= growth
                    and small
                    and (best is None or grown < best[0])
                ):
                    best = (grown, i, j, u)
        if best is None:
            break
        _, i, j, u = best
        why = "+".join(sorted(set(items[i][1].split("+")) | set(items[j][1].split("+"))))
        items = [x for k, x in enumerate(items) if k not in (i, j)] + [
            (square(u, _side(u), image_wh), why)
        ]
    items.sort(key=lambda x: min(_PRIORITY.get(w, 9) for w in x[1].split("+")))
    return items[:cap]


class RegionPlanner:
    """Regions of one camera's frames, in frame order."""

    def __init__(self, params: PlannerParams | None = None) -> None:
        self.params = params or PlannerParams()
        self._sweep_i = 0
        self._next_sweep_t: float | None = None
        self._rechecked: dict[int, float] = {}

    def plan(
        self,
        t: float,
        image_wh: tuple[int, int],
        motion: Sequence[XyXy],
        tracks: Sequence[tuple[int, TrackHint]] = (),
        input_px: int = 320,
    ) -> Plan:
        """Regions for the frame at ``t``; ``input_px``: the model's input side."""
        p = self.params
        region_px = p.region_px or round(0.5 * input_px)

        wanted: list[tuple[XyXy, str]] = []
        for box in motion:
            big = p.object_scale * _object_height(box, tracks)
            if big <= region_px:  # small objects: magnified squares, a grid over a group
                wanted += [(sq, "motion") for sq in cover(box, region_px, p.max_merged, image_wh)]
            else:
                side = max(big, box[2] - box[0], box[3] - box[1])
                wanted.append((square(box, side, image_wh), "motion"))
        live = set()
        for tid, hint in tracks:
            live.add(tid)
            side = max(region_px, p.object_scale * _side(hint.xyxy))
            due = t - self._rechecked.get(tid, hint.last_seen_t) >= p.recheck_s
            if hint.moving or due:
                if not _seen_whole(hint.xyxy, wanted):
                    why = "track" if hint.moving else "recheck"
                    wanted.append((square(hint.xyxy, side, image_wh), why))
                self._rechecked[tid] = t
        self._rechecked = {k: v for k, v in self._rechecked.items() if k in live}
        if self._next_sweep_t is None or t >= self._next_sweep_t:
            grid = sweep_grid(image_wh, region_px * 1.5)
            self._sweep_i %= len(grid)
            wanted.append((grid[self._sweep_i], "sweep"))
            self._sweep_i += 1
            self._next_sweep_t = t + p.sweep_s
        if not wanted:
            return Plan((), ())
        merged = merge(wanted, image_wh, p.merge_growth, p.max_merged * region_px, p.max_regions)
        return Plan(tuple(r for r, _ in merged), tuple(w for _, w in merged))
