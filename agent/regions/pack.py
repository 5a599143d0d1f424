"""Regions of one frame packed into few model inputs ("sheets"), and the results unpacked.

A region is a rectangle of the frame (source pixels) and the scale it is looked at (2 for
a small person: magnified 2x). Squares around each object spend most of a model input on
background; tight rectangles, each scaled as its objects need, packed side by side into one
input (skyline packing, a grey gutter between them, the way YOLO's mosaic training images are
put together), spend it on the objects. On a busy street (vtest.avi: 6-8 people) that is
one or two model runs per frame instead of seven or eight squares.

``pack`` places regions on sheets; ``compose`` draws a sheet from a frame; ``unpack`` hands
each detection of a sheet to the region its centre lies in, clipped to it, in frame pixels
(``merge_found`` then puts the regions of a frame together).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from agent.cv import cv2
from agent.detect.detections import Detections
from agent.detect.detector import Detector, StageTimes
from agent.detect.letterbox import PAD_VALUE
from agent.regions.merge import Found
from agent.regions.planner import XyXy

#: Grey pixels around the regions of a trimmed sheet (``trim``): the model finds people
#: right at the edge of its input less often (vtest.avi, the same regions: recall 0.93 on
#: sheets cut at their regions' edge, 0.965 with this border, as on whole 320 sheets).
BORDER = 8

#: Grey pixels between two regions on a sheet (model input pixels): a box of one region
#: never reaches into its neighbour, and the model sees an edge, as in its mosaic training.
GUTTER = 6


@dataclass(frozen=True, slots=True)
class Placement:
    """One region on a sheet: ``region`` (integer source pixels, xyxy) drawn at (x, y),
    ``w`` x ``h`` sheet pixels."""

    region: tuple[int, int, int, int]
    x: int
    y: int
    w: int
    h: int

    @property
    def scale_xy(self) -> tuple[float, float]:
        r = self.region
        return self.w / (r[2] - r[0]), self.h / (r[3] - r[1])


@dataclass(frozen=True, slots=True)
class Sheet:
    """One model input (``hw``: its height and width) holding a few regions."""

    hw: tuple[int, int]
    placements: tuple[Placement, ...]


class _Skyline:
    """Bottom-left skyline packing of one sheet: the top edge of what is placed so far, as
    segments [x, y, width] from left to right; a rectangle goes where its top ends lowest
    (then leftmost). Far denser than shelves for people of several heights."""

    def __init__(self, w: int, h: int) -> None:
        self.w, self.h = w, h
        self.segs: list[list[int]] = [[0, 0, w]]

    def place(self, w: int, h: int) -> tuple[int, int] | None:
        """Where a ``w`` x ``h`` rectangle goes (and is recorded), or None: it does not fit."""
        best: tuple[int, int, int] | None = None  # (top, x, first segment)
        for i, (x, _, _) in enumerate(self.segs):
            if x + w > self.w:
                break
            y, j, left = 0, i, w
            while left > 0:
                y = max(y, self.segs[j][1])
                left -= self.segs[j][2]
                j += 1
            if y + h <= self.h and (best is None or (y + h, x) < (best[0], best[1])):
                best = (y + h, x, i)
        if best is None:
            return None
        top, x, i = best
        self._raise(i, x, w, top)
        return x, top - h

    def _raise(self, i: int, x: int, w: int, top: int) -> None:
        segs = self.segs
        end = x + w
        rest = []
        for sx, sy, sw in segs[i:]:
            if sx + sw <= end:
                continue  # covered by the new rectangle
            if sx < end:
                rest.append([end, sy, sx + sw - end])
            else:
                rest.append([sx, sy, sw])
        merged = [*segs[:i], [x, top, w], *rest]
        out: list[list[int]] = []
        for seg in merged:
            if out and out[-1][1] == seg[1]:
                out[-1][2] += seg[2]
            else:
                out.append(seg)
        self.segs = out


def _integer(region: XyXy, image_wh: tuple[int, int]) -> tuple[int, int, int, int]:
    w, h = image_wh
    x1, y1 = max(0, round(region[0])), max(0, round(region[1]))
    x2, y2 = min(w, max(x1 + 1, round(region[2]))), min(h, max(y1 + 1, round(region[3])))
    return x1, y1, x2, y2


def pack(
    regions: Sequence[XyXy],
    scales: Sequence[float],
    input_hw: tuple[int, int],
    image_wh: tuple[int, int],
    gutter: int = GUTTER,
) -> list[Sheet]:
    """Regions (source pixels) at their scales, on as few sheets of ``input_hw`` as skyline
    packing finds. A region too big for a sheet at its scale is shrunk to fit; every
    region is placed exactly once."""
    return _place(_sized(regions, scales, input_hw, image_wh), input_hw, gutter)


def _place(
    sized: Sequence[tuple[tuple[int, int, int, int], int, int]],
    input_hw: tuple[int, int],
    gutter: int,
    width: int | None = None,
) -> list[Sheet]:
    """``pack`` of regions already sized (``_sized``); ``width``: within this many pixels
    of the left edge only (at least the widest region's width; ``pack_fewest``: a
    narrower, taller layout that trims to a smaller sheet)."""
    ih, iw = input_hw
    bw = iw if width is None else width
    # Tallest first, each on the first sheet it fits (skyline, bottom-left). A gutter
    # follows each rectangle right and below; the sheet is a gutter larger to match.
    sheets: list[list[Placement]] = []
    skylines: list[_Skyline] = []
    for i in sorted(range(len(sized)), key=lambda i: (-sized[i][2], -sized[i][1])):
        r, w, h = sized[i]
        for k, sky in enumerate(skylines):
            at = sky.place(w + gutter, h + gutter)
            if at is not None:
                sheets[k].append(Placement(r, at[0], at[1], w, h))
                break
        else:
            sky = _Skyline(bw + gutter, ih + gutter)
            at = sky.place(w + gutter, h + gutter)
            assert at is not None  # an empty sheet holds any region shrunk to fit it
            skylines.append(sky)
            sheets.append([Placement(r, at[0], at[1], w, h)])
    return [Sheet(input_hw, tuple(p)) for p in sheets]


def _sized(
    regions: Sequence[XyXy],
    scales: Sequence[float],
    input_hw: tuple[int, int],
    image_wh: tuple[int, int],
) -> list[tuple[tuple[int, int, int, int], int, int]]:
    """Per region: its integer rectangle, and its width and height on a sheet at its
    scale (shrunk to fit ``input_hw``)."""
    ih, iw = input_hw
    sized = []
    for region, want in zip(regions, scales, strict=True):
        r = _integer(region, image_wh)
        rw, rh = r[2] - r[0], r[3] - r[1]
        s = min(want, iw / rw, ih / rh)
        sized.append((r, max(1, min(iw, round(rw * s))), max(1, min(ih, round(rh * s)))))
    return sized


def trim(sheet: Sheet, stride: int, border: int = BORDER) -> Sheet:
    """``sheet`` cut down to the part its regions use plus up to ``border`` grey pixels all
    around, each side rounded up to a multiple of ``stride`` and no larger than it was (for
    a model that takes any such size, at the cost of its pixels: a sheet with one person
    is a fraction of a whole one)."""
    used = (
        max(p.y + p.h for p in sheet.placements),
        max(p.x + p.w for p in sheet.placements),
    )
    sides, shift = [], []
    for extent, whole in zip(used, sheet.hw, strict=True):
        side = min(whole, max(stride, -(-(extent + 2 * border) // stride) * stride))
        sides.append(side)
        shift.append(min(border, (side - extent) // 2))
    moved = tuple(replace(p, x=p.x + shift[1], y=p.y + shift[0]) for p in sheet.placements)
    return Sheet((sides[0], sides[1]), moved)


def compose(image: npt.NDArray[np.uint8], sheet: Sheet) -> npt.NDArray[np.uint8]:
    """The sheet's model-input image: each region resized into its place, grey around."""
    ih, iw = sheet.hw
    canvas = np.full((ih, iw, 3), PAD_VALUE, np.uint8)
    for p in sheet.placements:
        x1, y1, x2, y2 = p.region
        crop = image[y1:y2, x1:x2]
        if crop.shape[1] == p.w and crop.shape[0] == p.h:
            canvas[p.y : p.y + p.h, p.x : p.x + p.w] = crop
        else:
            canvas[p.y : p.y + p.h, p.x : p.x + p.w] = resized(crop, p.w, p.h)
    return canvas


