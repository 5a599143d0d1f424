"""Tracking benchmark: clips with exact truth, the real detector and the objects stage.

    nice -n 10 python bench/tracking.py [--scenes 3] [--rounds 3] [--json OUT] [--keep-clip DIR]

needs the ``bench`` extra (``pip install -e '.[bench]'``: motmetrics for MOTA/IDF1,
edgefirst-tracker for the comparison; without edgefirst-tracker its rows are left out).

The main clip (built here, in a temp dir, never committed): the background is the per-pixel
median of 60 frames spread over vtest.avi (768x576; the median removes the people walking
there), and real people cut from the shared photos (bus.jpg, zidane.jpg, messi5.jpg,
basketball1.png; the crops are boxes the FP32 model finds there; two are used twice, once
mirrored) are pasted on it with feathered edges, 140-230 px tall, walking piecewise-linear
paths at 10 fps for 33.5 s (``PATHS``, 7 people): they enter and leave the frame at both
sides and at the bottom; two of them cross (the nearer, wider one hides the other for
0.7 s), two of one size at almost one depth pass each other, one walks in, stands still
for 5 s and walks on, and two pass behind a static kiosk (hidden up to 1.8 s). Nearer
things (lower in the image) are drawn over farther ones. A vertical line through the middle
(drawn top to bottom: left to right is ``in``) is crossed three times each way; a zone
covers the right half. ``--scenes N`` adds N seeded random scenes (7 people each on random
straight walks, some stopping; crowded: many pass each other at one depth).

Truth per frame is the visible part of each pasted box (the box less the frame's edges and
the boxes of nearer things). A person with at least ``VIS_MIN`` of their box visible is in
the truth (with the bounding box of the visible part); a person less visible than that but
not hidden is *ignored* for that frame: not in the truth, and a tracker box over them
(IoU >= 0.5) counts neither as a false positive nor as a hit (as MOT17 treats its
occluded people); a person fully hidden is not in the truth.

Then the real pipeline: the bundled INT8 640 model through ``Detector`` with the agent's
default settings on every frame (read back from the encoded video), and the agent's
``CameraObjects`` stage (masks, tracker, zones, lines, events) fed those detections at
10 fps, and again with every 2nd and 3rd frame (a camera at 5 and 3.3 fps). Reported: MOTA,
IDF1, ID switches (motmetrics, IoU >= 0.5; the hypotheses are the detections the stage
gave a track id, as DetectionMessage publishes them), ``new`` events per true person,
line-count errors against the paths, whether every ``new`` has exactly one ``end`` (after
``stage.close``), and the stage's cost per frame (thread CPU and wall time around
``stage.step`` only; snapshots are requested, not encoded, here).

The same detections also go through edgefirst-tracker's ByteTrack (the Rust tracker the
issue asks to compare), inside the same stage through an adapter, with its defaults and
tuned; and through our tracker with its previous defaults and as it was before a track's
second sighting set its velocity (``VelocityFromRest``). Last, the cost per frame of each
tracker alone and of the whole stage with 1, 10 and 30 synthetic objects (boxes moving on
a 1920x1080 frame).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    RESULTS,
    ROOT,
    CpuWindow,
    machine_info,
    machine_line,
    percentile,
    print_table,
)

from agent.cv import cv2
from agent.detect.detections import Detections
from agent.detect.detector import Detector
from agent.detect.inputs import build_detector
from agent.detect.nms import iou_matrix
from agent.messages import EventMessage, ModelRef
from agent.objects.stage import CameraObjects
from agent.objects.tracker import MIN_DT_S, ObjectTracker, Track, TrackerParams, TrackUpdate
from agent.settings import CameraSettings, DetectorSettings, ObjectsSettings

MEDIA = [ROOT.parent / "shared" / "data" / "media", ROOT / "assets"]
MODEL = ROOT / "models" / "yolo11n-pose-640-int8.onnx"
FPS = 10.0
BACKGROUND_FRAMES = 60
#: Share of a person's box that must be visible for them to be in the truth.
VIS_MIN = 0.5
MATCH_IOU = 0.5
FEATHER_PX = 6
T0_TS = 1_795_000_000.0  # wall clock of frame 0 (2026-11-18), for the messages only

#: People: name -> (photo, crop xyxy in the photo: a box the FP32 model finds there).
PEOPLE: dict[str, tuple[str, tuple[int, int, int, int]]] = {
    "bus-sunglasses": ("bus.jpg", (222, 405, 344, 859)),
    "zidane-coach": ("zidane.jpg", (744, 37, 1143, 709)),
    "basketball": ("basketball1.png", (34, 80, 169, 476)),
    "messi": ("messi5.jpg", (66, 63, 459, 330)),
    "bus-coat": ("bus.jpg", (60, 396, 240, 906)),
}


@dataclass(frozen=True)
class Path2D:
    """One person's walk: height in px, and (frame, foot x, foot y) waypoints."""

    person: str
    height: int
    points: tuple[tuple[int, float, float], ...]

    def feet(self, frame: int) -> tuple[float, float] | None:
        """Foot position (bottom centre of the box) at ``frame``; None outside the walk."""
        pts = self.points
        if frame < pts[0][0] or frame > pts[-1][0]:
            return None
        for (f0, x0, y0), (f1, x1, y1) in itertools.pairwise(pts):
            if f0 <= frame <= f1:
                a = 0.0 if f1 == f0 else (frame - f0) / (f1 - f0)
                return x0 + a * (x1 - x0), y0 + a * (y1 - y0)
        return None


