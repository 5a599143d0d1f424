"""Overlapping tiles over a still image, for ``edge-agent detect --tiles`` (large photos).

A photo far larger than the model's input shrinks its small objects to nothing; tiles of
half the model's input side (magnified 2x, as region mode's squares around small objects
are), overlapping so every object lies whole in at least one, are each looked at, and
their detections merge like regions do.
Tiles twice as large (on images more than twice a tile) and the whole image are looked at
too, so an object larger than a tile is found whole and its cut pieces give way to it.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.detect.detector import Detector, StageTimes
from agent.regions.merge import merge_regions
from agent.regions.planner import XyXy

#: default tile side as a share of the model's input side: 2x magnification, which finds
#: the 55-85 px people of vtest.avi that 4/3 (3/4 of the input) misses (bench/regions.py
#: --parts tiles: recall 0.85 -> 1.00 with the 320 model, 0.70 -> 0.99 with the 640 one)
TILE_SHARE = 0.5


def tile_grid(image_wh: tuple[int, int], tile_px: int, overlap: float) -> list[XyXy]:
    """Squares of ``tile_px`` (less where the image is smaller) covering the image."""
    w, h = image_wh
    side = min(tile_px, w, h)
    step = side * (1.0 - overlap)
    nx = max(1, math.ceil((w - side) / step) + 1)
    ny = max(1, math.ceil((h - side) / step) + 1)
    xs = [0.0] if nx == 1 else [i * (w - side) / (nx - 1) for i in range(nx)]
    ys = [0.0] if ny == 1 else [j * (h - side) / (ny - 1) for j in range(ny)]
    return [(x, y, x + side, y + side) for y in ys for x in xs]


def detect_tiled(
    detector: Detector,
    image: npt.NDArray[np.uint8],
    tile_px: int | None = None,
    overlap: float = 0.2,
) -> tuple[Detections, StageTimes, int]:
    """Detections of ``image`` from its tiles and the whole; (detections, times, looks)."""
    wh = (int(image.shape[1]), int(image.shape[0]))
    side = tile_px or round(TILE_SHARE * min(detector.info.input_hw))
    regions = tile_grid(wh, side, overlap)
    if min(wh) > 2 * side:  # a middle scale: objects larger than a tile are seen whole
        regions += tile_grid(wh, 2 * side, overlap)
    regions.append((0.0, 0.0, float(wh[0]), float(wh[1])))
    parts = []
    pre = infer = post = 0.0
    for x1, y1, x2, y2 in regions:
        box = (round(x1), round(y1), round(x2), round(y2))
        r = detector.detect(image[box[1] : box[3], box[0] : box[2]])
        parts.append((box, r.detections))
        pre += r.times.preprocess_ms
        infer += r.times.inference_ms
        post += r.times.postprocess_ms
    th = detector.thresholds
    dets = merge_regions(parts, wh, iou_threshold=th.iou, max_det=th.max_det)
    return dets, StageTimes(pre, infer, post), len(regions)