def resized(crop: npt.NDArray[np.uint8], w: int, h: int) -> npt.NDArray[np.uint8]:
    """``crop`` at ``w`` x ``h``: linear, after halving it by area while it is at least
    twice as large (a linear shrink by 2x or more aliases). OpenCV's area resize halves
    fast but costs 7-8x as much at a fractional factor, which a near person (shrunk 3-7x
    to ``near_px``) or an HD frame's coarse look would pay every frame: 864 x 700 to 120
    px tall 2.43 ms against 0.29, 1920 x 1080 to 400 tall 12.7 against 1.7 (one thread).
    Each halving leaves out an odd last row or column; the linear step keeps the region's
    own scale (``fx``, ``fy``), so the pixels land where a direct resize puts them, and
    it comes out at most one row or column short (never long: the halved image covers no
    more than the crop), which repeats its neighbour."""
    src_h, src_w = crop.shape[:2]
    small, k = crop, 1
    while 2 * w <= small.shape[1] and 2 * h <= small.shape[0]:
        half = (small.shape[1] // 2, small.shape[0] // 2)
        small = cv2.resize(small[: 2 * half[1], : 2 * half[0]], half, interpolation=cv2.INTER_AREA)
        k *= 2
    if k == 1:
        direct: npt.NDArray[np.uint8] = cv2.resize(crop, (w, h), interpolation=cv2.INTER_LINEAR)
        return direct
    out: npt.NDArray[np.uint8] = cv2.resize(
        small, None, fx=w * k / src_w, fy=h * k / src_h, interpolation=cv2.INTER_LINEAR
    )
    oh, ow = out.shape[:2]
    if (oh, ow) != (h, w):
        out = cv2.copyMakeBorder(out, 0, h - oh, 0, w - ow, cv2.BORDER_REPLICATE)
    return out


def unpack(dets: Detections, sheet: Sheet) -> Found:
    """The sheet's detections in frame pixels, each with its region. A detection belongs
    to the region its centre lies in (none: in a gutter, dropped) and is clipped to it."""
    if not len(dets):  # most sweep squares and many regions: nothing to place
        return Found(dets, np.empty((0, 4), np.float64), len(sheet.placements))
    # Per placement: x, y, w, h on the sheet, then its region (frame pixels).
    at = np.array([(p.x, p.y, p.w, p.h, *p.region) for p in sheet.placements], np.float64)
    cx = (dets.xyxy[:, 0] + dets.xyxy[:, 2]) / 2
    cy = (dets.xyxy[:, 1] + dets.xyxy[:, 3]) / 2
    x, y, w, h = (at[:, k, None] for k in range(4))
    inside = (cx >= x) & (cx < x + w) & (cy >= y) & (cy < y + h)  # (placements, dets)
    idx = np.nonzero(inside.any(axis=0))[0]
    mine = at[inside[:, idx].argmax(axis=0)]  # each kept detection's placement
    px, py, pw, ph = mine[:, 0:1], mine[:, 1:2], mine[:, 2:3], mine[:, 3:4]
    region = mine[:, 4:]
    sx = pw / (region[:, 2:3] - region[:, 0:1])
    sy = ph / (region[:, 3:4] - region[:, 1:2])
    b = dets.xyxy[idx].astype(np.float64)
    xs = (np.clip(b[:, 0::2], px, px + pw) - px) / sx + region[:, 0:1]
    ys = (np.clip(b[:, 1::2], py, py + ph) - py) / sy + region[:, 1:2]
    xyxy = np.stack([xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]], axis=1).astype(np.float32)
    kp = dets.keypoints
    if kp is not None:
        kp = kp[idx]
        kp[..., 0] = (kp[..., 0] - px) / sx + region[:, 0:1]
        kp[..., 1] = (kp[..., 1] - py) / sy + region[:, 1:2]
    labels = tuple(dets.labels[i] for i in idx.tolist())
    found = Detections(xyxy, dets.score[idx], dets.class_id[idx], labels, kp)
    return Found(found, region, len(sheet.placements), scales=sy[:, 0])


