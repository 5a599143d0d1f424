"""Detections of several regions of one frame, put back together in source pixels.

Each region's detections are shifted by the region's corner. Where regions overlap, one
object is found twice: NMS across regions keeps the best. An object cut by a region's edge
(one that is not the image's edge) gives a partial box; it is dropped where another box
holds most of it and goes on past the cut, or was found by a look that saw past the cut,
and kept otherwise (nothing better saw it; the other box is someone in front of it). Two
untracked boxes cut at the seam of two regions, toward each other, together big, are one
near object: joined. A box of a region that lies mostly inside a much larger box of the
coarse look (the whole frame at once), or of a big box of any region (its own too: a
near person's region, shrunk to a sixth, gives their right half a box of its own), is a
piece of that object, a head or an arm seen up close: dropped (not one holding a track
the coarse look confirmed that the larger box does not hold: someone behind a wider
person). A big box of low score that no tracked object (nor, a region's, a coarse box)
holds is dropped (``Anchors``; a track holds no piece of itself: their legs, their top
half): half a person and the space beside them, a pattern half taken for a person, seen
anew by each look; unless the last frame's coarse look found
such a box in its place (``Anchors.faint``: someone every look half takes for a person,
looked at again). On a frame with a coarse look, a big box that look does not see plainly is
dropped; until the next one, so is a region's new big box where it saw no big box and
nothing moved since (``_vetoed_since``). Still objects not looked at this frame stand in
with their last look's detection (``held_found``), merged as one more look.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.detect.nms import iou_matrix, nms
from agent.regions.planner import XyXy

#: A box this close to an inner edge of its region (share of the region's side, at least
#: 2 px) is cut by it: a partial object's box often stops a little short of the edge.
EDGE_SHARE = 0.03
#: A cut box is dropped when another box covers this share of it.
COVERED = 0.6
#: Two cut boxes of one class, each cut toward the other, sharing this share of the
#: smaller one's area are one object seen in two regions: joined.
STITCH = 0.5
#: A box filling this share of a region that is not the whole image is a piece of something
#: larger than the region (magnified texture), never an object: dropped.
FILLS = 0.8
#: A region's box lying this share inside a box of the coarse look that is ...
PIECE_INSIDE = 0.8
#: ... at least this many times its area is a piece of that object: dropped.
PIECE_AREA = 2.0
#: ... or this many times its area with three of its sides on that box's (to this share).
SIDE_AREA = 1.25
SIDE_SHARE = 0.1


#: A big box scoring under this must be held by a tracked object or a faint box of the
#: last frame (or, a region's, by a coarse box) overlapping it this much (IoU); on a frame
#: with a coarse look, any big box needs a coarse box scoring this (``_unseen_by_coarse``),
#: or, a region's scoring this and cut by a side of the frame, one of lower score
#: overlapping it ``ANCHOR_IOU_LOW`` (``_sparing_sides``).
ANCHOR_SCORE = 0.5
ANCHOR_IOU_LOW = 0.5
#: On a frame with a coarse look, a region's big box must overlap a coarse box this much.
ANCHOR_IOU = 0.3


@dataclass(frozen=True, slots=True)
class Anchors:
    """What a region's big box must overlap to be kept: the tracked objects' boxes when
    the frame was planned, less those the last coarse look doubted (big, and not seen by
    it: a track it no longer sees vouches for nothing); ``big_px``: boxes this tall or
    more are big; ``doubted``: those doubted tracks' boxes: until the next coarse look, a
    big box where one of them is (IoU ``ANCHOR_IOU``) is dropped, whatever it scores
    (``merge_found``); ``faint``: the big boxes under ``ANCHOR_SCORE`` that the coarse look of
    the frame last handed back found (``Looker.follow``): one of them holds a big box of
    low score as a track does (IoU ``ANCHOR_IOU_LOW``): someone whom every look half
    takes for a person, seen again in place (a man cut by a doorbell's frame edge,
    0.32-0.49 in every look, whom ``full`` publishes at 0.49 and no track holds: tracks
    start at 0.5). Not a region's such box: at best part of someone (legs), it would hold
    a smaller piece next frame, and so on down."""

    boxes: tuple[tuple[float, float, float, float], ...]
    big_px: float
    doubted: tuple[tuple[float, float, float, float], ...] = ()
    faint: tuple[tuple[float, float, float, float], ...] = ()
    # Those of ``boxes`` the coarse look confirmed (``TrackHint.confirmed``): someone whole,
    # no piece of another (``_apart``).
    confirmed: tuple[tuple[float, float, float, float], ...] = ()
    # The last coarse look's frame's big boxes, kept or not (None: no coarse look since the
    # last cut, or this frame has one), and what moved since (``_vetoed_since``).
    judged: tuple[tuple[float, float, float, float], ...] | None = None
    moved: tuple[tuple[float, float, float, float], ...] = ()


def shift(dets: Detections, dx: float, dy: float) -> Detections:
    """``dets`` moved by (dx, dy) pixels (a crop's detections into the frame's pixels)."""
    if not len(dets) or (dx == 0 and dy == 0):
        return dets
    xyxy = dets.xyxy + np.array([dx, dy, dx, dy], np.float32)
    kp = dets.keypoints
    if kp is not None:
        kp = kp.copy()
        kp[..., 0] += dx
        kp[..., 1] += dy
    return Detections(xyxy, dets.score, dets.class_id, dets.labels, kp)


def concat(parts: Sequence[Detections]) -> Detections:
    """All detections of ``parts``, in order (a single non-empty part: that part itself)."""
    parts = [d for d in parts if len(d)]
    if not parts:
        return Detections.empty()
    if len(parts) == 1:
        return parts[0]  # nothing to join (one sheet's or one region's finds: most frames)
    kps = [d.keypoints for d in parts]
    kp = None
    if all(k is not None for k in kps):
        kp = np.concatenate([k for k in kps if k is not None])
    return Detections(
        np.concatenate([d.xyxy for d in parts]),
        np.concatenate([d.score for d in parts]),
        np.concatenate([d.class_id for d in parts]),
        tuple(label for d in parts for label in d.labels),
        kp,
    )


@dataclass(frozen=True, slots=True)
class Found:
    """What the detector found in some regions of one frame: ``dets`` in frame pixels, and
    per detection the region it was found in (``regions``: (n, 4) xyxy, float64);
    ``looked``: how many regions these come from, those that found nothing included;
    ``coarse``: these are the coarse look's (the whole frame in one input)."""

    dets: Detections
    regions: npt.NDArray[np.float64]
    looked: int
    coarse: bool = False
    scales: npt.NDArray[np.float64] | None = None  # per detection: model px per frame px