#: Who walks where (768x576 frame, 10 fps). Left to right across x=384 is ``in``.
PATHS: tuple[Path2D, ...] = (
    # Far, left to right across the whole frame, behind the kiosk for about 1 s: in.
    Path2D("bus-sunglasses", 150, ((0, -40.0, 260.0), (150, 810.0, 260.0))),
    # The crossing pair: the coach (near, wide) walks right, the basketball player
    # (farther, narrow) walks left; they meet at x=250 around frame 130, where the coach
    # hides the player (all but the top of the head) for 0.7 s. Coach: in; player: out.
    Path2D("basketball", 180, ((6, 870.0, 440.0), (200, -100.0, 440.0))),
    Path2D("zidane-coach", 230, ((72, -100.0, 500.0), (233, 866.0, 500.0))),
    # Walks in from the right, stands still for 5 s, walks on out at the left, half hidden
    # by the kiosk on the way: out.
    Path2D(
        "messi",
        140,
        ((150, 850.0, 250.0), (190, 500.0, 250.0), (240, 500.0, 250.0), (295, -120.0, 250.0)),
    ),
    # Comes in at the right and leaves at the bottom without reaching the line.
    Path2D("bus-coat", 200, ((236, 830.0, 470.0), (290, 560.0, 800.0))),
    # Two people of one size at almost one depth pass each other (the nearer one hides the
    # other) right of the line, which they cross at different times: one in, one out.
    Path2D("bus-coat:mirrored", 190, ((215, -50.0, 400.0), (323, 814.0, 400.0))),
    Path2D("basketball", 185, ((245, 820.0, 388.0), (330, -30.0, 388.0))),
)

#: Static things in front of the scene: (background patch xyxy to copy, where xyxy).
OCCLUDERS: tuple[tuple[tuple[int, int, int, int], tuple[int, int, int, int]], ...] = (
    ((320, 10, 420, 100), (150, 90, 250, 290)),  # a kiosk of the building's brick wall
)


@dataclass(frozen=True)
class Scene:
    """A clip to build: who walks where, for how many frames, behind what."""

    name: str
    paths: tuple[Path2D, ...]
    frames: int
    occluders: tuple[tuple[tuple[int, int, int, int], tuple[int, int, int, int]], ...] = OCCLUDERS


MAIN = Scene("main", PATHS, 335)


def random_scene(seed: int, people: int = 7, frames: int = 320) -> Scene:
    """People on random straight walks (side to side, some stopping 2-5 s), seeded.

    Depth sets size (feet lower in the image: taller), so they pass in front of each other
    as in the main clip; the kiosk stays where it is.
    """
    rng = np.random.default_rng(seed)
    names = list(PEOPLE)
    paths = []
    for _ in range(people):
        name = str(rng.choice(names)) + (":mirrored" if rng.random() < 0.5 else "")
        y0 = float(rng.uniform(250, 560))
        y1 = y0 + float(rng.uniform(-30, 30))
        height = round(130 + (y0 - 250) / 310 * 100)
        step = float(rng.uniform(4, 9))  # px per frame
        x0, x1 = (-60.0, 828.0) if rng.random() < 0.5 else (828.0, -60.0)
        f0 = int(rng.integers(0, frames - 110))
        pts: list[tuple[int, float, float]] = [(f0, x0, y0)]
        if rng.random() < 0.35:
            xs = float(rng.uniform(200, 570))
            ys = y0 + (y1 - y0) * (xs - x0) / (x1 - x0)
            fs = f0 + round(abs(xs - x0) / step)
            pts += [(fs, xs, ys), (fs + int(rng.integers(20, 51)), xs, ys)]
        fl, xl, _ = pts[-1]
        pts.append((fl + round(abs(x1 - xl) / step), x1, y1))
        paths.append(Path2D(name, height, tuple(pts)))
    return Scene(f"random-{seed}", tuple(paths), frames)


#: TrackerParams defaults before this benchmark tuned them (for the comparison).
PREVIOUS = TrackerParams(match_iou=0.2, alpha=0.7, beta=0.2)

LINE = {"middle": {"points": [[0.5, 0.0], [0.5, 1.0]]}}
ZONE = {"right": {"polygon": [[0.5, 0.0], [1.0, 0.0], [1.0, 1.0], [0.5, 1.0]]}}


# -- the clip -------------------------------------------------------------------------------
def media(name: str) -> Path:
    for d in MEDIA:
        if (d / name).is_file():
            return d / name
    raise SystemExit(f"{name} not found in {', '.join(str(d) for d in MEDIA)}")


def background() -> npt.NDArray[np.uint8]:
    """Per-pixel median of frames spread over vtest.avi: the scene without its walkers."""
    cap = cv2.VideoCapture(str(media("vtest.avi")))
    n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    frames = []
    for i in np.linspace(0, n - 1, BACKGROUND_FRAMES).astype(int).tolist():
        cap.set(cv2.CAP_PROP_POS_FRAMES, i)
        ok, f = cap.read()
        if ok:
            frames.append(f)
    cap.release()
    if len(frames) < BACKGROUND_FRAMES // 2:
        raise SystemExit("could not read vtest.avi for the background")
    return np.median(np.stack(frames), axis=0).astype(np.uint8)


@dataclass(frozen=True)
class Sprite:
    image: npt.NDArray[np.uint8]
    alpha: npt.NDArray[np.float32]  # (h, w, 1), 1 inside, ramping to 0 at the edges


