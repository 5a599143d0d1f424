"""Overlapping tiles over a still image, for ``edge-agent detect --tiles`` (large photos).

A photo far larger than the model's input shrinks its small objects to nothing; tiles of
half the model's input side (magnified 2x, as region mode's regions around small objects
are), overlapping so every object lies whole in at least one, are each looked at, and
their detections merge like regions do.
Tiles 2, 4, 8 ... times as large (each scale that still fits in the image) and the whole
image are looked at too, so an object larger than a tile is found whole at some scale and
its cut pieces give way to it; the larger scales cost about a third of the smallest.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.detect.detector import Detector, StageTimes
from agent.regions.merge import concat, merge_regions, shift, take
from agent.regions.planner import XyXy

#: default tile side as a share of the model's input side: 2x magnification, which finds
#: the 55-85 px people of vtest.avi that 4/3 (3/4 of the input) misses (bench/regions.py
#: --parts tiles: recall 0.85 -> 1.00 with the 320 model, 0.70 -> 0.99 with the 640 one)
TILE_SHARE = 0.5
#: a box with this share of its area inside a larger box of its class from a larger look
#: is a piece of that object (``drop_pieces``)
CONTAINED = 0.8


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


def plan_tiles(image_wh: tuple[int, int], side: int, overlap: float) -> list[XyXy]:
    """Tiles of ``side``, then of 2, 4, 8 ... times that while they fit in the image (each
    scale sees whole what the smaller ones cut), then the whole image."""
    regions = tile_grid(image_wh, side, overlap)
    level = 2 * side
    while min(image_wh) > level:
        regions += tile_grid(image_wh, level, overlap)
        level *= 2
    regions.append((0.0, 0.0, float(image_wh[0]), float(image_wh[1])))
    return regions


def detect_tiled(
    detector: Detector,
    image: npt.NDArray[np.uint8],
    tile_px: int | None = None,
    overlap: float = 0.2,
) -> tuple[Detections, StageTimes, int]:
    """Detections of ``image`` from its tiles and the whole; (detections, times, looks)."""
    wh = (int(image.shape[1]), int(image.shape[0]))
    side = tile_px or round(TILE_SHARE * min(detector.info.input_hw))
    regions = plan_tiles(wh, side, overlap)
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
    dets = merge_regions(drop_pieces(parts), wh, iou_threshold=th.iou, max_det=th.max_det)
    return dets, StageTimes(pre, infer, post), len(regions)


def drop_pieces(
    parts: list[tuple[tuple[int, int, int, int], Detections]],
) -> list[tuple[tuple[int, int, int, int], Detections]]:
    """``parts`` (region, detections in region pixels) without the boxes that lie mostly
    (``CONTAINED``) inside a larger box of the same class found by a larger look: a small
    tile magnifies a piece of a person (a head, legs) into something the model calls a
    person, and the larger look that saw the whole one outranks it. Boxes of one look
    are the model's own decision and never drop each other."""
    sides = [max(r[2] - r[0], r[3] - r[1]) for r, _ in parts]
    moved = [shift(d, r[0], r[1]) for r, d in parts]
    # The boxes of all larger looks and their areas, once per tile size (a big photo has
    # hundreds of tiles).
    above = {}
    for side in set(sides):
        big = concat([m for m, s in zip(moved, sides, strict=True) if s > side])
        b = big.xyxy.astype(np.float64)
        above[side] = (big, b, np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1))
    out = []
    for (region, found), here, side in zip(parts, moved, sides, strict=True):
        big, b, big_area = above[side]
        if not len(found) or not len(big):
            out.append((region, found))
            continue
        keep = np.ones((len(here),), np.bool_)
        for i, box in enumerate(here.xyxy.astype(np.float64)):
            area = float(np.prod(np.clip(box[2:] - box[:2], 0, None)))
            inter = np.prod(
                np.clip(np.minimum(box[2:], b[:, 2:]) - np.maximum(box[:2], b[:, :2]), 0, None),
                axis=1,
            )
            same = (big.class_id == here.class_id[i]) & (big_area > area)
            keep[i] = not (area > 0 and np.any(same & (inter >= CONTAINED * area)))
        out.append((region, found if keep.all() else take(found, np.nonzero(keep)[0])))
    return out