def found_in(parts: Sequence[tuple[XyXy, Detections]]) -> Found:
    """``parts`` (region, its detections in region pixels) as one ``Found``."""
    moved = concat([shift(d, r[0], r[1]) for r, d in parts])
    corners = np.asarray([r for r, _ in parts], np.float64).reshape(-1, 4)
    return Found(moved, np.repeat(corners, [len(d) for _, d in parts], axis=0), len(parts))


def _cut(
    xyxy: npt.NDArray[np.float64], regions: npt.NDArray[np.float64], image_wh: tuple[int, int]
) -> npt.NDArray[np.bool_]:
    """Per box and side (x1, y1, x2, y2): whether the box reaches that inner edge of its
    region (one not the image's); (n, 4)."""
    w, h = image_wh
    x1, y1, x2, y2 = regions.T
    edge = np.maximum(2.0, EDGE_SHARE * np.maximum(x2 - x1, y2 - y1))
    cut: npt.NDArray[np.bool_] = np.stack(
        [
            (x1 > 0) & (xyxy[:, 0] <= x1 + edge),
            (y1 > 0) & (xyxy[:, 1] <= y1 + edge),
            (x2 < w) & (xyxy[:, 2] >= x2 - edge),
            (y2 < h) & (xyxy[:, 3] >= y2 - edge),
        ],
        axis=1,
    )
    return cut


def merge_regions(
    parts: Sequence[tuple[XyXy, Detections]],
    image_wh: tuple[int, int],
    *,
    iou_threshold: float,
    max_det: int,
) -> Detections:
    """One frame's detections from its regions' (region, detections in region pixels)."""
    dets, _ = merge_found([found_in(parts)], image_wh, iou_threshold=iou_threshold, max_det=max_det)
    return dets