def sprite(person: str, height: int) -> Sprite:
    """A person's crop at ``height`` px; ``name:mirrored`` is the crop flipped left-right."""
    name, _, how = person.partition(":")
    photo, (x1, y1, x2, y2) = PEOPLE[name]
    crop = cv2.imread(str(media(photo)))[y1:y2, x1:x2]
    if how == "mirrored":
        crop = crop[:, ::-1]
    width = round(crop.shape[1] * height / crop.shape[0])
    img = cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA)
    ramp_x = np.minimum(np.arange(width), np.arange(width)[::-1]) + 1
    ramp_y = np.minimum(np.arange(height), np.arange(height)[::-1]) + 1
    alpha = np.minimum.outer(ramp_y, ramp_x).astype(np.float32) / FEATHER_PX
    return Sprite(img, np.clip(alpha, 0.0, 1.0)[..., None])


@dataclass(frozen=True)
class Truth:
    """One person in one frame: visible part, visible share, and the whole pasted box."""

    person_id: int
    visible_xyxy: tuple[float, float, float, float]
    visibility: float
    full_xyxy: tuple[float, float, float, float]


def paste(canvas: npt.NDArray[np.uint8], sp: Sprite, x0: int, y0: int) -> None:
    h, w = sp.image.shape[:2]
    ch, cw = canvas.shape[:2]
    cx0, cy0, cx1, cy1 = max(0, x0), max(0, y0), min(cw, x0 + w), min(ch, y0 + h)
    if cx0 >= cx1 or cy0 >= cy1:
        return
    src = sp.image[cy0 - y0 : cy1 - y0, cx0 - x0 : cx1 - x0].astype(np.float32)
    a = sp.alpha[cy0 - y0 : cy1 - y0, cx0 - x0 : cx1 - x0]
    dst = canvas[cy0:cy1, cx0:cx1].astype(np.float32)
    canvas[cy0:cy1, cx0:cx1] = (a * src + (1.0 - a) * dst + 0.5).astype(np.uint8)


def occluder_sprites(bg: npt.NDArray[np.uint8], scene: Scene) -> list[tuple[Sprite, int, int]]:
    """The static occluders as (sprite, x0, y0), cut from the background itself."""
    out = []
    for (sx1, sy1, sx2, sy2), (x1, y1, x2, y2) in scene.occluders:
        img = cv2.resize(bg[sy1:sy2, sx1:sx2], (x2 - x1, y2 - y1), interpolation=cv2.INTER_CUBIC)
        out.append((Sprite(img, np.ones((y2 - y1, x2 - x1, 1), np.float32)), x1, y1))
    return out


def render(
    scene: Scene,
    bg: npt.NDArray[np.uint8],
    sprites: list[Sprite],
    statics: list[tuple[Sprite, int, int]],
    frame: int,
) -> tuple[npt.NDArray[np.uint8], list[Truth]]:
    """One frame of the clip and its truth (every person with any pixel visible)."""
    canvas = bg.copy()
    h_img, w_img = bg.shape[:2]
    # (foot y, person id or -1 for a static occluder, index, x0, y0, w, h)
    placed: list[tuple[float, int, int, int, int, int, int]] = []
    for k, (sp, x0, y0) in enumerate(statics):
        h, w = sp.image.shape[:2]
        placed.append((float(y0 + h), -1, k, x0, y0, w, h))
    for pid, path in enumerate(scene.paths):
        feet = path.feet(frame)
        if feet is None:
            continue
        h, w = sprites[pid].image.shape[:2]
        placed.append((feet[1], pid, pid, round(feet[0] - w / 2), round(feet[1] - h), w, h))
    placed.sort()  # far (feet higher in the image) first: nearer things are drawn over them
    for _, pid, k, x0, y0, _, _ in placed:
        paste(canvas, sprites[pid] if pid >= 0 else statics[k][0], x0, y0)
    truth: list[Truth] = []
    for j, (_, pid, _, x0, y0, w, h) in enumerate(placed):
        if pid < 0:
            continue
        mask = np.zeros((h_img, w_img), np.bool_)
        mask[max(0, y0) : max(0, y0 + h), max(0, x0) : max(0, x0 + w)] = True
        for _, _, _, ox, oy, ow, oh in placed[j + 1 :]:
            mask[max(0, oy) : max(0, oy + oh), max(0, ox) : max(0, ox + ow)] = False
        visible = int(mask.sum())
        if visible == 0:
            continue
        ys, xs = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
        vis_box = (float(xs[0]), float(ys[0]), float(xs[-1] + 1), float(ys[-1] + 1))
        full = (float(x0), float(y0), float(x0 + w), float(y0 + h))
        truth.append(Truth(pid, vis_box, visible / (w * h), full))
    return canvas, truth


def build_clip(
    scene: Scene, bg: npt.NDArray[np.uint8], work: Path
) -> tuple[Path, list[list[Truth]]]:
    """Write the clip (MJPG .avi) into ``work``; its truth per frame."""
    sprites = [sprite(p.person, p.height) for p in scene.paths]
    statics = occluder_sprites(bg, scene)
    h, w = bg.shape[:2]
    path = work / f"tracking-{scene.name}.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), FPS, (w, h))
    if not writer.isOpened():
        raise SystemExit(f"cannot write {path} (OpenCV without the MJPG encoder?)")
    truth = []
    for f in range(scene.frames):
        img, t = render(scene, bg, sprites, statics, f)
        writer.write(img)
        truth.append(t)
    writer.release()
    return path, truth


def expected_crossings(scene: Scene, image_w: int) -> dict[str, int]:
    """In/out passes of the vertical middle line by the paths' feet, frame by frame."""
    mid = image_w / 2
    out = {"in": 0, "out": 0}
    for p in scene.paths:
        feet = [p.feet(f) for f in range(scene.frames)]
        xs = [x[0] for x in feet if x is not None]
        for a, b in itertools.pairwise(xs):
            if a < mid <= b:
                out["in"] += 1
            elif a >= mid > b:
                out["out"] += 1
    return out


