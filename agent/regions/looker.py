"""One camera's eyes: motion, then the plan of where the detector looks this frame."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.detect.detector import Detector, Thresholds
from agent.detect.nms import iou_matrix
from agent.regions.merge import (
    Anchors,
    Found,
    concat,
    faint_boxes,
    held_found,
    merge_found,
    sharpness,
    take,
)
from agent.regions.motion import Motion, MotionDetector, MotionParams
from agent.regions.pack import Sheet, detect_sheet, pack_fewest, whole_sheet
from agent.regions.planner import Plan, PlannerParams, RegionPlanner, TrackHint, XyXy, overlaps
from agent.settings import AgentSettings, CameraSettings

#: ``Looker.behind``: the weight of the newest gap between frame numbers, and the most one
#: gap counts for (a camera looked at every 10th frame: a sweep every 10 ``sweep_s``).
GAP_WEIGHT, MAX_GAP = 0.2, 10

#: After a scene cut, at most this many frames more are planned as cut frames (a coarse
#: look, no track) while the objects stage has not handed back the cut frame's tracks:
#: the frames that can be in flight behind it (one an inference worker); with objects
#: off, which hands nothing back, the cost of a cut.
AFTER_CUT = 4

#: A still track stands in for its own look (``TrackHint.steady``) once found this many
#: times, the last look finding it at this score or more (a plain find).
HOLD_HITS, HOLD_SCORE = 5, 0.5

#: ``Looker.merge`` keeps the coarse looks' faint boxes of at most this many frames not yet
#: handed back (a few in flight; with objects off, none is ever handed back).
FAINT_FRAMES = 4

#: What moved since the last coarse look is kept as at most this many boxes; past that,
#: the look's verdict is stale everywhere (``Anchors.judged``).
MOVED_BOXES = 64

#: A still track's stand-in stays the detection of a look that saw it at this many times
#: the model pixels of a later look that found it (a coarse look's against a near person's
#: region, shrunk to 120 px) where the two boxes overlap this much (IoU): the sharper box.
SHARPER_SCALE, SHARPER_IOU = 1.5, 0.7


@dataclass(frozen=True, slots=True)
class Look:
    """Where to run the detector on one frame (``plan.regions``; () = nowhere), and why;
    ``sheets``: those regions packed into model inputs (one model run each); ``coarse``:
    the coarse look's sheet (the whole frame, for the whole-frame model), or None;
    ``held``: the last looks' detections of the still tracks not looked at (``Plan.held``),
    which stand in for them this frame (``held_found``), or None."""

    plan: Plan
    motion: Motion
    sheets: tuple[Sheet, ...] = ()
    coarse: Sheet | None = None
    anchors: Anchors | None = None  # what a region's big box must overlap (merge_found)
    held: Detections | None = None
    t: float | None = None  # the frame's time
    held_scales: tuple[float, ...] = ()  # per ``held`` row: how sharply it was seen

    @property
    def regions(self) -> tuple[XyXy, ...]:
        """Where inference runs: the plan's regions, and the whole frame for a coarse look."""
        if self.coarse is None:
            return self.plan.regions
        x1, y1, x2, y2 = self.coarse.placements[0].region
        return (*self.plan.regions, (float(x1), float(y1), float(x2), float(y2)))


class TrackLike(Protocol):
    """What the planner reads of a tracked object (``agent.objects.tracker.Track``)."""

    @property
    def track_id(self) -> int: ...
    @property
    def xyxy(self) -> tuple[float, float, float, float]: ...
    @property
    def moving(self) -> bool: ...
    @property
    def last_seen_t(self) -> float: ...
    @property
    def seen(self) -> bool: ...
    @property
    def hits(self) -> int: ...
    @property
    def velocity(self) -> tuple[float, float]: ...