def merge_found(
    found: Sequence[Found],
    image_wh: tuple[int, int],
    *,
    iou_threshold: float,
    max_det: int,
    anchors: Anchors | None = None,
) -> tuple[Detections, npt.NDArray[np.intp]]:
    """One frame's detections from what its regions found (``unpack`` of each sheet), and
    per detection its row among ``found``'s detections (in order), or -1 for a box
    ``_stitch`` joined of two (``sharpness``); ``anchors``: a region's big box must overlap
    one of them or a coarse box (None: no such rule)."""
    dets = concat([f.dets for f in found])
    if not len(dets):
        return dets, np.zeros(0, np.intp)
    regions = found[0].regions if len(found) == 1 else np.concatenate([f.regions for f in found])
    w, h = image_wh
    b = dets.xyxy.astype(np.float64)
    area = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    region_area = np.prod(regions[:, 2:] - regions[:, :2], axis=1)
    keep = ~((region_area < w * h * FILLS) & (area >= FILLS * region_area))
    coarse = np.concatenate([np.full(len(f.dets), f.coarse, np.bool_) for f in found])
    looked_whole = any(f.coarse for f in found)  # the coarse look ran (found or not)
    if anchors is not None:  # one region alone too: a near person's region sees pieces
        # Once per frame: the boxes ``big_px`` tall, and those scoring ``ANCHOR_SCORE``.
        tall = b[:, 3] - b[:, 1] >= anchors.big_px
        plain = dets.score >= ANCHOR_SCORE
        tracked, held = _holds(b, area, tall & ~plain, anchors)
        low = _unanchored(b, tall & ~plain, coarse, held)
        keep &= ~low
        if not looked_whole and tall.any():
            keep &= ~_vetoed_since(b, tall, tracked, anchors)
    # With anchors, a near person's big box of any look holds its pieces: its own look's
    # too (one look, one region).
    whole = coarse if anchors is None else coarse | (keep & tall & plain)
    if whole.any():
        confirmed = None if anchors is None else anchors.confirmed
        keep &= ~_pieces(b, area, dets.class_id, coarse, whole, confirmed)
    if sum(f.looked for f in found) == 1:
        rows = np.nonzero(keep)[0]
        return _select(dets, keep), rows
    if anchors is not None and looked_whole:
        unseen = _unseen_by_coarse(b, tall, coarse & keep & plain)
        keep &= ~_sparing_sides(b, unseen, coarse, plain, w)
    sides = _cut(b, regions, image_wh)
    cut = keep & sides.any(axis=1)
    for i in np.nonzero(cut)[0].tolist():
        tl = np.maximum(b[i, :2], b[:, :2])
        br = np.minimum(b[i, 2:], b[:, 2:])
        inter = np.prod(np.clip(br - tl, 0, None), axis=1)
        inter[i] = 0.0
        same = keep & (dets.class_id == dets.class_id[i]) & (area > area[i])
        if area[i] <= 0:
            continue
        over = same & (inter / area[i] >= COVERED) & ~cut
        if over.any() and np.any(
            over & (_goes_on(b, i, sides[i]) | _saw_past(b[i], sides[i], regions, image_wh))
        ):
            keep[i] = False
    joined: list[int] = []
    if anchors is not None:
        dets, joined = _stitch(dets, b, keep, (keep | low) & ~tracked, sides, regions,
                               anchors.big_px)  # fmt: skip
    idx = np.nonzero(keep)[0]
    order = nms(dets.xyxy[idx], dets.score[idx], dets.class_id[idx],
                iou_threshold=iou_threshold, max_det=max_det)  # fmt: skip
    rows = idx[order]
    out = take(dets, rows)
    if joined:
        rows = np.where(np.isin(rows, joined), -1, rows)
    return out, rows