def detect_clip(det: Detector, path: Path, frames: int) -> tuple[list[Detections], list[float]]:
    """Detections of every frame of the clip (read back from the file), and ms per frame."""
    cap = cv2.VideoCapture(str(path))
    out: list[Detections] = []
    ms: list[float] = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        t0 = time.perf_counter()
        out.append(det.detect(img).detections)
        ms.append((time.perf_counter() - t0) * 1e3)
    cap.release()
    if len(out) != frames:
        raise SystemExit(f"read {len(out)} of {frames} frames back from {path}")
    return out, ms


# -- edgefirst-tracker inside the stage -----------------------------------------------------
@dataclass
class _EfTrack:
    track_id: int
    class_id: int
    label: str
    xyxy: tuple[float, float, float, float]
    scores: list[float]
    hits: int
    first_seen_t: float
    last_seen_t: float


class EdgefirstTracker:
    """edgefirst-tracker's ByteTrack behind ``ObjectTracker``'s interface (for the stage).

    Its per-detection answer gives the track of each detection; ``get_active_tracks`` the
    live ones (a track missing from it was dropped). A seen track's box is its detection,
    a coasting one's the Kalman location. Hits, scores and times are kept here. Frames not
    looked at (``None``) are not given to it.
    """

    def __init__(
        self, high_conf: float = 0.7, iou: float = 0.25, update: float = 0.25, lost_s: float = 0.5
    ) -> None:
        from edgefirst.tracker import ByteTrack

        self._bt = ByteTrack(
            high_conf=high_conf, iou=iou, update=update, lifespan_ns=round(lost_s * 1e9)
        )
        self._ids: dict[str, int] = {}
        self._tracks: dict[int, _EfTrack] = {}
        self._next = 1
        self.params = {"high_conf": high_conf, "iou": iou, "update": update, "lost_s": lost_s}

    def _id(self, uuid: str) -> int:
        tid = self._ids.get(uuid)
        if tid is None:
            tid = self._ids[uuid] = self._next
            self._next += 1
        return tid

    def update(
        self,
        dets: Detections | None,
        t: float,
        looked: Sequence[tuple[float, float, float, float]] | None = None,
        image_wh: tuple[int, int] | None = None,
    ) -> TrackUpdate:
        """``looked``/``image_wh`` are taken and ignored: ByteTrack has no notion of regions
        (the benchmark always looks at whole frames)."""
        if dets is None:
            return TrackUpdate(np.zeros((0,), np.int64), self._live(t, {}), ())
        n = len(dets)
        answer = self._bt.update(
            dets.xyxy, dets.score, dets.class_id.astype(np.uint64), round(t * 1e9)
        )
        track_ids = np.full((n,), -1, np.int64)
        for i, info in enumerate(answer):
            if info is None:
                continue
            tid = self._id(info.uuid)
            track_ids[i] = tid
            box = dets.xyxy[i].tolist()
            xyxy = (box[0], box[1], box[2], box[3])
            tr = self._tracks.get(tid)
            s = float(dets.score[i])
            if tr is None:
                self._tracks[tid] = _EfTrack(
                    tid, int(dets.class_id[i]), dets.labels[i], xyxy, [s], 1, t, t
                )
            else:
                tr.xyxy, tr.hits, tr.last_seen_t = xyxy, tr.hits + 1, t
                tr.scores = [*tr.scores[-31:], s]
        located = {
            self._id(a.info.uuid): a.info.tracked_location for a in self._bt.get_active_tracks()
        }
        removed = tuple(tid for tid in self._tracks if tid not in located)
        for tid in removed:
            del self._tracks[tid]
        return TrackUpdate(track_ids, self._live(t, located), removed)

    def _live(
        self, t: float, located: dict[int, tuple[float, float, float, float]]
    ) -> tuple[Track, ...]:
        return tuple(
            Track(
                track_id=tr.track_id,
                class_id=tr.class_id,
                label=tr.label,
                xyxy=tr.xyxy if tr.last_seen_t == t else located.get(tr.track_id, tr.xyxy),
                score=tr.scores[-1],
                seen=tr.last_seen_t == t,
                hits=tr.hits,
                first_seen_t=tr.first_seen_t,
                last_seen_t=tr.last_seen_t,
                median_score=float(statistics.median(tr.scores)),
            )
            for tr in self._tracks.values()
        )

    def reset(self) -> list[int]:
        ids = list(self._tracks)
        self.__init__(**self.params)  # type: ignore[misc]
        return ids


def edgefirst_available() -> bool:
    try:
        import edgefirst.tracker  # noqa: F401
    except ImportError:
        return False
    return True


# -- our tracker as it was before it took velocity from two sightings -----------------------
class VelocityFromRest(ObjectTracker):
    """``ObjectTracker`` as it was before a track's second sighting set its velocity: every
    track starts at rest and the filter finds its speed at ``beta`` (the agent's tracker
    until 2026-11-26; kept to show what the change does)."""

    def _correct(self, idx: npt.NDArray[np.int64], z: npt.NDArray[np.float64], t: float) -> None:
        p = self.params
        r = z - self._box[idx]
        dt = np.maximum(t - self._last_seen[idx], MIN_DT_S)[:, None]
        self._box[idx] = self._box[idx] + p.alpha * r
        vel = self._vel[idx] + p.beta * r / dt
        vel[:, 2:] *= 0.5
        self._vel[idx] = vel


# -- running the stage -----------------------------------------------------------------------
TrackerFactory = Callable[[], Any]  # a new tracker with ObjectTracker's update/reset