class Looker:
    """Motion and region planning of one camera, fed its frames in order.

    The objects stage hands in its tracks after each frame (``follow``, any thread);
    planning reads the latest it has, a frame or two behind, which the regions' context
    margin absorbs. Not across a scene cut: a frame whose motion resets (``Motion.reset``)
    ends what the looker knows of the scene before it, and ``follow`` of a frame before
    that one is ignored, so no old person's last look stands in on the new scene (the
    close-up clip live: a walker's box published on the next scene's frames, and the
    pieces of its people that regions at the old places found).
    """

    def __init__(
        self,
        motion: MotionParams | None = None,
        planner: PlannerParams | None = None,
        masks: Sequence[Sequence[tuple[float, float]]] = (),
    ) -> None:
        self.motion = MotionDetector(motion)
        self.motion.set_masks(masks)
        self.planner = RegionPlanner(planner)
        self._tracks: tuple[tuple[int, TrackHint], ...] = ()
        # Per track id, what the coarse look made of it: True, seen while ``plain`` tall
        # (``TrackHint.confirmed``); False, missed (``TrackHint.doubted``).
        self._coarse_saw: dict[int, bool] = {}
        # The track ids a coarse look has ever seen plainly (a doubt of one of those is a
        # miss of a real object, which its regions may still find: see ``look``).
        self._ever_saw: frozenset[int] = frozenset()
        # Per track id, its last look's detection while that found it plainly (``follow``):
        # the frame's detections, its row there (taken out only when it stands in), and the
        # scale it was seen at (a still track's: its sharpest look's, see ``_sharpest``).
        self._rows: dict[int, tuple[Detections, int, float]] = {}
        # Per track id, its box while it stands still (steady, not moving): where it goes
        # from, motion's background had it in it (``MotionDetector.left``).
        self._still: dict[int, XyXy] = {}
        self._image_h = 1
        self._last_id: int | None = None
        self.behind = 1.0  # frames the camera gave per frame looked at, lately (``look``)
        self._cut_t = -math.inf  # the time of the last frame whose motion reset
        self._cut_looks = 0  # frames after it still planned as cut frames (see ``look``)
        # Per frame time, what ``merge`` made of it, until ``follow`` hands that frame back
        # (at most ``FAINT_FRAMES`` frames): the coarse look's big boxes under ANCHOR_SCORE
        # (seeds, as the published ones no track took), and per detection merged the scale
        # it was seen at (None: none).
        self._merged: dict[float, tuple[list[XyXy], npt.NDArray[np.float64] | None]] = {}
        # The last coarse look's frame's big boxes (``merge``; None: none since the last
        # cut) and what moved since (``look``): ``Anchors.judged``, ``Anchors.moved``.
        self._judged: tuple[XyXy, ...] | None = None
        # The coarse look's big boxes under ANCHOR_SCORE of the frame last handed back
        # (``follow``; none: that frame had no coarse look): ``Anchors.faint``.
        self._faint: tuple[XyXy, ...] = ()
        self._moved: list[XyXy] = []
        self._lock = threading.Lock()

    def follow(
        self,
        tracks: Sequence[TrackLike],
        coarse: bool = False,
        found: tuple[Detections | None, Sequence[int | None]] | None = None,
        t_frame: float | None = None,
        merged_rows: npt.NDArray[np.intp] | None = None,
    ) -> None:
        """The objects stage's live tracks after a frame (regions go where they are).
        ``coarse``: that frame had a coarse look: a big track it did not see is doubted
        (no region of its own, and it holds no low-score box in merge) until a coarse
        look sees it again; one it saw is confirmed (``TrackHint.confirmed``: standing or
        walking, it no longer calls the coarse look every ``sweep_s``) until a coarse look
        misses it. ``found``: that frame's detections and, per detection, its track (or
        None/-1): a track found plainly (``HOLD_SCORE``) keeps that detection, which may
        stand in for it while it stands still where nothing moves (``TrackHint.steady``,
        ``Plan.held``); found less plainly, it keeps none. The detections no track took
        (a score too low to start one) are seeds, and so are that frame's coarse look's big
        boxes under ``ANCHOR_SCORE`` (``merge``): the big ones are looked at again next
        frame, as the whole-frame look would, and the coarse look's hold a low-score box
        there (``Anchors.faint``; a region's is at best part of someone, and as a hold it
        drifts: legs held a smaller piece next frame). ``t_frame``: that frame's time; the tracks
        of a frame before the last scene cut ``look`` saw are ignored. ``merged_rows``:
        per detection of ``found``, its row among what ``merge`` made of that frame (the
        objects stage drops masked ones; None: every one, in order)."""
        seeds, kept, faint = _sorted(found)
        dets = None if found is None else found[0]
        with self._lock:
            sharp = None
            faint_seeds: list[XyXy] = []
            if self._merged and t_frame is not None:
                faint_seeds, sharp = self._merged.pop(t_frame, ([], None))
                seeds += faint_seeds
                self._merged = {t: v for t, v in self._merged.items() if t > t_frame}
            if t_frame is not None and t_frame < self._cut_t:
                return  # the scene before a cut: the next follow brings the new one's
            self._faint = tuple(faint_seeds)
            self._cut_looks = 0
            if t_frame is not None and dets is not None:
                # What the first looks found: motion's background began with them in it.
                self.motion.unknown(dets.xyxy, t_frame)
            rows = self._rows
            if kept:
                kept = _sharpest(kept, _seen_at(sharp, merged_rows), rows, tracks)
            if kept or faint:
                rows = {tid: row for tid, row in rows.items() if tid not in faint} | kept
            saw = self._coarse_saw
            if coarse:
                # A confirmation stands until a coarse look misses the track; a doubt only
                # until the next coarse look (which sees it again or doubts it anew).
                plain = self.planner.params.plain * self._image_h
                big = {t.track_id: t.seen for t in tracks if t.xyxy[3] - t.xyxy[1] >= plain}
                saw = {tid: True for tid, ok in saw.items() if ok} | big
                if any(big.values()):
                    self._ever_saw |= {tid for tid, ok in big.items() if ok}
            live = {t.track_id for t in tracks}
            if not saw.keys() <= live:  # a track ended: forget what the coarse look made of it
                saw = {tid: ok for tid, ok in saw.items() if tid in live}
            if not self._ever_saw <= live:
                self._ever_saw &= live
            self._coarse_saw = saw
            if not rows.keys() <= live:
                rows = {tid: row for tid, row in rows.items() if tid in live}
            self._rows = rows
            # Found plainly, often: it may stand in; but motion sees no change in a masked
            # part, so nothing there may.
            steady = {
                t.track_id
                for t in tracks
                if t.track_id in rows
                and t.seen
                and t.hits >= HOLD_HITS
                and not self.motion.blind(t.xyxy)
            }
            self._left(tracks, steady, t_frame)  # the places still tracks walked off
            hints = [
                (
                    t.track_id,
                    TrackHint(
                        t.xyxy,
                        t.moving,
                        t.last_seen_t,
                        t.seen,
                        doubted=saw.get(t.track_id) is False,
                        confirmed=saw.get(t.track_id) is True,
                        steady=t.track_id in steady,
                        velocity=t.velocity,
                    ),
                )
                for t in tracks
            ]
            hints += [
                (-1 - i, TrackHint(box, False, -math.inf, seen=i < len(seeds)))
                for i, box in enumerate([*seeds, *self._dropped(live)])
            ]
            # Under the lock that checked t_frame: a cut's look cannot come in between.
            self._tracks = tuple(hints)

    def _dropped(self, live: set[int]) -> list[XyXy]:
        """The big tracks the last frame's look found (not doubted) that this frame's look
        dropped (a track of one look missed by the next is no track): someone near whom a
        coarse look found plainly and the next look, their near region shrunk far more,
        did not (with a 480 px coarse look, a crouching player 455 px tall, shrunk to 120,
        on a still photo: no motion called a look there again for 4 s). Each becomes a
        seed not seen: looked at again, and it calls a coarse look (``RegionPlanner``'s
        miss), once. Under ``_lock``."""
        big = self.planner.params.big * self._image_h
        return [
            h.xyxy
            for tid, h in self._tracks
            if tid >= 0 and tid not in live and h.seen and not h.doubted
            and h.xyxy[3] - h.xyxy[1] >= big
        ]  # fmt: skip

    def _left(self, tracks: Sequence[TrackLike], steady: set[int], t: float | None) -> None:
        """Tells motion where still tracks stood once they are off that place (their box
        clear of it) or ended: their ghost there (``MotionDetector.left``); then keeps the
        boxes of the tracks standing still now (steady, not moving). Not sooner: a walker
        still on the place is partly there (learnt at once, their motion would be lost),
        and a look that missed a still track is no leaving. Under ``_lock``."""
        kept: dict[int, XyXy] = {}
        if self._still:
            now = {tr.track_id: tr.xyxy for tr in tracks}
            gone = []
            for tid, box in self._still.items():
                if tid in now and overlaps(now[tid], box):
                    kept[tid] = box
                else:
                    gone.append(box)
            if gone and t is not None:
                self.motion.left(np.array(gone, np.float32), t)
        still = {tr.track_id: tr.xyxy for tr in tracks if tr.track_id in steady and not tr.moving}
        self._still = kept | still

    def set_masks(self, masks: Sequence[Sequence[tuple[float, float]]]) -> None:
        with self._lock:
            self.motion.set_masks(masks)

    def forget_held(self) -> None:
        """No last look stands in any more (a new model, new thresholds: the next look of
        each still track is its own)."""
        with self._lock:
            self._rows = {}

    def look(
        self,
        image: npt.NDArray[np.uint8],
        t: float,
        input_hw: tuple[int, int],
        stride: int | None = None,
        coarse: tuple[tuple[int, int], int | None] | None = None,
        frame_id: int | None = None,
    ) -> Look:
        """Motion of ``image``, where to look, and the model inputs (sheets) to run there;
        ``input_hw``: the model's input height and width; ``stride``: the model takes
        smaller sheets whose sides are multiples of it (None: ``input_hw`` only);
        ``coarse``: the whole-frame model's (input_hw, stride), if it is another model;
        ``frame_id``: the camera's number of the frame (gaps: frames the box had no time
        for, which make the planner's sweep and quiet coarse look slower, ``behind``)."""
        with self._lock:
            motion = self.motion.update(image, t)
            tracks = self._tracks
            ever_saw = self._ever_saw
            rows = self._rows
            behind = self._count(frame_id)
            cut = motion.reset or self._cut_looks > 0
            if motion.reset:
                # This frame is planned as before (the cut rule: nothing stands in, a
                # coarse look); the frames after it that are planned before the objects
                # stage hands its tracks back (``AFTER_CUT`` at most) know no track of the
                # old scene (see the class), and get a coarse look too: else, knowing
                # nothing, they would publish nobody.
                self._tracks, self._rows, self._coarse_saw, self._still = (), {}, {}, {}
                self._ever_saw = frozenset()
                self._judged, self._moved, self._faint = None, [], ()
                self._cut_t = t
                self._cut_looks = AFTER_CUT
            elif cut:
                self._cut_looks -= 1
        wh = (int(image.shape[1]), int(image.shape[0]))
        self._image_h = wh[1]
        plan = self.planner.plan(
            t, wh, motion.boxes, tracks, min(input_hw), motion.outside, cut, behind
        )
        sheets = (
            pack_fewest(plan.regions, plan.scales, input_hw, wh, stride=stride)
            if plan.regions
            else []
        )
        whole = None
        if plan.coarse:
            whole = whole_sheet(wh, *(coarse or (input_hw, stride)), near=plan.near)
        anchors = self._anchors(tracks, ever_saw, self.planner.params.plain * wh[1], plan, motion)
        held = None
        scales: tuple[float, ...] = ()
        if plan.held:
            hints = dict(tracks)
            got = [(rows[tid], hints[tid]) for tid in plan.held if tid in rows]
            held = concat([_moved(d, i, h, t) for (d, i, _), h in got]) if got else None
            scales = tuple(s for (_, _, s), _ in got)
        return Look(plan, motion, tuple(sheets), whole, anchors, held, t, scales)

    def _anchors(
        self,
        tracks: Sequence[tuple[int, TrackHint]],
        ever_saw: frozenset[int],
        big_px: float,
        plan: Plan,
        motion: Motion,
    ) -> Anchors:
        """What a region's big box must overlap on the frame of ``plan`` (``merge_found``):
        ``big_px``: boxes this tall are big. A doubted track vouches for nothing; one no
        coarse look ever saw plainly (a post magnified into a "person") loses its place's
        big boxes until the next coarse look, and one it saw before (a walker it missed
        once, half hidden) keeps them. What moved since the last coarse look is gathered
        here (``motion``; a coarse look's frame starts anew)."""
        tracked: list[XyXy] = []
        doubted: list[XyXy] = []
        confirmed: list[XyXy] = []
        for tid, h in tracks:
            if tid < 0:
                continue  # a seed: looked at again (``RegionPlanner``), vouches for nothing
            if not h.doubted:
                tracked.append(h.xyxy)
                if h.confirmed:
                    confirmed.append(h.xyxy)
            elif tid not in ever_saw:
                doubted.append(h.xyxy)
        with self._lock:
            judged = None
            if plan.coarse:
                self._moved = []  # this frame's look sees what moved before it
            elif self._judged is not None:
                self._moved += motion.boxes
                if len(self._moved) > MOVED_BOXES:
                    self._judged, self._moved = None, []
                judged = self._judged
            moved, faint = tuple(self._moved), self._faint
        return Anchors(tuple(tracked), big_px, tuple(doubted), faint,
                       tuple(confirmed), judged, moved)  # fmt: skip

    def merge(
        self, look: Look, found: list[Found], image_wh: tuple[int, int], thresholds: Thresholds
    ) -> Detections:
        """One frame's detections: its looks' finds (``found``) and the stand-ins of the
        tracks it did not look at (``Look.held``, one more look), merged. Keeps its coarse
        look's big boxes under ``ANCHOR_SCORE`` (which merge drops where no track holds
        them) until ``follow`` hands the frame back: they are seeds, as the published ones
        no track took, and hold a big box of low score in their place next frame
        (``Anchors.faint``); and the scale each detection was seen at (``_sharpest``)."""
        faint = []
        if look.t is not None and look.anchors is not None:
            faint = faint_boxes(found, look.anchors.big_px)
        if look.held is not None:
            found = [*found, held_found(look.held, image_wh, look.held_scales)]
        th = thresholds
        dets, rows = merge_found(found, image_wh, iou_threshold=th.iou, max_det=th.max_det,
                                 anchors=look.anchors)  # fmt: skip
        if look.coarse is not None and look.anchors is not None:
            judged = _big_boxes([dets, *(f.dets for f in found if f.coarse)], look.anchors.big_px)
            with self._lock:
                if look.t is None or look.t >= self._cut_t:
                    self._judged = judged
        if look.t is not None and (faint or len(dets)):
            sharp = sharpness(found, rows) if len(dets) else None
            with self._lock:
                if look.t >= self._cut_t:
                    self._merged[look.t] = (faint, sharp)
                    while len(self._merged) > FAINT_FRAMES:
                        del self._merged[min(self._merged)]
        return dets

    def _count(self, frame_id: int | None) -> float:
        """``behind`` after the frame numbered ``frame_id`` (under ``_lock``, returned so
        the frame is planned with its own value): a moving average of the gaps between the
        numbers of the frames looked at (each at most ``MAX_GAP``, so a pause or a stall is
        not a lasting slowdown; a number lower than the last, a new reader, is a gap of 1)."""
        if frame_id is None:
            return self.behind
        last, self._last_id = self._last_id, frame_id
        if last is not None:
            gap = min(MAX_GAP, max(1, frame_id - last))
            self.behind = (1 - GAP_WEIGHT) * self.behind + GAP_WEIGHT * gap
        return self.behind


