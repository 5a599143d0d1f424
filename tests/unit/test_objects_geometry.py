"""Geometry of zones and lines: containment, sides and crossings, on non-square images."""

from __future__ import annotations

import numpy as np
import pytest

from agent.objects import geometry
from agent.objects.geometry import (
    anchor_bottom_centre,
    line_side,
    points_in_polygon,
    polygon_px,
    segments_cross,
)

SQUARE = polygon_px([[0.25, 0.25], [0.75, 0.25], [0.75, 0.75], [0.25, 0.75]], (800, 400))
CONCAVE = np.array([[0, 0], [100, 0], [100, 100], [50, 50], [0, 100]], np.float64)


@pytest.mark.parametrize(
    ("point", "polygon", "inside"),
    [
        ((400, 200), SQUARE, True),  # centre of an 800x400 image
        ((100, 200), SQUARE, False),
        ((200, 200), SQUARE, True),  # on the left edge (0.25 * 800)
        ((600, 100), SQUARE, True),  # a corner
        ((601, 100), SQUARE, False),
        ((50, 80), CONCAVE, False),  # in the notch of a concave polygon
        ((20, 80), CONCAVE, True),
        ((80, 20), CONCAVE, True),
    ],
)
def test_points_in_polygon(point, polygon, inside):
    """A point is inside, outside or on the edge (edge counts as inside), concave too."""
    assert points_in_polygon(np.array([point], np.float64), polygon).tolist() == [inside]


@pytest.mark.parametrize("inside", [True, False], ids=["plain Python", "numpy"])
def test_points_in_polygon_cases_hold_in_either_form(monkeypatch, inside):
    """The cases above, many points at once, in the plain-Python form (a zone's few tracks)
    and in the numpy one (many points), forced either way."""
    from agent.objects import geometry

    monkeypatch.setattr(geometry, "_FEW", 10**9 if inside else 0)
    points = np.array([(400, 200), (100, 200), (200, 200), (600, 100), (601, 100)], np.float64)
    assert points_in_polygon(points, SQUARE).tolist() == [True, False, True, True, False]
    points = np.array([(50, 80), (20, 80), (80, 20)], np.float64)
    assert points_in_polygon(points, CONCAVE).tolist() == [False, True, True]


def test_points_in_polygon_plain_python_and_numpy_agree(monkeypatch):
    """The two forms give the same answer for random polygons and points, their corners
    and edge midpoints included (on an edge: inside)."""
    monkeypatch.setattr(geometry, "_FEW", 0)  # points_in_polygon: the numpy form
    rng = np.random.default_rng(7)
    for _ in range(500):
        polygon = rng.integers(0, 20, (int(rng.integers(3, 9)), 2)).astype(np.float64) * 37.3
        points = np.concatenate(
            [rng.integers(0, 20, (8, 2)) * 37.3, polygon[:2], (polygon[:1] + polygon[1:2]) / 2]
        )
        few = geometry._few_in_polygon(points.tolist(), polygon.tolist())
        assert few.tolist() == points_in_polygon(points, polygon).tolist()


def test_bottom_centre_is_the_feet():
    """An object's position is the bottom centre of its box."""
    got = anchor_bottom_centre(np.array([[10, 20, 30, 100], [0, 0, 4, 2]], np.float32))
    assert got.tolist() == [[20.0, 100.0], [2.0, 2.0]]


@pytest.mark.parametrize(
    ("points", "p", "sign"),
    [
        # The contract's example: drawn top to bottom, the left side is positive ("in" from).
        ([[0.5, 0.0], [0.5, 1.0]], (100, 50), 1),
        ([[0.5, 0.0], [0.5, 1.0]], (700, 50), -1),
        # Drawn bottom to top, the sides swap.
        ([[0.5, 1.0], [0.5, 0.0]], (100, 50), -1),
        # A horizontal line drawn left to right: below (larger y) is positive.
        ([[0.0, 0.5], [1.0, 0.5]], (300, 390), 1),
    ],
)
def test_line_side_follows_the_contract(points, p, sign):
    """(B-A)x(P-A) > 0 is the side a crossing to < 0 counts as 'in' from."""
    ab = polygon_px(points, (800, 400))
    assert np.sign(line_side(np.array([p], np.float64), ab[0], ab[1]))[0] == sign


@pytest.mark.parametrize(
    ("p0", "p1", "crosses"),
    [
        ((0, 50), (100, 50), True),
        ((0, 150), (100, 150), False),  # passes beside the end of the segment
        ((0, 0), (40, 40), False),
        ((50, 0), (50, 100), True),  # along the segment itself
    ],
)
def test_segments_cross(p0, p1, crosses):
    """A path counts only where it meets the segment, not the infinite line."""
    a, b = np.array([50.0, 0.0]), np.array([50.0, 100.0])
    assert segments_cross(np.array(p0, float), np.array(p1, float), a, b) is crosses