def camera() -> CameraSettings:
    return CameraSettings.model_validate(
        {"id": "bench", "source": "clip", "zones": ZONE, "lines": LINE}
    )


def new_stage(make_tracker: TrackerFactory | None) -> CameraObjects:
    stage = CameraObjects(camera(), device_id="bench", boot_id="b", params=ObjectsSettings())
    if make_tracker is not None:
        stage.tracker = make_tracker()
    return stage


@dataclass
class StageRun:
    track_ids: list[npt.NDArray[np.int64]]
    dets: list[Detections]
    events: list[EventMessage]
    line_totals: dict[tuple[str, str, str], int]
    cpu_us: list[float]
    wall_us: list[float]


def run_stage(
    frames: Sequence[Detections],
    image_wh: tuple[int, int],
    model: ModelRef,
    make_tracker: TrackerFactory | None,
    every: int = 1,
) -> StageRun:
    """Every ``every``-th frame through a fresh stage, at its time in the 10 fps clip (2:
    the camera at 5 fps), then ``close``; timed around ``step``."""
    stage = new_stage(make_tracker)
    ids: list[npt.NDArray[np.int64]] = []
    kept: list[Detections] = []
    events: list[EventMessage] = []
    cpu: list[float] = []
    wall: list[float] = []
    for i in range(0, len(frames), every):
        dets, t = frames[i], i / FPS
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        out = stage.step(dets, t, T0_TS + t, image_wh, model)
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        cpu.append((c1 - c0) / 1e3)
        wall.append((w1 - w0) / 1e3)
        ids.append(out.track_ids)
        kept.append(out.detections if out.detections is not None else dets)
        events.extend(out.events)
    events.extend(stage.close("shutdown", T0_TS + len(frames) / FPS).events)
    return StageRun(ids, kept, events, dict(stage.line_totals), cpu, wall)


# -- quality ---------------------------------------------------------------------------------
@dataclass
class Clip:
    """A built scene: its truth and the detector's output, per frame."""

    scene: Scene
    truth: list[list[Truth]]
    dets: list[Detections]
    expected: dict[str, int]

    def every(self, k: int) -> Clip:
        """The clip as a camera at 1/k of its frame rate sees it (truth of those frames)."""
        return Clip(self.scene, self.truth[::k], self.dets[::k], self.expected)


def _frame_pairs(
    people: list[Truth], dets: Detections, tids: npt.NDArray[np.int64]
) -> tuple[list[Truth], list[int], npt.NDArray[np.float64] | None, int]:
    """Truth in the frame, tracked hypotheses left after the ignore rule, their IoU, and
    how many hypotheses the ignore rule took out."""
    gt = [p for p in people if p.visibility >= VIS_MIN]
    ign = [p for p in people if p.visibility < VIS_MIN]
    hyp_box = dets.xyxy[tids >= 0].astype(np.float64)
    hyp_id: list[int] = tids[tids >= 0].tolist()
    gt_box = np.array([p.visible_xyxy for p in gt], np.float64).reshape(-1, 4)
    iou = iou_matrix(gt_box, hyp_box) if gt and hyp_id else None
    dropped = 0
    if ign and hyp_id:
        ign_box = np.array([b for p in ign for b in (p.visible_xyxy, p.full_xyxy)], np.float64)
        over_ign = iou_matrix(ign_box, hyp_box).max(axis=0) >= MATCH_IOU
        over_gt = iou.max(axis=0) >= MATCH_IOU if iou is not None else np.zeros_like(over_ign)
        keep = ~(over_ign & ~over_gt)
        dropped = int((~keep).sum())
        hyp_id = [h for h, k in zip(hyp_id, keep.tolist(), strict=True) if k]
        if iou is not None:
            iou = iou[:, keep]
    return gt, hyp_id, iou, dropped


def mot_metrics(clips: Sequence[Clip], runs: Sequence[StageRun]) -> dict[str, Any]:
    """MOTA, IDF1, ID switches... of the tracked detections against the truth, over all
    ``clips`` at once (ids of different clips never meet)."""
    import motmetrics as mm

    acc = mm.MOTAccumulator(auto_id=True)
    ignored = 0
    for k, (clip, run) in enumerate(zip(clips, runs, strict=True)):
        for f, people in enumerate(clip.truth):
            gt, hyp_id, iou, dropped = _frame_pairs(people, run.dets[f], run.track_ids[f])
            ignored += dropped
            if iou is not None and iou.size:
                dist = np.where(iou >= MATCH_IOU, 1.0 - iou, np.nan)
            else:
                dist = np.zeros((len(gt), len(hyp_id)))
            acc.update(
                [k * 1000 + p.person_id for p in gt], [k * 1_000_000 + h for h in hyp_id], dist
            )
    names = [
        "mota",
        "idf1",
        "num_switches",
        "num_false_positives",
        "num_misses",
        "num_objects",
        "mostly_tracked",
        "num_fragmentations",
        "motp",
    ]
    row = mm.metrics.create().compute(acc, metrics=names, name="clip").iloc[0]
    out: dict[str, Any] = {k: float(row[k]) for k in names}
    for k in names[2:-1]:
        out[k] = int(out[k])
    out["ignored_hyps"] = ignored
    return out