def _big_boxes(parts: Sequence[Detections], big_px: float) -> tuple[XyXy, ...]:
    """The boxes ``big_px`` tall or more of ``parts``."""
    return tuple(
        (x1, y1, x2, y2) for d in parts for x1, y1, x2, y2 in d.xyxy.tolist() if y2 - y1 >= big_px
    )


def _seen_at(
    scales: npt.NDArray[np.float64] | None, rows: npt.NDArray[np.intp] | None
) -> npt.NDArray[np.float64] | None:
    """Per detection a frame's objects stage handed back: the scale it was seen at, from
    ``scales`` (per detection ``Looker.merge`` published that frame; None: no merge of
    that frame, its still tracks' stand-ins alone) by ``rows`` (its row there; None: the
    same rows)."""
    return scales if scales is None or rows is None else scales[rows]


def _sharpest(
    kept: dict[int, tuple[Detections, int, float]],
    seen: npt.NDArray[np.float64] | None,
    rows: dict[int, tuple[Detections, int, float]],
    tracks: Sequence[TrackLike],
) -> dict[int, tuple[Detections, int, float]]:
    """``kept`` (a frame's plain finds per track, ``_sorted``) with the scale each was seen
    at (``seen``: per detection of that frame, ``_seen_at``; None: unknown), and a still
    track's last row instead where that look saw it ``SHARPER_SCALE`` times as sharply and
    the boxes agree (``SHARPER_IOU``): a person standing at the door stands in with the
    coarse look's box of them, not the near region's looser one (the close-up clip's still
    people: IoU 0.99 with the reference's box against 0.74)."""
    still = {t.track_id for t in tracks if not t.moving}
    out = {}
    for tid, (d, i, _) in kept.items():
        s = 0.0 if seen is None else float(seen[i])
        old = rows.get(tid)
        if (
            old is not None
            and tid in still
            and old[2] >= SHARPER_SCALE * s
            and old[2] > 0
            and iou_matrix(old[0].xyxy[old[1] : old[1] + 1], d.xyxy[i : i + 1])[0, 0] >= SHARPER_IOU
        ):
            out[tid] = old
        else:
            out[tid] = (d, i, s)
    return out


