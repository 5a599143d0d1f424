"""Motion per camera: frame differencing against a slowly updated background.

Works on a downscaled luma frame (about ``height_px`` high, 100 by default), so it costs a
fraction of a millisecond. Robust to:

- sensor noise: the threshold follows the noise of the difference image (its median
  absolute deviation, averaged over frames and capped so a big change cannot raise it),
  never below ``min_threshold`` grey levels, and blobs smaller than ``min_area`` of the
  frame are ignored;
- lighting changes: the difference has its median removed first, so a global brightness
  change (a cloud, auto exposure) is no motion; a change of most of the frame at once
  (lights switched, camera moved) resets the background instead of reporting motion;
- masks: pixels under a mask never count (``set_masks``).

The background follows the scene at ``learn_rate`` per tenth of a second where nothing
moves, and not at all where something does: a walker leaves no trace in it (a background
that learnt walkers even slowly left ghost trails behind each of them, seconds of motion
where no one is). What differs from the background but has not changed from frame to
frame for ``settle_s`` is no motion, and is learnt: the ghost of someone who left (or
stood there when the camera started), a car that parks (the tracker keeps it as an
object, and re-checks it now and then). Where the detector saw someone within
``settle_s`` of the background's start (``unknown``: it began with them in it, after a
cut too), their place is learnt at once when it has stood still ``early_s`` after they
left: a camera's people at its start leave no ghost for seconds (each a look at nobody,
and, joined to the walker beside it, a blob that passes for someone big and calls the
coarse look). So does anyone who stood still long enough to be learnt and then walked
off (``left``: the looker hands in the still tracks that are off their place or ended),
for ``settle_s`` after.

Both run on the frames' capture times, not on their count: a camera processed at 2 or
5 frames a second (its ``fps``, or a box with more cameras than it can take) learns and
settles as one at 10 does. Without times, frames are a tenth of a second apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.cv import cv2
from agent.frames import HAIR_S

XyXy = tuple[float, float, float, float]

#: ``learn_rate`` is per this many seconds (a frame at 10 fps), and a frame without a
#: time comes this long after the one before it.
LEARN_STEP_S = 0.1
#: A gap longer than this (a stall, a paused camera) learns no more than this much time.
LEARN_GAP_MAX_S = 1.0


@dataclass(frozen=True, slots=True)
class MotionParams:
    height_px: int = 100
    min_threshold: float = 12.0
    noise_factor: float = 4.0
    min_area: float = 0.0005  # share of the frame a blob must cover
    learn_rate: float = 0.1  # share of a still pixel's difference learnt per LEARN_STEP_S
    reset_share: float = 0.6  # a change of this much of the frame resets the background
    settle_s: float = 3.0  # unchanged this long: no motion, learnt
    # Where someone stood when the background (re)started (``unknown``), what is there
    # now is the scene once unchanged this long: their place behind them is learnt at
    # once, not left as motion for ``settle_s``; for ``unknown_s`` after the start (and
    # for ``settle_s`` after a still object left its place, ``left``).
    early_s: float = 0.5
    unknown_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Motion:
    """Moving areas of one frame in source-image pixels (xyxy), and their share of it.

    ``mask``: the moving pixels of the downscaled frame, each ``cell`` source pixels wide
    and tall; ``min_px``: the fewest of them a moving area has (``outside``).
    """

    boxes: tuple[XyXy, ...]
    share: float
    reset: bool = False
    mask: npt.NDArray[np.uint8] | None = field(default=None, compare=False, repr=False)
    cell: tuple[float, float] = (1.0, 1.0)
    min_px: float = 0.0

    @property
    def any(self) -> bool:
        return bool(self.boxes)

    def outside(self, area: XyXy, rects: Sequence[XyXy]) -> tuple[XyXy, ...]:
        """The moving parts of ``area`` (source pixels) that lie outside every one of
        ``rects``: boxes of what moves there besides what ``rects`` hold (``(area,)``
        without a mask)."""
        if self.mask is None:
            return (area,)
        sx, sy = self.cell
        x1, y1 = max(0, int(area[0] / sx)), max(0, int(area[1] / sy))
        sub = self.mask[y1 : math.ceil(area[3] / sy), x1 : math.ceil(area[2] / sx)].copy()
        for r in rects:
            # Only the cells wholly inside a rectangle: what pokes out of it still moves.
            a, b = max(0, math.ceil(r[0] / sx) - x1), max(0, math.ceil(r[1] / sy) - y1)
            c, d = math.floor(r[2] / sx) - x1, math.floor(r[3] / sy) - y1
            if c > a and d > b:
                sub[b:d, a:c] = 0
        return _boxes(sub, (x1, y1), self.cell, self.min_px)


def _median(a: npt.NDArray[np.float32]) -> float:
    """The median of every 7th value of ``a`` (the upper one of an even count)."""
    sample = a.ravel()[::7]
    k = len(sample) // 2
    return float(np.partition(sample, k)[k])


def _boxes(
    moving: npt.NDArray[np.uint8],
    offset: tuple[int, int],
    cell: tuple[float, float],
    min_px: float,
) -> tuple[XyXy, ...]:
    """Boxes (source pixels) of the connected moving areas of ``moving`` (a part of the
    downscaled frame from ``offset``) of at least ``min_px`` pixels."""
    n, _, stats, _ = cv2.connectedComponentsWithStats(moving, connectivity=8)
    (ox, oy), (sx, sy) = offset, cell
    out = []
    for x, y, bw, bh, area in stats[1:n].tolist():
        if area >= min_px:
            out.append(((x + ox) * sx, (y + oy) * sy, (x + ox + bw) * sx, (y + oy + bh) * sy))
    return tuple(out)


class MotionDetector:
    """Motion of one camera, fed its frames in order."""

    def __init__(self, params: MotionParams | None = None) -> None:
        self.params = params or MotionParams()
        self._bg: npt.NDArray[np.float32] | None = None
        self._noise: float | None = None
        self._prev: npt.NDArray[np.float32] | None = None  # the previous frame, downscaled
        self._prev_mean = 0.0  # its mean grey level
        #: when each pixel last changed from one frame to the next (capture time, s)
        self._changed_t: npt.NDArray[np.float64] | None = None
        self._t: float | None = None  # the last frame's capture time
        self._t0 = 0.0  # when the background (re)started
        #: Per pixel, until when what stands still there ``early_s`` is the scene, learnt
        #: at once (``unknown``, ``left``); None: nowhere. ``_early_end``: the latest of them.
        self._early_until: npt.NDArray[np.float64] | None = None
        self._early_end = -math.inf
        self._size_wh: tuple[int, int] | None = None
        self._image_wh: tuple[int, int] | None = None
        self._mask_polys: list[list[tuple[float, float]]] = []
        self._keep: npt.NDArray[np.uint8] | None = None  # 1 where motion may count
        self._kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (3, 3))

    def set_masks(self, masks: Sequence[Sequence[tuple[float, float]]]) -> None:
        """Polygons in fractions of the image (0..1) where motion never counts."""
        self._mask_polys = [list(m) for m in masks]
        self._keep = None

    def _small(self, image: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
        h, w = image.shape[:2]
        # An integer factor: OpenCV's area resize has a fast path for it (about 10x faster
        # than a fractional one here); the few rows and columns past a multiple are cut.
        k = max(1, round(h / self.params.height_px))
        size_wh = (max(1, w // k), max(1, h // k))
        if self._image_wh != (w, h):
            self._image_wh, self._size_wh = (w, h), size_wh
            self._bg = None
            self._keep = None
        # Luma first, then the area resize of one channel instead of three: a third of the
        # work (vtest.avi: 0.25 ms instead of 0.75 ms with three channels, every other pixel).
        gray = cv2.cvtColor(image[: size_wh[1] * k, : size_wh[0] * k], cv2.COLOR_BGR2GRAY)
        small = cv2.resize(gray, size_wh, interpolation=cv2.INTER_AREA)
        # A light blur takes the edge off single-pixel sensor noise.
        blurred: npt.NDArray[np.float32] = cv2.GaussianBlur(small, (3, 3), 0).astype(np.float32)
        return blurred

    def blind(self, box: XyXy) -> bool:
        """Whether a motion mask covers any of ``box`` (source pixels): a change there is
        never seen (False before the first frame)."""
        if not self._mask_polys or self._image_wh is None or self._size_wh is None:
            return False
        part = self._keep_mask()[self._cells(box, self._image_wh, self._size_wh)]
        return bool(part.size) and not bool(part.all())

    @staticmethod
    def _cells(
        box: XyXy, image_wh: tuple[int, int], size_wh: tuple[int, int]
    ) -> tuple[slice, slice]:
        """The downscaled frame's cells (rows, columns) that ``box`` (source pixels) touches."""
        (iw, ih), (w, h) = image_wh, size_wh
        x1, y1 = max(0, int(box[0] * w / iw)), max(0, int(box[1] * h / ih))
        x2, y2 = min(w, math.ceil(box[2] * w / iw)), min(h, math.ceil(box[3] * h / ih))
        return slice(y1, y2), slice(x1, x2)

    def _keep_mask(self) -> npt.NDArray[np.uint8]:
        if self._keep is None:
            w, h = self._size_wh or (1, 1)
            keep = np.ones((h, w), np.uint8)
            for poly in self._mask_polys:
                pts = np.round(np.array(poly, np.float64) * [w, h]).astype(np.int32)
                cv2.fillPoly(keep, [pts], 0)
            self._keep = keep
        return self._keep

    def _restart(self, gray: npt.NDArray[np.float32], mean: float) -> None:
        """The background starts again from ``gray`` (the first frame, a reset)."""
        self._bg, self._prev, self._prev_mean = gray.copy(), gray, mean
        self._changed_t = np.full(gray.shape, self._t or 0.0, np.float64)
        self._t0, self._early_until, self._early_end = self._t or 0.0, None, -math.inf

    def unknown(self, xyxy: npt.NDArray[np.float32], t: float) -> None:
        """Objects (boxes in source pixels, one a row) seen in the frame at ``t``: if that
        is within ``settle_s`` of the background's start, it does not know what lies
        behind them (it began with them in it), and until ``unknown_s`` after the start
        what is there once they left is the scene after ``early_s`` unchanged, not
        ``settle_s``. Later, a comparison and nothing else (every frame hands its own)."""
        p = self.params
        if 0.0 <= t - self._t0 <= p.settle_s + HAIR_S:
            self._early(xyxy, self._t0 + p.unknown_s)

    def left(self, xyxy: npt.NDArray[np.float32], t: float) -> None:
        """Objects that stood still (boxes in source pixels, one a row; the looker hands in
        its still tracks once they are off their place or ended) left it at ``t``: the background
        had learnt them there, so what stands there ``early_s`` within ``settle_s`` after
        is the scene, learnt at once, not their ghost, motion for ``settle_s`` (a look at
        nobody each frame, and the camera's motion topic ON after they went)."""
        self._early(xyxy, t + self.params.settle_s)

    def _early(self, xyxy: npt.NDArray[np.float32], until: float) -> None:
        """Until ``until``, the places of ``xyxy`` settle after ``early_s``."""
        if not len(xyxy) or self._image_wh is None or self._size_wh is None:
            return
        image_wh, size_wh = self._image_wh, self._size_wh
        if self._early_until is None:
            self._early_until = np.full((size_wh[1], size_wh[0]), -math.inf, np.float64)
        for x1, y1, x2, y2 in xyxy.tolist():
            cells = self._early_until[self._cells((x1, y1, x2, y2), image_wh, size_wh)]
            np.maximum(cells, until, out=cells)
        self._early_end = max(self._early_end, until)

    def update(self, image: npt.NDArray[np.uint8], t: float | None = None) -> Motion:
        """The motion in ``image`` (captured at ``t`` seconds, any clock that only goes
        forward; None: a tenth of a second after the last) against the background; then
        the background learns it."""
        p = self.params
        gray = self._small(image)
        now = cv2.mean(gray)[0]
        last = self._t
        if t is None:
            t = LEARN_STEP_S if last is None else last + LEARN_STEP_S
        dt = LEARN_STEP_S if last is None else min(max(t - last, 0.0), LEARN_GAP_MAX_S)
        self._t = t
        if self._bg is None or self._prev is None or self._changed_t is None:
            self._restart(gray, now)
            return Motion((), 0.0)
        # A global lighting change (gain and offset: exposure, a cloud) is no motion.
        # (OpenCV's calls here: numpy's cost about as much again on a frame this small.)
        gain = float(np.clip(now / max(1.0, cv2.mean(self._bg)[0]), 0.5, 2.0))
        diff = cv2.addWeighted(gray, 1.0, self._bg, -gain, 0.0)
        # Medians of every 7th pixel: as good an estimate, a fraction of the cost.
        absd = cv2.absdiff(diff, _median(diff))
        # Sensor noise, followed slowly (a big change of the scene must not raise it).
        mad = min(1.4826 * _median(absd), p.min_threshold / 2)
        self._noise = mad if self._noise is None else 0.9 * self._noise + 0.1 * mad
        threshold = max(p.min_threshold, p.noise_factor * self._noise)
        # Saturated pixels change with exposure in ways a gain does not model: never motion.
        # (Each small pixel averages many source pixels: keep a margin around saturation.)
        lit = ((gray < 240) & (self._bg < 240 / gain)).view(np.uint8)
        lit = cv2.erode(lit, self._kernel, iterations=2)
        keep = self._keep_mask()
        differs = (absd > threshold).view(np.uint8) & lit & keep
        share = cv2.countNonZero(differs) / differs.size
        # Frame to frame (the same lighting compensation): what changed since the last frame
        # starts its count of still frames again.
        step_gain = float(np.clip(now / max(1.0, self._prev_mean), 0.5, 2.0))
        step = cv2.addWeighted(gray, 1.0, self._prev, -step_gain, 0.0)
        changed = cv2.absdiff(step, _median(step)) > threshold
        # A cut is most of the frame changing from one frame to the next, as the objects
        # stage's ``SceneWatch`` has it, or from the background: a new view can differ
        # from the old background over less than ``reset_share`` where it is saturated
        # (``lit`` leaves those pixels out: the close-up clip's cut from bus.jpg's white
        # bus to a grey road, 0.50, never reset, and the new view was "motion" for
        # ``settle_s``: a near person's region over all of it, a kerb magnified into a
        # "person").
        # (Masked pixels never count; with no mask, no array is made for that each frame.)
        moved = changed.view(np.uint8)
        cut = max(share, cv2.countNonZero(moved & keep if self._mask_polys else moved) / moved.size)
        if cut > p.reset_share:
            self._restart(gray, now)
            return Motion((), cut, reset=True)
        self._prev, self._prev_mean = gray, now
        self._changed_t[changed] = t
        # What differs from the background but has stood still a while is no motion.
        # (A hair under ``settle_s`` is that long, on any clock's numbers: ``HAIR_S``. One
        # comparison with a scalar: no array of ages is made each frame.)
        moving = differs & (self._changed_t > t - (p.settle_s - HAIR_S)).view(np.uint8)
        if self._early_until is not None:
            if t > self._early_end + HAIR_S:
                self._early_until = None
            else:
                # The background there was someone: what stands still there now is the
                # scene, learnt whole at once (no learning over seconds, no motion). (A
                # hair under ``early_s`` is that long, as above: on any clock's numbers.)
                early_t = t - (p.early_s - HAIR_S)
                early = self._changed_t <= early_t
                early &= self._early_until >= t - HAIR_S
                early &= differs.view(np.bool_)
                np.copyto(self._bg, gray, where=early)
                np.copyto(moving, 0, where=early)
        # Opening drops specks of one or two pixels; dilation joins an object's parts.
        moving = cv2.dilate(cv2.erode(moving, self._kernel), self._kernel, iterations=2)
        # The background learns where nothing moves (settled pixels included), only there.
        rate = 1.0 - (1.0 - p.learn_rate) ** (dt / LEARN_STEP_S)
        cv2.accumulateWeighted(gray, self._bg, rate, mask=moving ^ 1)
        w, h = self._size_wh or (1, 1)
        iw, ih = self._image_wh or (1, 1)
        cell, min_px = (iw / w, ih / h), p.min_area * w * h
        boxes = _boxes(moving, (0, 0), cell, min_px)
        return Motion(boxes, share, mask=moving, cell=cell, min_px=min_px)