def _stitch(
    dets: Detections,
    b: npt.NDArray[np.float64],
    keep: npt.NDArray[np.bool_],
    loose: npt.NDArray[np.bool_],
    sides: npt.NDArray[np.bool_],
    regions: npt.NDArray[np.float64],
    big_px: float,
) -> tuple[Detections, list[int]]:
    """``dets`` with pieces of one near object seen across a seam joined: two boxes of
    ``loose`` (no tracked object's; kept, or one of them a big piece of low score that
    ``_unanchored`` dropped, beside a kept one scoring ``ANCHOR_SCORE``: the middle of
    someone entering at the frame's edge, their legs found plainly below it) of one class
    from two regions, each cut by
    its region's edge on the side toward the other, sharing ``STITCH`` of the smaller one's
    area, together ``big_px`` tall: someone near, entering the frame, of whom motion saw a
    few small blobs. Small people one behind the other, and tracked people, are two. The
    higher-scoring one becomes their union; the other is dropped from ``keep`` (in
    place); and the rows of those unions."""
    cut = np.nonzero(loose & sides.any(axis=1))[0].tolist()
    joined: list[int] = []
    if len(cut) < 2:
        return dets, joined
    b = b.copy()
    for n, i in enumerate(cut):
        for j in cut[n + 1 :]:
            if not (keep[i] or keep[j]) or dets.class_id[i] != dets.class_id[j]:
                continue
            if not (keep[i] and keep[j]) and max(dets.score[i], dets.score[j]) < ANCHOR_SCORE:
                continue  # a low-score piece joins only a plain find (unanchored: dropped)
            if np.array_equal(regions[i], regions[j]):
                continue
            tl, br = np.maximum(b[i, :2], b[j, :2]), np.minimum(b[i, 2:], b[j, 2:])
            inter = float(np.prod(np.clip(br - tl, 0, None)))
            smaller = min(float(np.prod(b[i, 2:] - b[i, :2])), float(np.prod(b[j, 2:] - b[j, :2])))
            if smaller <= 0 or inter < STITCH * smaller:
                continue
            if not (_toward(b[i], sides[i], b[j]) and _toward(b[j], sides[j], b[i])):
                continue
            if max(b[i, 3], b[j, 3]) - min(b[i, 1], b[j, 1]) < big_px:
                continue
            hi, lo = (i, j) if dets.score[i] >= dets.score[j] else (j, i)
            b[hi] = [*np.minimum(b[i, :2], b[j, :2]), *np.maximum(b[i, 2:], b[j, 2:])]
            keep[hi], keep[lo] = True, False
            joined.append(hi)
    if not joined:
        return dets, joined
    xyxy = b.astype(np.float32)
    return Detections(xyxy, dets.score, dets.class_id, dets.labels, dets.keypoints), joined


def _toward(
    a: npt.NDArray[np.float64], cut: npt.NDArray[np.bool_], other: npt.NDArray[np.float64]
) -> bool:
    """Whether box ``a`` is cut on a side where ``other`` goes on past it."""
    past = (other[0] < a[0], other[1] < a[1], other[2] > a[2], other[3] > a[3])
    return any(c and p for c, p in zip(cut.tolist(), past, strict=True))