def _sorted(
    found: tuple[Detections | None, Sequence[int | None]] | None,
) -> tuple[list[XyXy], dict[int, tuple[Detections, int, float]], list[int]]:
    """One pass over a frame's detections and their tracks (``Looker.follow``): the seeds
    (no track took them), the tracks found plainly (each keeps its detection) and those
    found less plainly (none)."""
    seeds: list[XyXy] = []
    kept: dict[int, tuple[Detections, int, float]] = {}
    faint: list[int] = []
    dets, ids = found or (None, ())
    if dets is None:
        return seeds, kept, faint
    rows_in = zip(dets.xyxy.tolist(), ids, dets.score.tolist(), strict=True)
    for i, (b, tid, score) in enumerate(rows_in):
        if tid is None or tid < 0:
            seeds.append((b[0], b[1], b[2], b[3]))
        elif score >= HOLD_SCORE:
            kept[tid] = (dets, i, 0.0)
        else:
            faint.append(tid)
    return seeds, kept, faint


def _moved(dets: Detections, i: int, hint: TrackHint, t: float) -> Detections:
    """Detection ``i`` of ``dets``, a track's last look, where the track is at ``t``: as
    it was for a still one, moved on by its velocity for a walker (keypoints too)."""
    row = take(dets, np.array([i], np.intp))
    if not hint.moving:
        return row
    dx, dy = hint.shift(t)
    kp = row.keypoints
    if kp is not None:
        kp = kp + np.array([dx, dy, 0.0], np.float32)
    xyxy = row.xyxy + np.array([dx, dy, dx, dy], np.float32)
    return Detections(xyxy, row.score, row.class_id, row.labels, kp)