#: The coarse look shows a frame at most this many pixels tall: someone a fifth of the
#: frame tall (the smallest a whole-frame look finds plainly) then stands 80 model pixels,
#: as a region shows a small person (``PlannerParams.object_px``); more costs pixels for
#: people the regions see already. The INT8 model is kinder to people at 0.7-0.8x than
#: at 1.0x, far and small or half out of the frame alike: the scene's looks (the first
#: frame, a cut, the quiet look) find far still people so (a 640x480 camera's first
#: frame: 12 of 24 at 0.83x, 3 at 1.0x), and a look for someone near (``Plan.near``) sees
#: a frame that fits the model as ``full`` does, at 1.0x (the 4:3 close-up clip's false
#: big boxes, 3 noise draws offline: 7 -> 4, its half-seen man 0.63-0.74 at 0.83x).
COARSE_PX = 400
#: Grey pixels round the coarse look's frame (where the sheet has room), as round regions.
#: It gets false low-score "people" along its top edge that the same model on a letterboxed
#: frame does not (the close-up clip: 4 of 6 frames; 2 with 32 px, none with 140): merge's
#: ``Anchors`` drop those, and the pixels of a wider border go to the regions.
COARSE_BORDER = BORDER


def whole_sheet(
    image_wh: tuple[int, int], input_hw: tuple[int, int], stride: int | None, near: bool = False
) -> Sheet:
    """The coarse look's sheet: the whole frame shrunk to fit ``input_hw`` and to stand at
    most ``COARSE_PX`` tall, never magnified (cut to what it takes where the model takes
    any size: ``stride``; a model of one size gets its whole input); ``near``: a look for
    someone near, which shows a frame that fits ``input_hw`` as it is."""
    whole = (0.0, 0.0, float(image_wh[0]), float(image_wh[1]))
    fits = near and image_wh[0] <= input_hw[1] and image_wh[1] <= input_hw[0]
    scale = 1.0 if stride is None or fits else min(1.0, COARSE_PX / image_wh[1])
    sheet = pack([whole], [scale], input_hw, image_wh, gutter=0)[0]
    return sheet if stride is None else trim(sheet, stride, COARSE_BORDER)


