"""Annotated images: labels stay inside the image, whatever the box position."""

from __future__ import annotations

import numpy as np
import pytest

from agent.cv import cv2
from agent.detect.detections import Detections
from agent.render.draw import draw, label_origin


@pytest.mark.parametrize(
    ("text_wh", "box_xy", "image_wh", "origin"),
    [
        ((50, 10), (100, 100), (640, 480), (100, 95)),  # room everywhere: above the box
        ((50, 10), (620, 100), (640, 480), (589, 95)),  # right edge: moved left
        ((50, 10), (100, 2), (640, 480), (100, 11)),  # top edge: moved down
        ((50, 10), (630, 0), (640, 480), (589, 11)),  # top-right corner
        ((50, 10), (0, 479), (640, 480), (0, 474)),  # bottom edge: above the box
        ((700, 10), (10, 100), (640, 480), (0, 95)),  # wider than the image: from x = 0
    ],
)
def test_label_origin_keeps_the_label_inside(text_wh, box_xy, image_wh, origin):
    """The label's bottom-left point keeps the whole label inside the image."""
    assert label_origin(text_wh, 3, box_xy, image_wh) == origin


def test_label_at_the_right_edge_is_drawn_whole():
    """A box touching the right edge gets its whole label drawn, not cut off."""
    image = np.zeros((200, 300, 3), np.uint8)
    dets = Detections(
        xyxy=np.array([[280.0, 60.0, 299.0, 150.0]], np.float32),
        score=np.array([0.91], np.float32),
        class_id=np.array([0], np.int32),
        labels=("person",),
    )
    out = draw(image, dets)
    (tw, th), _ = cv2.getTextSize("person 0.91", cv2.FONT_HERSHEY_SIMPLEX, 0.4, 1)
    band = out[60 - th - 8 : 60, :, 1] > 100  # green text above the box
    columns = np.flatnonzero(band.any(axis=0))
    assert columns.size > 0
    assert columns.max() - columns.min() + 1 >= tw - 2  # the whole width of the text
    assert columns.max() < 300