def make_looker(settings: AgentSettings, camera: CameraSettings) -> Looker:
    """A camera's looker from the settings (``detector.*`` regions keys, ``motion``)."""
    d, m = settings.detector, settings.motion
    motion = MotionParams(height_px=m.height_px, min_threshold=m.threshold, min_area=m.min_area)
    planner = PlannerParams(
        region_px=d.region_px,
        max_regions=d.max_regions,
        recheck_s=d.recheck_s,
        predict_s=d.predict_s,
        sweep_s=d.sweep_s,
    )
    return Looker(motion, planner, masks=[*camera.masks, *camera.motion_masks])


def look_and_detect(
    detector: Detector,
    looker: Looker,
    image: npt.NDArray[np.uint8],
    t: float,
    whole: Detector | None = None,
) -> tuple[Detections | None, Look]:
    """One frame in region mode, on this thread: (detections or None if skipped, the look:
    ``look.regions`` where it ran); ``whole``: the model of coarse looks (None:
    ``detector``)."""
    wd = whole or detector
    coarse = None if whole is None else (whole.info.input_hw, whole.sheet_stride)
    look = looker.look(image, t, detector.info.input_hw, detector.sheet_stride, coarse)
    if not look.sheets and look.coarse is None:
        return look.held, look
    found = [detect_sheet(detector, image, sheet)[0] for sheet in look.sheets]
    if look.coarse is not None:
        found.append(detect_sheet(wd, image, look.coarse, coarse=True)[0])
    wh = (int(image.shape[1]), int(image.shape[0]))
    return looker.merge(look, found, wh, detector.thresholds), look
