"""Geometry of objects over time, with the coordinate system in every name.

``norm_xy``: fractions of the source image (0..1, x right, y down), as the config gives
zones, lines and masks. ``px_xy``: source-image pixels, as detections are. An object's
position is ``anchor_bottom_centre`` of its box: its feet.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agent.detect.nms import iou_matrix

__all__ = [
    "anchor_bottom_centre",
    "iou_matrix",
    "line_side",
    "points_in_polygon",
    "polygon_px",
    "segments_cross",
]

F64 = npt.NDArray[np.float64]


def anchor_bottom_centre(xyxy: npt.NDArray[np.floating]) -> F64:
    """(n, 2) px_xy positions (bottom centre) of (n, 4) xyxy boxes."""
    b = np.asarray(xyxy, np.float64).reshape(-1, 4)
    return np.stack([(b[:, 0] + b[:, 2]) * 0.5, b[:, 3]], axis=1)


def polygon_px(norm_xy: Sequence[Sequence[float]], image_wh: tuple[int, int]) -> F64:
    """A norm_xy polygon (or line) in px_xy of an image of ``image_wh``."""
    return np.asarray(norm_xy, np.float64).reshape(-1, 2) * np.asarray(image_wh, np.float64)


#: Up to this many points x polygon edges, ``points_in_polygon`` loops in plain Python: the
#: same arithmetic, without the twenty numpy calls (a zone's few tracks, every frame).
_FEW = 256


def points_in_polygon(px_xy: npt.NDArray[np.floating], polygon_px_xy: F64) -> npt.NDArray[np.bool_]:
    """Which of (n, 2) points lie inside a polygon (even-odd rule; edges count as inside)."""
    p = np.asarray(px_xy, np.float64).reshape(-1, 2)
    if len(p) * len(polygon_px_xy) <= _FEW:
        return _few_in_polygon(p.tolist(), polygon_px_xy.tolist())
    x, y = p[:, 0:1], p[:, 1:2]
    a = polygon_px_xy
    b = np.roll(polygon_px_xy, -1, axis=0)
    ax, ay, bx, by = a[:, 0], a[:, 1], b[:, 0], b[:, 1]
    straddles = (ay > y) != (by > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        x_cross = ax + (y - ay) * (bx - ax) / (by - ay)
    inside = np.count_nonzero(straddles & (x < x_cross), axis=1) % 2 == 1
    # Points on an edge are inside (a foot on a zone's border is in it).
    ex, ey = bx - ax, by - ay
    seg2 = ex * ex + ey * ey
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.clip(((x - ax) * ex + (y - ay) * ey) / np.where(seg2 > 0, seg2, 1.0), 0.0, 1.0)
    d2 = (ax + t * ex - x) ** 2 + (ay + t * ey - y) ** 2
    on_edge = np.any(d2 <= 1e-12, axis=1)
    return np.asarray(inside | on_edge)


def _few_in_polygon(points: list[list[float]], polygon: list[list[float]]) -> npt.NDArray[np.bool_]:
    """``points_in_polygon`` in plain Python floats (the numpy version's operations in its
    order: the same answers)."""
    edges = []  # per edge, once: its start, its vector and that vector's squared length
    for (ax, ay), (bx, by) in zip(polygon, [*polygon[1:], *polygon[:1]], strict=True):
        ex, ey = bx - ax, by - ay
        seg2 = ex * ex + ey * ey
        edges.append((ax, ay, by, ex, ey, seg2 if seg2 > 0 else 1.0))
    out = []
    for x, y in points:
        crossings, on_edge = 0, False
        for ax, ay, by, ex, ey, seg2 in edges:
            if (ay > y) != (by > y) and x < ax + (y - ay) * ex / ey:
                crossings += 1
            t = min(max(((x - ax) * ex + (y - ay) * ey) / seg2, 0.0), 1.0)
            dx, dy = ax + t * ex - x, ay + t * ey - y
            on_edge |= dx * dx + dy * dy <= 1e-12
        out.append(crossings % 2 == 1 or on_edge)
    return np.array(out, dtype=bool)


def line_side(px_xy: npt.NDArray[np.floating], a_px: F64, b_px: F64) -> F64:
    """(B-A) x (P-A) for each point, divided by |B-A|: signed distance from the line in px.

    Positive on the side a line drawn A -> B counts ``in`` from (ARCHITECTURE, lines).
    """
    p = np.asarray(px_xy, np.float64).reshape(-1, 2)
    d = b_px - a_px
    norm = float(np.hypot(d[0], d[1])) or 1.0
    return np.asarray((d[0] * (p[:, 1] - a_px[1]) - d[1] * (p[:, 0] - a_px[0])) / norm)


def segments_cross(p0: F64, p1: F64, a_px: F64, b_px: F64) -> bool:
    """Whether the path p0 -> p1 meets the segment A-B (end points included)."""

    def orient(u: F64, v: F64, w: F64) -> float:
        return float((v[0] - u[0]) * (w[1] - u[1]) - (v[1] - u[1]) * (w[0] - u[0]))

    d1, d2 = orient(a_px, b_px, p0), orient(a_px, b_px, p1)
    d3, d4 = orient(p0, p1, a_px), orient(p0, p1, b_px)
    return (d1 * d2 <= 0) and (d3 * d4 <= 0)