def per_person(clip: Clip, run: StageRun) -> list[dict[str, Any]]:
    """For each true person: frames in the truth, frames with a tracked box on them
    (IoU >= 0.5, best box), and the track ids those boxes had."""
    rows = []
    for pid, path in enumerate(clip.scene.paths):
        frames = tracked = 0
        ids: list[int] = []
        for f, people in enumerate(clip.truth):
            p = next((x for x in people if x.person_id == pid), None)
            if p is None or p.visibility < VIS_MIN:
                continue
            frames += 1
            tids = run.track_ids[f]
            boxes = run.dets[f].xyxy[tids >= 0].astype(np.float64)
            if not len(boxes):
                continue
            iou = iou_matrix(np.array([p.visible_xyxy], np.float64), boxes)[0]
            j = int(iou.argmax())
            if iou[j] >= MATCH_IOU:
                tracked += 1
                tid = int(tids[tids >= 0][j])
                if not ids or ids[-1] != tid:
                    ids.append(tid)
        rows.append(
            {
                "person": f"{pid} {path.person}",
                "frames": frames,
                "tracked": tracked,
                "track_ids": " ".join(str(i) for i in ids) or "-",
            }
        )
    return rows


def event_checks(clips: Sequence[Clip], runs: Sequence[StageRun]) -> dict[str, Any]:
    """new/update/end bookkeeping and line counts, summed over ``clips``."""
    kinds: Counter[tuple[str, str]] = Counter()
    for run in runs:
        kinds.update((e.type, e.id) for e in run.events)
    news = {i for k, i in kinds if k == "new"}
    ends = {i for k, i in kinds if k == "end"}
    dup_new = sum(1 for (k, _), n in kinds.items() if k == "new" and n > 1)
    dup_end = sum(1 for (k, _), n in kinds.items() if k == "end" and n > 1)
    people = sum(len(c.scene.paths) for c in clips)
    got = {"in": 0, "out": 0}
    want = {"in": 0, "out": 0}
    errors = 0
    for clip, run in zip(clips, runs, strict=True):
        for d in ("in", "out"):
            n = sum(v for (_, _, dd), v in run.line_totals.items() if dd == d)
            got[d] += n
            want[d] += clip.expected[d]
            errors += abs(n - clip.expected[d])
    reasons = Counter(e.end_reason for run in runs for e in run.events if e.type == "end")
    return {
        "people": people,
        "new_events": len(news),
        "events_per_person": len(news) / people,
        "updates": sum(n for (k, _), n in kinds.items() if k == "update"),
        "new_end_exact": news == ends and dup_new == 0 and dup_end == 0,
        "new_without_end": len(news - ends),
        "end_without_new": len(ends - news),
        "line_in": got["in"],
        "line_out": got["out"],
        "line_in_expected": want["in"],
        "line_out_expected": want["out"],
        "line_errors": errors,
        "end_reasons": dict(reasons),
    }


def us_stats(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "median": statistics.median(values) if values else None,
        "p95": percentile(values, 95),
    }


def quality_row(name: str, clips: Sequence[Clip], runs: Sequence[StageRun]) -> dict[str, Any]:
    row: dict[str, Any] = {"tracker": name}
    row.update(mot_metrics(clips, runs))
    row.update(event_checks(clips, runs))
    return row


def timed_run(
    rounds: int, clip: Clip, wh: tuple[int, int], model: ModelRef, make: TrackerFactory | None
) -> StageRun:
    """The least disturbed of ``rounds`` identical runs (lowest median stage CPU)."""
    runs = [run_stage(clip.dets, wh, model, make) for _ in range(rounds)]
    return min(runs, key=lambda r: statistics.median(r.cpu_us))


# -- synthetic cost --------------------------------------------------------------------------
def synthetic(n: int, frames: int, seed: int = 1) -> list[Detections]:
    """``n`` people-sized boxes bouncing around a 1920x1080 frame, one Detections a frame."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(40, 90, n)
    h = w * 2.6
    x = rng.uniform(0, 1920 - w)
    y = rng.uniform(0, 1080 - h)
    speed = rng.uniform(3, 12, n) * rng.choice([-1.0, 1.0], n)
    vy = rng.uniform(-3, 3, n)
    out = []
    for _ in range(frames):
        x, y = x + speed, y + vy
        bounce = (x < 0) | (x + w > 1920)
        speed = np.where(bounce, -speed, speed)
        vy = np.where((y < 0) | (y + h > 1080), -vy, vy)
        xyxy = np.stack([x, y, x + w, y + h], axis=1).astype(np.float32)
        score = rng.uniform(0.55, 0.95, n).astype(np.float32)
        out.append(Detections(xyxy, score, np.zeros((n,), np.int32), ("person",) * n))
    return out


def time_calls(step: Callable[[int], object], frames: int, warm: int) -> list[float]:
    """Thread CPU µs of ``step(i)`` for each frame after ``warm`` frames."""
    us: list[float] = []
    for i in range(frames):
        c0 = time.thread_time_ns()
        step(i)
        c1 = time.thread_time_ns()
        if i >= warm:
            us.append((c1 - c0) / 1e3)
    return us


def cost_rows(rounds: int, with_edgefirst: bool, frames: int = 200) -> list[dict[str, Any]]:
    """Median and p95 thread CPU µs per frame of each tracker alone and of the whole stage,
    with 1, 10 and 30 objects; the least disturbed (lowest median) of ``rounds`` rounds."""
    model = ModelRef(name="synthetic", version=1, sha256="")
    variants: list[tuple[str, str, TrackerFactory | None]] = [("ours", "tracker", ObjectTracker)]
    if with_edgefirst:
        variants.append(("edgefirst (raw call)", "tracker", None))
        variants.append(
            ("edgefirst (adapter)", "tracker", lambda: EdgefirstTracker(0.5, lost_s=2.0))
        )
    variants.append(("ours", "stage", None))
    if with_edgefirst:
        variants.append(("edgefirst", "stage", lambda: EdgefirstTracker(0.5, lost_s=2.0)))
    rows = []
    for n in (1, 10, 30):
        seq = synthetic(n, frames)
        for name, what, make in variants:
            best: list[float] | None = None
            for _ in range(rounds):
                step = _stepper(name, what, make, seq, model)
                us = time_calls(step, frames, warm=20)
                if best is None or statistics.median(us) < statistics.median(best):
                    best = us
            assert best is not None
            st = us_stats(best)
            rows.append(
                {
                    "tracker": name,
                    "what": what,
                    "objects": n,
                    "median_us": st["median"],
                    "p95_us": st["p95"],
                }
            )
    return rows


def _stepper(
    name: str, what: str, make: TrackerFactory | None, seq: list[Detections], model: ModelRef
) -> Callable[[int], object]:
    if what == "stage":
        stage = new_stage(make)
        return lambda i: stage.step(seq[i], i / FPS, T0_TS + i / FPS, (1920, 1080), model)
    if name == "edgefirst (raw call)":
        from edgefirst.tracker import ByteTrack

        bt = ByteTrack(high_conf=0.5, lifespan_ns=2_000_000_000)
        labels = [d.class_id.astype(np.uint64) for d in seq]
        return lambda i: bt.update(seq[i].xyxy, seq[i].score, labels[i], round(i / FPS * 1e9))
    assert make is not None
    tracker = make()
    return lambda i: tracker.update(seq[i], i / FPS)


# -- main ------------------------------------------------------------------------------------
def trackers(with_ef: bool) -> list[tuple[str, TrackerFactory | None]]:
    """The trackers compared, each inside the agent's stage, as (name, factory)."""
    out: list[tuple[str, TrackerFactory | None]] = [
        ("ours (agent defaults)", None),
        ("ours, before (a .7 b .2 iou .2)", lambda: ObjectTracker(PREVIOUS)),
        ("ours, velocity from rest (before)", VelocityFromRest),
    ]
    if with_ef:
        out += [
            ("edgefirst, its defaults", EdgefirstTracker),
            ("edgefirst, lost 2 s", lambda: EdgefirstTracker(lost_s=2.0)),
            ("edgefirst, tuned", lambda: EdgefirstTracker(0.5, 0.1, 0.5, 2.0)),
        ]
    return out