def detect_sheet(
    detector: Detector, image: npt.NDArray[np.uint8], sheet: Sheet, *, coarse: bool = False
) -> tuple[Found, StageTimes]:
    """One model run over a sheet of ``image``'s regions: what it found there (frame
    pixels), and the run's stage times (composing the sheet counts as preprocessing);
    ``coarse``: the sheet is the coarse look (``whole_sheet``)."""
    t0 = time.perf_counter()
    canvas = compose(image, sheet)
    compose_ms = (time.perf_counter() - t0) * 1e3
    r = detector.detect_exact(canvas)
    t = r.times
    times = StageTimes(t.preprocess_ms + compose_ms, t.inference_ms, t.postprocess_ms)
    found = unpack(r.detections, sheet)
    return (replace(found, coarse=True) if coarse else found), times


#: How far ``pack_fewest`` may shrink a frame's regions to save a model run.
SQUEEZE = (0.92, 0.85)


def pack_fewest(
    regions: Sequence[XyXy],
    scales: Sequence[float],
    input_hw: tuple[int, int],
    image_wh: tuple[int, int],
    squeeze: Sequence[float] = SQUEEZE,
    stride: int | None = None,
) -> list[Sheet]:
    """``pack``, and where the regions spill over onto one more sheet than they would at a
    little less magnification (``squeeze``: factors tried in turn), that packing instead:
    an object a few percent smaller costs far less than a whole model run more. With
    ``stride`` (a model that takes any multiple of it): the sheets trimmed (``trim``), in
    the layout of the fewest model pixels among those packed within narrower widths, a
    stride at a time (a sheet's sides go up in strides: five regions of 60 x 100 packed
    320 wide trim to 224 x 288, within 224 to 224 x 224)."""
    sized = _sized(regions, scales, input_hw, image_wh)
    sheets = _place(sized, input_hw, GUTTER)
    for f in squeeze if len(sheets) > 1 else ():
        smaller = _sized(regions, [s * f for s in scales], input_hw, image_wh)
        fewer = _place(smaller, input_hw, GUTTER)
        if len(fewer) < len(sheets):
            sized, sheets = smaller, fewer
            break
    if stride is None:
        return sheets
    best = [trim(s, stride) for s in sheets]
    if len(sized) < 2:
        return best
    least = model_pixels(best)
    widest = max(w for _, w, _ in sized)
    # A width is packed only if it may beat the best: its sheet is as tall as the tallest
    # region at least, and about as tall as the regions' area (gutters in) over the width.
    tallest = max(h for _, _, h in sized) + 2 * BORDER
    area = sum((w + GUTTER) * (h + GUTTER) for _, w, h in sized)
    width = best[0].hw[1] - stride if len(best) == 1 else input_hw[1] - stride
    while width - 2 * BORDER >= widest:
        rows = max(tallest, area // (width - 2 * BORDER) + 2 * BORDER)
        if width * -(-rows // stride) * stride < least:
            other = _place(sized, input_hw, GUTTER, width - 2 * BORDER)
            if len(other) > len(best):
                break  # narrower still needs more sheets too
            tight = [trim(s, stride) for s in other]
            pixels = model_pixels(tight)
            if pixels < least:
                best, least = tight, pixels
        width -= stride
    return best


def model_pixels(sheets: Sequence[Sheet]) -> int:
    """The model-input pixels of ``sheets`` (what their model runs cost, about)."""
    return sum(s.hw[0] * s.hw[1] for s in sheets)