def _goes_on(
    b: npt.NDArray[np.float64], i: int, sides: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """Per box: whether it reaches as far as box ``i`` on each side where ``i`` is cut (to
    a tenth of ``i``'s size): the whole of which ``i`` is the cut piece goes on past the
    region's edge. Another object beside it (two people, one in front) stops short."""
    tol = SIDE_SHARE * np.array([b[i, 2] - b[i, 0], b[i, 3] - b[i, 1]] * 2)
    reach = np.stack(
        [b[:, 0] <= b[i, 0] + tol[0], b[:, 1] <= b[i, 1] + tol[1],
         b[:, 2] >= b[i, 2] - tol[2], b[:, 3] >= b[i, 3] - tol[3]],
        axis=1,
    )  # fmt: skip
    out: npt.NDArray[np.bool_] = np.all(reach | ~sides[None, :], axis=1)
    return out


def _saw_past(
    box: npt.NDArray[np.float64],
    cut: npt.NDArray[np.bool_],
    regions: npt.NDArray[np.float64],
    image_wh: tuple[int, int],
) -> npt.NDArray[np.bool_]:
    """Per box: whether its region holds all of ``box`` and saw past each side where
    ``box`` is ``cut`` (it would not be cut there): that look saw uncut what ``box`` is a
    cut view of, so what it found over ``box`` is the whole of it. (A walker's legs, cut by
    a sweep square's edges, reach to the square's edge past where the walker's whole box,
    found in their own region, ends.) The coarse look and still objects' last looks held
    the whole frame: where nothing moves, what a still object's look found is there."""
    holds = np.all(regions[:, :2] <= box[:2], axis=1) & np.all(regions[:, 2:] >= box[2:], axis=1)
    again = _cut(np.broadcast_to(box, regions.shape), regions, image_wh)
    out: npt.NDArray[np.bool_] = holds & ~np.any(again & cut, axis=1)
    return out


def _pieces(
    b: npt.NDArray[np.float64],
    area: npt.NDArray[np.float64],
    class_id: npt.NDArray[np.int32],
    coarse: npt.NDArray[np.bool_],
    whole: npt.NDArray[np.bool_],
    confirmed: Sequence[tuple[float, float, float, float]] | None = None,
) -> npt.NDArray[np.bool_]:
    """Per box: a region's box lying ``PIECE_INSIDE`` inside a box of ``whole`` (the coarse
    look's, and big boxes of any look) of its class at least ``PIECE_AREA`` times larger (a
    piece of that object); not where the tracks the coarse look ``confirmed`` say the two
    are two people (``_apart``)."""
    big = np.nonzero(whole)[0]
    of = _piece_of(b, area, b[big], area[big]) & (class_id[:, None] == class_id[None, big])
    if confirmed:
        of &= ~_apart(b, big, confirmed)
    piece: npt.NDArray[np.bool_] = ~coarse & of.any(axis=1)
    return piece


def _piece_of(
    b: npt.NDArray[np.float64],
    area: npt.NDArray[np.float64],
    wholes: npt.NDArray[np.float64],
    whole_area: npt.NDArray[np.float64],
) -> npt.NDArray[np.bool_]:
    """Boxes ``b`` (of ``area``) x boxes ``wholes``: whether the first lies ``PIECE_INSIDE``
    inside the second, which is ``PIECE_AREA`` times larger, or ``SIDE_AREA`` times with
    three of the first's sides on its own (to ``SIDE_SHARE`` of its side): the top half of
    that person, or the left two thirds, however large (two people side by side, or one in
    front of the other, share one side at most)."""
    tl = np.maximum(b[:, None, :2], wholes[None, :, :2])
    br = np.minimum(b[:, None, 2:], wholes[None, :, 2:])
    inter = np.prod(np.clip(br - tl, 0, None), axis=2)
    inside = inter >= PIECE_INSIDE * np.maximum(area[:, None], 1e-9)
    larger = whole_area[None, :] >= PIECE_AREA * area[:, None]
    wh = np.tile(wholes[:, 2:] - wholes[:, :2], 2)  # (wholes, 4): w, h, w, h
    near = np.abs(b[:, None, :] - wholes[None, :, :]) <= SIDE_SHARE * wh[None]
    cut_short = (near.sum(axis=2) >= 3) & (whole_area[None, :] >= SIDE_AREA * area[:, None])
    out: npt.NDArray[np.bool_] = inside & (larger | cut_short)
    return out


def _holds(
    b: npt.NDArray[np.float64],
    area: npt.NDArray[np.float64],
    low: npt.NDArray[np.bool_],
    anchors: Anchors,
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per box: whether a tracked object's box overlaps it (IoU ``ANCHOR_IOU_LOW``), and
    whether such a box or a faint box (``Anchors.faint``) holds it. A big box of low
    score (``low``) is not held by a track it is a piece of (``_piece_of``): the legs or
    the top half of that person, which the track does not vouch for (the bus zoom's
    woman half out at the left edge, tracked whole: her legs' box, 0.26-0.35, held by her
    track, shrank it, and the next frame's smaller piece was held by that)."""
    tracked = _overlaps(b, anchors.boxes, ANCHOR_IOU_LOW)
    held = tracked
    rows = np.nonzero(low & tracked)[0]
    if len(rows):
        tb = np.asarray(anchors.boxes, np.float64).reshape(-1, 4)
        holds = iou_matrix(b[rows], tb) >= ANCHOR_IOU_LOW
        of = _piece_of(b[rows], area[rows], tb, np.prod(tb[:, 2:] - tb[:, :2], axis=1))
        held = tracked.copy()
        held[rows] = (holds & ~of).any(axis=1)
    if anchors.faint:
        held = held | _overlaps(b, anchors.faint, ANCHOR_IOU_LOW)
    return tracked, held


def _apart(
    b: npt.NDArray[np.float64],
    big: npt.NDArray[np.intp],
    confirmed: Sequence[tuple[float, float, float, float]],
) -> npt.NDArray[np.bool_]:
    """Boxes x the boxes ``big``: whether the first holds (IoU ``ANCHOR_IOU_LOW``) a track
    the coarse look ``confirmed`` that the second does not: two people, one in front of
    the other (a man standing behind one who leans across the frame lies 89-95 % inside
    that one's box), not a piece and its whole (a head, an arm, half of someone holds no
    confirmed track; the top two thirds of someone holds theirs, as their whole box does)."""
    holds = (iou_matrix(b, np.asarray(confirmed, np.float64)) >= ANCHOR_IOU_LOW).astype(np.int32)
    out: npt.NDArray[np.bool_] = holds @ (1 - holds[big]).T > 0
    return out


def _overlaps(
    b: npt.NDArray[np.float64],
    boxes: Sequence[tuple[float, float, float, float]],
    min_iou: float,
) -> npt.NDArray[np.bool_]:
    """Per box: whether one of ``boxes`` (tracked objects', doubted ones') overlaps it by
    ``min_iou`` (IoU) or more (0: shares any area with it)."""
    others = np.asarray(boxes, np.float64).reshape(-1, 4)
    if not len(others) or not len(b):
        return np.zeros(len(b), np.bool_)
    o = iou_matrix(b, others)
    out: npt.NDArray[np.bool_] = np.any(o >= min_iou if min_iou > 0 else o > 0, axis=1)
    return out


def _vetoed_since(
    b: npt.NDArray[np.float64],
    tall: npt.NDArray[np.bool_],
    tracked: npt.NDArray[np.bool_],
    anchors: Anchors,
) -> npt.NDArray[np.bool_]:
    """Per box, on a frame without a coarse look: a big box (``tall``) that the last
    coarse look's veto (``_unseen_by_coarse``) stands for until the next one, whatever it
    scores:
    - where a track that look doubted (and none ever saw plainly) is (IoU ``ANCHOR_IOU``,
      as the veto's: the track's box is predicted on): a post magnified into a "person",
      0.5-0.7 in a region (the next coarse look is due within ``sweep_s`` while it is in
      view);
    - not a tracked object's (``tracked``), where nothing moved since that look
      (``Anchors.moved``) and it found no big box, at any score (``Anchors.judged``;
      IoU ``ANCHOR_IOU``): the pixels it judged are there still (a crowd at a near man's
      back, which his region, the whole photo shrunk to a fifth, took for a person at
      0.46-0.53 on every recheck, and no coarse look ever found)."""
    out = tall & _overlaps(b, anchors.doubted, ANCHOR_IOU)
    if anchors.judged is not None:
        unseen = ~_overlaps(b, anchors.judged, ANCHOR_IOU) & ~_overlaps(b, anchors.moved, 0.0)
        out |= tall & ~tracked & unseen
    return out


def _unanchored(
    b: npt.NDArray[np.float64],
    low: npt.NDArray[np.bool_],
    coarse: npt.NDArray[np.bool_],
    held: npt.NDArray[np.bool_],
) -> npt.NDArray[np.bool_]:
    """Per box: a big box of low score (``low``: ``Anchors.big_px`` tall, under
    ``ANCHOR_SCORE``) that nothing holds: for a coarse box, no tracked object nor faint
    box of the last frame (``held``); for a region's box, none of those and no coarse box
    kept (IoU ``ANCHOR_IOU_LOW``). A whole-frame look's low-score big boxes are mostly
    shapes the model half takes for people, seen anew each look; a region's are pieces."""
    if not low.any():
        return low
    out = coarse & low & ~held
    kept = coarse & ~out
    held = held.copy()
    if kept.any():
        held |= (iou_matrix(b, b[kept]) >= ANCHOR_IOU_LOW).any(axis=1)
    out |= ~coarse & low & ~held
    return out


def _unseen_by_coarse(
    b: npt.NDArray[np.float64], tall: npt.NDArray[np.bool_], plain: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """Per box, on a frame with a coarse look: a big box (``tall``: ``Anchors.big_px``
    tall) that no coarse box found plainly (``plain``: the coarse look's boxes kept,
    scoring ``ANCHOR_SCORE``; none: it saw nothing plainly) overlaps (IoU
    ``ANCHOR_IOU``): a region's, or the coarse look's own of low score (a track's too).
    What is that big, the whole-frame look sees plainly; one it does not see so is a
    region's false find (a tripod, a post, magnified into a "person": a post at the
    close-up clip's bottom edge scored 0.6-0.7 in regions, 0.26-0.38 in the coarse look,
    its track holding the low box) or someone the whole-frame look half takes for a person
    (a man hidden behind a woman); the frame's track of it is doubted."""
    big = tall & ~plain
    if not big.any() or not plain.any():
        return big
    out: npt.NDArray[np.bool_] = big & ~(iou_matrix(b, b[plain]) >= ANCHOR_IOU).any(axis=1)
    return out


def _sparing_sides(
    b: npt.NDArray[np.float64],
    unseen: npt.NDArray[np.bool_],
    coarse: npt.NDArray[np.bool_],
    scored: npt.NDArray[np.bool_],
    width: float,
) -> npt.NDArray[np.bool_]:
    """``unseen`` (``_unseen_by_coarse``) less a region's box (not ``coarse``) scoring
    ``ANCHOR_SCORE`` (``scored``) of someone half out at a side of the frame (within
    ``EDGE_SHARE`` of its ``width``) on which the coarse look half saw a person (one of its
    boxes under that score, kept or not; IoU ``ANCHOR_IOU_LOW``). A whole-frame look
    scores half a person cut lengthwise low (a man cut by a doorbell's frame edge: the
    reference 0.51-0.56, his region 0.38-0.60, the coarse look 0.29; the close-up clip's
    540x960 framing lost 22 of his 40 frames so); the top of someone cut by the bottom
    edge it scores plainly, so a post there stays vetoed."""
    edge = max(2.0, EDGE_SHARE * width)
    spare = unseen & scored & ~coarse & ((b[:, 0] <= edge) | (b[:, 2] >= width - edge))
    half = coarse & ~scored
    if not (spare.any() and half.any()):
        return unseen
    rows = np.nonzero(spare)[0]
    out: npt.NDArray[np.bool_] = unseen.copy()
    out[rows] = ~(iou_matrix(b[rows], b[half]) >= ANCHOR_IOU_LOW).any(axis=1)
    return out


def faint_boxes(found: Sequence[Found], big_px: float) -> list[XyXy]:
    """The coarse look's boxes of ``found`` ``big_px`` tall or more scoring under
    ``ANCHOR_SCORE`` (``Looker.merge``)."""
    out: list[XyXy] = []
    for f in found:
        if f.coarse and len(f.dets):
            b, score = f.dets.xyxy, f.dets.score
            low = (score < ANCHOR_SCORE) & (b[:, 3] - b[:, 1] >= big_px)
            out += [(x1, y1, x2, y2) for x1, y1, x2, y2 in b[low].tolist()]
    return out


def held_found(held: Detections, image_wh: tuple[int, int], scales: Sequence[float] = ()) -> Found:
    """Still objects' last looks (``Look.held``) as one more look, at the whole frame: they
    merge with the frame's looks as a look's boxes do (NMS keeps one box of an object a
    region found again; a region's piece of a near person lies inside a held box, which
    holds it as any look's big box does: a head, an arm are dropped); ``scales``: how
    sharply each was seen (``Found.scales``)."""
    w, h = image_wh
    whole = np.tile(np.array([0.0, 0.0, w, h], np.float64), (len(held), 1))
    return Found(held, whole, 1, scales=np.asarray(scales, np.float64) if scales else None)


def sharpness(found: Sequence[Found], rows: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    """Per detection of ``merge_found`` of ``found`` (``rows``: its row among ``found``'s
    detections): the scale (model pixels per frame pixel) of the look that found it; 0
    where unknown (a look without scales, a box joined of two)."""
    if not len(rows):
        return np.zeros(0, np.float64)
    every = np.concatenate([np.zeros(len(f.dets)) if f.scales is None else f.scales for f in found])
    out: npt.NDArray[np.float64] = np.where(rows >= 0, every[rows], 0.0)
    return out


def take(dets: Detections, idx: npt.NDArray[np.intp]) -> Detections:
    return Detections(
        dets.xyxy[idx],
        dets.score[idx],
        dets.class_id[idx],
        tuple(dets.labels[i] for i in idx.tolist()),
        None if dets.keypoints is None else dets.keypoints[idx],
    )


def _select(dets: Detections, keep: npt.NDArray[np.bool_]) -> Detections:
    return dets if bool(keep.all()) else take(dets, np.nonzero(keep)[0])