def build_clips(work: Path, scenes: list[Scene]) -> tuple[list[Clip], ModelRef, dict[str, Any]]:
    """Every scene built, written, read back and run through the detector."""
    det = build_detector(DetectorSettings(model=MODEL))
    det.warmup(2)
    model = ModelRef(name=det.info.name, version=det.info.version, sha256=det.info.sha256)
    bg = background()
    clips = []
    ms: list[float] = []
    for sc in scenes:
        t0 = time.monotonic()
        path, truth = build_clip(sc, bg, work)
        dets, took = detect_clip(det, path, sc.frames)
        ms += took
        clips.append(Clip(sc, truth, dets, expected_crossings(sc, bg.shape[1])))
        print(
            f"  {sc.name}: {sc.frames} frames, {len(sc.paths)} people, line in/out "
            f"{clips[-1].expected['in']}/{clips[-1].expected['out']}, "
            f"{sum(len(d) for d in dets)} detections [{time.monotonic() - t0:.0f} s]",
            flush=True,
        )
    info = {
        "model": MODEL.name,
        "provider": det.info.provider,
        "detect_ms_p50": statistics.median(ms),
        "image_wh": [bg.shape[1], bg.shape[0]],
    }
    return clips, model, info


def measure(
    clips: list[Clip], wh: tuple[int, int], model: ModelRef, rounds: int, with_ef: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Each tracker in the stage: main clip (timed), random scenes, and lower frame rates."""
    main_rows, random_rows, rate_rows = [], [], []
    persons: list[dict[str, Any]] = []
    for name, make in trackers(with_ef):
        run = timed_run(rounds, clips[0], wh, model, make)
        row = quality_row(name, clips[:1], [run])
        cpu, wall = us_stats(run.cpu_us), us_stats(run.wall_us)
        row.update(
            stage_cpu_us_median=cpu["median"],
            stage_cpu_us_p95=cpu["p95"],
            stage_wall_us_median=wall["median"],
            stage_wall_us_p95=wall["p95"],
        )
        main_rows.append(row)
        if make is None:
            persons = per_person(clips[0], run)
        rates: dict[str, Any] = {"tracker": name}
        for k, fps in ((1, "10"), (2, "5"), (3, "3.3")):
            for part, group in (("main", clips[:1]), ("random", clips[1:])):
                if not group:
                    continue
                runs = [run_stage(c.dets, wh, model, make, every=k) for c in group]
                q = quality_row(name, [c.every(k) for c in group], runs)
                if k == 1 and part == "random":
                    random_rows.append(q)
                rates[f"{part}_{fps}"] = (
                    f"{q['idf1']:.3f} {q['num_switches']} {q['events_per_person']:.2f}"
                )
                rates[f"{part}_{fps}_detail"] = {
                    key: q[key]
                    for key in ("idf1", "mota", "num_switches", "events_per_person", "line_errors")
                }
        rate_rows.append(rates)
        print(f"  measured {name}", flush=True)
    return main_rows, random_rows, rate_rows, persons


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="timed repeats; the least disturbed")
    p.add_argument("--scenes", type=int, default=3, help="random scenes besides the main clip")
    p.add_argument("--json", type=Path, default=RESULTS / "tracking.json")
    p.add_argument("--keep-clip", type=Path, default=None, help="write the clips here, keep them")
    p.add_argument("--no-edgefirst", action="store_true", help="leave edgefirst-tracker out")
    a = p.parse_args()
    try:
        import motmetrics  # noqa: F401
    except ImportError:
        raise SystemExit("needs motmetrics: pip install -e '.[bench]'") from None
    with_ef = not a.no_edgefirst and edgefirst_available()
    if not a.no_edgefirst and not with_ef:
        print(
            "edgefirst-tracker is not installed: its rows are left out (pip install -e '.[bench]')"
        )
    cv2.setNumThreads(1)
    info = machine_info()
    print(machine_line(info), flush=True)

    work = a.keep_clip or Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        scenes = [MAIN] + [random_scene(seed) for seed in range(1, a.scenes + 1)]
        clips, model, det_info = build_clips(work, scenes)
    finally:
        if a.keep_clip is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"clips kept in {work}")
    wh = (det_info["image_wh"][0], det_info["image_wh"][1])
    main_rows, random_rows, rate_rows, persons = measure(clips, wh, model, a.rounds, with_ef)
    window = CpuWindow()
    costs = cost_rows(a.rounds, with_ef)
    load = window.close()
    print(
        f"  cost measured with {load['foreign_cores']} cores busy with other processes "
        f"(of {info['nproc']})",
        flush=True,
    )
    info["cost_cpu"] = load
    report(info, det_info, clips, main_rows, random_rows, rate_rows, persons, costs, a.json)


QUALITY_COLS = [
    ("tracker", "tracker", 0),
    ("mota", "MOTA", 3),
    ("idf1", "IDF1", 3),
    ("num_switches", "ID sw", 0),
    ("num_false_positives", "FP", 0),
    ("num_misses", "FN", 0),
    ("num_fragmentations", "frag", 0),
    ("events_per_person", "new/person", 2),
    ("line_in", "in", 0),
    ("line_out", "out", 0),
    ("line_errors", "line err", 0),
    ("new_end_exact", "new=end", 0),
]


def report(
    info: dict[str, Any],
    det_info: dict[str, Any],
    clips: list[Clip],
    main_rows: list[dict[str, Any]],
    random_rows: list[dict[str, Any]],
    rate_rows: list[dict[str, Any]],
    persons: list[dict[str, Any]],
    costs: list[dict[str, Any]],
    out: Path,
) -> None:
    main = clips[0]
    print_table(
        f"Main clip: {len(main.scene.paths)} people, {main.scene.frames} frames, line in/out "
        f"{main.expected['in']}/{main.expected['out']} (IoU >= {MATCH_IOU}); stage CPU us/frame",
        [*QUALITY_COLS, ("stage_cpu_us_median", "stage p50", 0), ("stage_cpu_us_p95", "p95", 0)],
        main_rows,
    )
    print_table(
        "Main clip, our tracker, per person (frames in the truth, frames tracked, track ids)",
        [
            ("person", "person", 0),
            ("frames", "frames", 0),
            ("tracked", "tracked", 0),
            ("track_ids", "track ids", 0),
        ],
        persons,
    )
    if random_rows:
        people = sum(len(c.scene.paths) for c in clips[1:])
        print_table(
            f"{len(clips) - 1} random scenes together ({people} people)", QUALITY_COLS, random_rows
        )
    rate_cols = [("tracker", "tracker", 0)]
    for fps in ("10", "5", "3.3"):
        rate_cols.append((f"main_{fps}", f"main {fps} fps", 0))
        if random_rows:
            rate_cols.append((f"random_{fps}", f"random {fps} fps", 0))
    print_table(
        "Frame rate: the same clips with every 2nd / 3rd frame (IDF1, ID switches, new/person)",
        rate_cols,
        rate_rows,
    )
    cost_table: list[dict[str, Any]] = []
    for row in costs:
        key = f"{row['tracker']} {row['what']}"
        found = next((r for r in cost_table if r["name"] == key), None)
        if found is None:
            found = {"name": key}
            cost_table.append(found)
        found[f"n{row['objects']}"] = row["median_us"]
        found[f"p{row['objects']}"] = row["p95_us"]
    print_table(
        "Cost per frame, thread CPU us (median, p95), synthetic boxes moving on 1920x1080",
        [
            ("name", "what", 0),
            ("n1", "1 obj", 0),
            ("p1", "p95", 0),
            ("n10", "10 obj", 0),
            ("p10", "p95", 0),
            ("n30", "30 obj", 0),
            ("p30", "p95", 0),
        ],
        cost_table,
    )
    ours = main_rows[0]
    stage30 = next(
        r for r in costs if r["tracker"] == "ours" and r["what"] == "stage" and r["objects"] == 30
    )
    acceptance = {
        "idf1_ge_0.9": ours["idf1"] >= 0.9,
        "events_per_person_le_1.2": ours["events_per_person"] <= 1.2,
        "line_counts_exact": ours["line_errors"] == 0,
        "every_new_one_end": bool(ours["new_end_exact"]),
        "stage_30_objects_lt_1ms": stage30["median_us"] < 1000.0,
    }
    print(
        "acceptance (main clip, our tracker): "
        + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in acceptance.items())
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    scenes = [
        {
            "name": c.scene.name,
            "frames": c.scene.frames,
            "people": [p.person for p in c.scene.paths],
            "line_expected": c.expected,
        }
        for c in clips
    ]
    doc = {
        "machine": info,
        "fps": FPS,
        "vis_min": VIS_MIN,
        "match_iou": MATCH_IOU,
        "scenes": scenes,
        "detector": det_info,
        "main_clip": main_rows,
        "main_clip_per_person": persons,
        "random_scenes": random_rows,
        "frame_rates": rate_rows,
        "cost": costs,
        "acceptance": acceptance,
    }
    out.write_text(json.dumps(doc, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
