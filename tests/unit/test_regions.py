"""Motion, region planning and merging regions' detections: table-driven, on real frames."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.detect.detections import Detections
from agent.frames import lasted
from agent.regions.merge import found_in, merge_found, merge_regions, shift
from agent.regions.motion import Motion, MotionDetector, MotionParams
from agent.regions.pack import (
    BORDER,
    Sheet,
    compose,
    pack,
    pack_fewest,
    resized,
    trim,
    unpack,
    whole_sheet,
)
from agent.regions.planner import (
    PlannerParams,
    RegionPlanner,
    TrackHint,
    Wanted,
    XyXy,
    _inside_share,
    _object_height,
    around,
    merge,
    overlaps,
    pieces,
)
from agent.regions.tiles import drop_pieces, plan_tiles

ROOT = Path(__file__).resolve().parents[2]


def scene(seed: int = 0, noise: float = 4.0, gain: float = 1.0) -> np.ndarray:
    """A real photo (bus.jpg, non-square) with fresh sensor noise and a brightness gain."""
    base = cv2.imread(str(ROOT / "assets" / "bus.jpg")).astype(np.float32)
    rng = np.random.default_rng(seed)
    img = base * gain + rng.normal(0, noise, base.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def test_sensor_noise_is_no_motion():
    """Thirty frames of the same scene with fresh noise: no motion after the first."""
    md = MotionDetector()
    results = [md.update(scene(i)) for i in range(30)]
    assert not any(m.any for m in results)


def test_lighting_change_is_no_motion():
    """A global brightness step (auto exposure, a cloud) is no motion."""
    md = MotionDetector()
    for i in range(5):
        md.update(scene(i))
    assert not md.update(scene(9, gain=1.15)).any


def test_a_moving_patch_is_found_where_it_is():
    """A dark square moving over the scene is reported around where it is (source pixels)."""
    md = MotionDetector()
    for i in range(5):
        md.update(scene(i))
    img = scene(7)
    img[300:420, 500:560] = 20
    m = md.update(img)
    assert len(m.boxes) == 1
    x1, y1, x2, y2 = m.boxes[0]
    assert 470 <= x1 <= 510 and 530 <= x2 <= 590 and 270 <= y1 <= 310 and 400 <= y2 <= 450


def test_a_walker_leaves_no_trail_of_motion():
    """A dark figure walking slowly across the scene (each pixel under it for 20 frames) is
    reported where it is, not along where it has been: the background does not learn
    what moves (one that learnt walkers even slowly left seconds of ghost motion)."""
    md = MotionDetector()
    for i in range(5):
        md.update(scene(i))
    for k in range(40):
        img = scene(10 + k)
        x = 100 + 5 * k
        img[300:420, x : x + 100] = 20
        m = md.update(img)
    assert len(m.boxes) == 1
    x1, _, x2, _ = m.boxes[0]
    assert x - 40 <= x1 and x2 <= x + 140  # the figure at 295..395, and no more behind it


def _patched(base: int | np.ndarray, *patches: tuple[int, int]) -> np.ndarray:
    """scene(base) for a frame number, else a copy of the image ``base``, with a dark
    120 x 60 patch (someone, a parked car) at each (row, column)."""
    img = scene(base) if isinstance(base, int) else base.copy()
    for y, x in patches:
        img[y : y + 120, x : x + 60] = 20
    return img


def _at(m: Motion, x1: float, x2: float, y1: float = 0.0, y2: float = math.inf) -> bool:
    """Whether any of ``m``'s moving boxes overlaps x1..x2 (and y1..y2)."""
    return any(overlaps(b, (x1, y1, x2, y2)) for b in m.boxes)


def test_what_stops_moving_settles_into_the_background():
    """A dark patch that appears and stays (a parked car) is motion at first, none once it
    has stood still settle_s (frames without times: 10 a second), and learnt: it leaving is
    motion again where it was."""
    md = MotionDetector(MotionParams(settle_s=1.0))
    for i in range(5):
        md.update(scene(i))

    assert md.update(_patched(5, (300, 500))).any
    results = [md.update(_patched(6 + i, (300, 500))) for i in range(40)]
    assert results[5].any and not any(m.any for m in results[12:])
    m = md.update(scene(50))
    assert len(m.boxes) == 1
    x1, y1, x2, y2 = m.boxes[0]
    assert 470 <= x1 <= 510 and 530 <= x2 <= 590 and 270 <= y1 <= 310 and 400 <= y2 <= 450


@pytest.mark.parametrize("fps", [2.5, 10.0, 25.0])
def test_a_parked_patch_settles_after_the_same_seconds_at_any_frame_rate(fps):
    """Settling and learning run on capture times: a camera processed at 2.5 frames a
    second (its fps, or a box with more cameras than it takes) stops calling a parked
    car motion after settle_s, as one at 10 or 25 does, not after as many frames."""
    md = MotionDetector(MotionParams(settle_s=3.0))
    t0 = 100.0
    for i in range(5):
        md.update(scene(i), t0 + i / fps)

    t_park = t0 + 5 / fps
    still_moving, settled = [], []
    for i in range(int(6 * fps)):
        t = t_park + i / fps
        m = md.update(_patched(5 + i, (300, 500)), t)
        (still_moving if t - t_park < 2.9 else settled).append((t, m))
    assert all(m.any for _, m in still_moving), [t - t_park for t, m in still_moving if not m.any]
    after = [m.any for t, m in settled if t - t_park > 3.2]
    assert after and not any(after)
    # Learnt in the same time: leaving is motion again where it stood.
    m = md.update(scene(99), settled[-1][0] + 1 / fps)
    assert len(m.boxes) == 1


def _left_and_stands(frames: list[tuple[float, Motion]], t0: float, *, early: bool) -> None:
    """Motion of ``frames`` (time, motion; settle_s 3, early_s 0.5) from ``t0``, when the
    patch at (300, 500) left and another came to stand at (100, 100): the place left is
    motion from ``t0``, until early_s after if ``early``, else for settle_s; the one who
    stands is motion from ``t0`` for settle_s."""
    place = [t for t, m in frames if _at(m, 490, 570, 290, 430)]
    assert place and place[0] == t0
    assert (max(place) < t0 + 0.55) if early else (max(place) > t0 + 2.8), place
    stander = [t for t, m in frames if _at(m, 90, 170, 90, 230)]
    assert min(stander) == t0 and max(stander) > t0 + 2.8


@pytest.mark.parametrize("seen", [False, True])
def test_the_place_of_someone_seen_at_the_start_settles_early(seen):
    """The background starts with someone in it. When they walk off, their place differs
    from it and stays still: motion for settle_s (3 s), a look each frame at nobody. Seen
    there within settle_s of the start (``unknown``: the looker hands in the detections),
    the scene behind them is the background early_s (0.5 s) after they left, learnt at
    once (quiet after, as long as you wait). Someone who comes and stands still elsewhere
    is motion for settle_s as ever."""
    md = MotionDetector(MotionParams(settle_s=3.0, early_s=0.5))
    for k in range(5):
        md.update(_patched(k, (300, 500)), k / 10)
    if seen:
        md.unknown(np.array([[490.0, 290.0, 570.0, 430.0]], np.float32), 0.2)
    stands = (100, 100)  # comes at 0.5 s (where no one was seen) and stands there
    frames = [(k / 10, md.update(_patched(k, stands), k / 10)) for k in range(5, 80)]
    _left_and_stands(frames, 0.5, early=seen)


def test_what_is_seen_late_or_after_unknown_s_settles_as_ever():
    """Seen later than settle_s after the start, someone's place is known (learnt while
    it was still); and the early settling ends unknown_s after the start: who was seen at
    the start and leaves after it leaves motion for settle_s."""
    params = MotionParams(settle_s=1.0, early_s=0.5, unknown_s=3.0)
    md = MotionDetector(params)
    for k in range(5):
        md.update(_patched(k, (300, 500), (100, 100)), k / 10)
    md.unknown(np.array([[490.0, 290.0, 570.0, 430.0]], np.float32), 0.4)  # seen at the start
    md.unknown(np.array([[90.0, 90.0, 170.0, 230.0]], np.float32), 1.2)  # seen too late to count
    for k in range(5, 35):
        md.update(_patched(k, (300, 500), (100, 100)), k / 10)
    # 3.5 s: past unknown_s, the one seen at the start leaves; later the other one.
    frames = [(k / 10, md.update(_patched(k, (100, 100)), k / 10)) for k in range(35, 50)]
    frames += [(k / 10, md.update(_patched(k), k / 10)) for k in range(50, 70)]
    place = [t for t, m in frames if _at(m, 490, 570)]
    assert place and max(place) > 4.35, place
    other = [t for t, m in frames if _at(m, 90, 170)]
    assert other and max(other) > 5.85, other


@pytest.mark.parametrize("found", [False, True])
def test_the_looker_tells_motion_who_its_first_looks_found(found):
    """The objects stage hands the looker each frame's detections (``follow``): those of
    the first seconds tell motion where its background began with someone in it, so when
    they walk off their place is quiet after early_s, not motion (a look at nobody) for
    settle_s."""
    from agent.regions.looker import Looker

    looker = Looker(MotionParams(settle_s=3.0, early_s=0.5), PlannerParams(sweep_s=100.0))
    person = Detections(
        np.array([[490.0, 290.0, 570.0, 430.0]], np.float32),
        np.array([0.9], np.float32),
        np.array([0], np.int32),
        ("person",),
    )
    for k in range(5):
        looker.look(_patched(k, (300, 500)), k / 10, (320, 320), 32)
        if found:
            looker.follow([], found=(person, [None]), t_frame=k / 10)
    place = []
    for k in range(5, 50):
        m = looker.look(_patched(k), k / 10, (320, 320), 32).motion
        if _at(m, 490, 570, 290, 430):
            place.append(k / 10)
    assert place and place[0] == 0.5
    assert (max(place) < 1.05) if found else (max(place) > 3.3), place


@pytest.mark.parametrize("told", [False, True])
def test_the_place_of_someone_who_stood_and_walked_off_settles_early(told):
    """Someone comes after the start, stands still long enough to be learnt (settle_s, then
    the learning) and walks off: their place differs from the background and stays still,
    motion for settle_s after they went (a look at nobody each frame, the camera's motion
    topic ON). Told (``left``: the looker hands in a still track off its place or ended), it
    is the scene early_s after they went, learnt at once; someone else who comes and
    stands meanwhile is motion for settle_s as ever."""
    md = MotionDetector(MotionParams(settle_s=3.0, early_s=0.5))
    for k in range(5):
        md.update(scene(k), k / 10)
    for k in range(5, 80):  # comes at 0.5 s, stands until 8.0 s
        md.update(_patched(k, (300, 500)), k / 10)
    if told:
        md.left(np.array([[500.0, 300.0, 560.0, 420.0]], np.float32), 8.0)
    stands = (100, 100)
    frames = [(k / 10, md.update(_patched(k, stands), k / 10)) for k in range(80, 130)]
    _left_and_stands(frames, 8.0, early=told)


@pytest.mark.parametrize("then", ["walks off", "ends", "missed", "moves on its place"])
def test_the_looker_tells_motion_where_a_still_track_stood_once_it_walks_off(then):
    """A person comes after the start and stands (a steady track: found plainly, 5 times
    or more, not moving), then is gone. When its track is clear of that place or ends,
    the looker tells motion (``left``): their place is quiet early_s after. A look that
    only missed the still track (not seen, not moving), or a track that moves but is
    still on its place (a walker partly there, whose motion must not be learnt away), is
    no leaving: the place stays motion for settle_s, as it does without a word."""
    from agent.objects.tracker import Track
    from agent.regions.looker import Looker

    looker = Looker(MotionParams(settle_s=3.0, early_s=0.5), PlannerParams(sweep_s=100.0))
    box = (500.0, 300.0, 560.0, 420.0)
    person = Detections(
        np.array([box], np.float32),
        np.array([0.9], np.float32),
        np.array([0], np.int32),
        ("person",),
    )

    def track(
        t: float, hits: int, *, seen: bool = True, moving: bool = False, dx: float = 0
    ) -> Track:
        at = (box[0] + dx, box[1], box[2] + dx, box[3])
        return Track(7, 0, "person", at, 0.9, seen, hits, 4.0, t, 0.9, moving)

    for k in range(40):  # the scene alone past settle_s: the person is no start-up unknown
        looker.look(scene(k), k / 10, (320, 320), 32)
    for k in range(40, 110):  # comes at 4.0 s, stands until 11.0 s
        looker.look(_patched(k, (300, 500)), k / 10, (320, 320), 32)
        looker.follow([track(k / 10, k - 39)], found=(person, [7]), t_frame=k / 10)
    place = []
    for k in range(110, 150):
        m = looker.look(scene(k), k / 10, (320, 320), 32).motion
        tracks = {
            "walks off": [track(k / 10, 71, seen=False, moving=True, dx=200.0)],
            "ends": [],
            "missed": [track(k / 10, 71, seen=False)],
            "moves on its place": [track(k / 10, 71, seen=False, moving=True, dx=30.0)],
        }[then]
        looker.follow(tracks, t_frame=k / 10)
        if _at(m, 490, 570, 290, 430):
            place.append(k / 10)
    assert place and place[0] == 11.0
    stays = then in ("missed", "moves on its place")
    assert (max(place) > 13.8) if stays else (max(place) < 11.55), place


def test_a_cut_forgets_where_the_background_was_unknown():
    """Someone seen at the start, then a cut (another view, a reset) within unknown_s:
    the new view's background is known everywhere, and someone who comes and stands at
    the old place is motion for settle_s, not early_s."""
    md = MotionDetector(MotionParams(settle_s=1.0, early_s=0.3, unknown_s=5.0))
    for k in range(5):
        md.update(_patched(k, (300, 500)), k / 10)
    md.unknown(np.array([[490.0, 290.0, 570.0, 430.0]], np.float32), 0.2)
    other = cv2.resize(cv2.imread(str(ROOT / "assets" / "zidane.jpg")), scene().shape[1::-1])
    assert md.update(other, 0.5).reset
    for k in range(6, 10):
        md.update(other, k / 10)
    stands = _patched(other, (300, 500))
    frames = [(k / 10, md.update(stands, k / 10)) for k in range(10, 30)]
    place = [t for t, m in frames if _at(m, 490, 570)]
    assert place and place[0] == 1.0 and max(place) > 1.85, place


def test_motion_under_a_mask_does_not_count():
    """The same square under a mask (fractions of the image) is no motion."""
    md = MotionDetector()
    md.set_masks([[(0.5, 0.2), (0.8, 0.2), (0.8, 0.5), (0.5, 0.5)]])  # 405..648 x 216..540
    for i in range(5):
        md.update(scene(i))
    img = scene(7)
    img[300:420, 500:560] = 20
    assert not md.update(img).any


def test_outside_is_what_moves_beyond_the_given_rectangles():
    """Two dark people side by side move as one blob; with a rectangle around the left
    one, what moves outside it is the right one alone (source pixels); with rectangles
    around both, nothing; a Motion without a mask gives the area back whole."""
    md = MotionDetector()
    for i in range(5):
        md.update(scene(i))
    img = scene(7)
    img[300:420, 500:540] = 20
    img[300:420, 544:584] = 20
    m = md.update(img)
    assert len(m.boxes) == 1
    blob = m.boxes[0]
    left = (460.0, 250.0, 545.0, 460.0)  # the left one with a margin
    (rest,) = m.outside(blob, [left])
    assert 535 <= rest[0] <= 552 and 578 <= rest[2] <= 620 and 270 <= rest[1] <= 310
    assert m.outside(blob, [left, (540.0, 250.0, 630.0, 460.0)]) == ()
    assert Motion((blob,), 0.01).outside(blob, [left]) == (blob,)


def test_most_of_the_frame_changing_resets_the_background():
    """The camera turned to another view: a reset, not motion everywhere, then quiet."""
    md = MotionDetector(MotionParams())
    for i in range(3):
        md.update(scene(i))
    other = cv2.imread(str(ROOT / "assets" / "zidane.jpg"))
    other = cv2.resize(other, (scene().shape[1], scene().shape[0]))
    m = md.update(other)
    assert m.reset and not m.any
    assert not md.update(other).any


def test_a_cut_from_a_view_with_saturated_parts_resets_the_background():
    """The close-up clip's cut from bus.jpg (a white bus, saturated: left out of the
    comparison with the background) to vtest.avi's grey road differs from the background
    over about half the frame, under ``reset_share``; from one frame to the next, over
    nearly all of it, as the objects stage's ``SceneWatch`` sees it: a reset, as any cut.
    (Not reset, the new view was motion for ``settle_s``: a near person's region over all
    of it, where a region magnified a kerb into a "person".)"""
    bus = cv2.imread(str(ROOT / "assets" / "bus.jpg"))[400:856, 0:810]
    cap = cv2.VideoCapture(str(ROOT / "assets" / "vtest.avi"))
    cap.set(cv2.CAP_PROP_POS_FRAMES, 180)
    ok, road = cap.read()
    cap.release()
    assert ok
    before = cv2.resize(bus, (960, 540), interpolation=cv2.INTER_AREA)
    after = cv2.resize(road[200:380, 448:768], (960, 540))
    rng = np.random.default_rng(0)

    def noisy(image: np.ndarray) -> np.ndarray:
        return np.clip(image + rng.normal(0, 3, image.shape), 0, 255).astype(np.uint8)

    md = MotionDetector(MotionParams())
    for k in range(5):
        assert not md.update(noisy(before), 0.1 * k).any
    cut = md.update(noisy(after), 0.5)
    assert cut.reset and not cut.any
    assert not md.update(noisy(after), 0.6).any  # the new view is the background
    # Nothing a person does: a walker's worth of change is motion, no reset.
    walker = noisy(after)
    walker[200:400, 400:480] = 30
    m = md.update(walker, 0.7)
    assert not m.reset and m.any


@pytest.mark.parametrize(
    ("box", "margin", "least", "wh", "expected"),
    [
        ((10, 100, 50, 200), 20, 0, (768, 576), (0.0, 80.0, 80.0, 220.0)),  # shifted inside
        ((700, 500, 760, 570), 10, 0, (768, 576), (688.0, 486.0, 768.0, 576.0)),
        ((300, 200, 340, 300), 0, 800, (768, 576), (0.0, 0.0, 768.0, 576.0)),  # shrunk to fit
        ((300, 200, 310, 210), 0, 40, (768, 576), (285.0, 185.0, 325.0, 225.0)),  # least side
    ],
)
def test_region_around_a_box_stays_in_the_image(box, margin, least, wh, expected):
    """A region around a box (a margin, a least side) is moved (and shrunk) to lie inside
    a non-square image."""
    assert around(box, margin, least, wh) == pytest.approx(expected)


def test_a_wide_moving_area_is_cut_into_magnified_pieces():
    """A group spread over 500 px, magnified 2x into a 320 input, is cut into pieces of at
    most 160 source px that cover it and overlap by the objects' height."""
    got = pieces((100, 200, 600, 320), 2.0, 320, 60)
    assert len(got) >= 4 and all(p[2] - p[0] <= 160 + 1e-6 for p in got)
    assert all(p[3] - p[1] == 120 for p in got)  # fits as it is
    assert min(p[0] for p in got) == 100 and max(p[2] for p in got) == 600
    xs = sorted(p[0] for p in got)
    assert all(b - a <= 160 - 60 + 1e-6 for a, b in itertools.pairwise(xs))
    assert pieces((0, 0, 100, 100), 2.0, 320, 60) == [(0, 0, 100, 100)]


@pytest.mark.parametrize(
    ("regions", "n"),
    [
        ([((0, 0, 100, 120), 1.2), ((10, 10, 100, 130), 1.2)], 1),  # mostly shared: merge
        ([((0, 0, 100, 120), 1.2), ((500, 300, 600, 420), 1.2)], 2),  # apart
        ([((0, 0, 100, 120), 1.2), ((90, 0, 190, 120), 1.2)], 2),  # would cost 1.9x one
        ([((0, 0, 100, 120), 2.0), ((10, 10, 100, 130), 1.0)], 2),  # would halve one's scale
    ],
)
def test_merge_only_while_cheap(regions, n):
    """Overlapping regions merge while the merged one costs no more model pixels than the
    two and keeps their magnification; apart ones stay apart."""
    wanted = [Wanted(r, s, "motion") for r, s in regions]
    assert len(merge(wanted, 1.05, 0.75, 320, 8, 0.6)) == n


def test_cap_keeps_the_most_urgent():
    """Over the cap, motion and moving tracks go first; the sweep waits."""
    wanted = [Wanted((i * 250.0, 0.0, i * 250.0 + 240, 240.0), 1.0, "sweep" if i == 0 else "motion")
              for i in range(3)]  # fmt: skip
    kept = merge(wanted, 1.05, 0.75, 320, 2)
    assert [w.why for w in kept] == ["motion", "motion"]


def test_planner_skips_a_still_frame_and_sweeps_slowly():
    """No motion, no track: one sweep square every sweep_s, nothing in between."""
    pl = RegionPlanner(PlannerParams(sweep_s=0.5))
    plans = [pl.plan(i / 10, (768, 576), ()) for i in range(20)]
    looked = [i for i, p in enumerate(plans) if p.regions]
    assert looked == [0, 5, 10, 15]
    assert {p.reasons for p in plans if p.regions} == {("sweep",)}


def test_every_other_sweep_pass_looks_between_the_last_passs_squares():
    """A small, still person a sweep square misses (its crop, not its scale: the model is
    a matter of context) gets another crop: the squares of every other pass are centred on
    the seams of the first pass's grid (``bench/farstill.py``: one more of 24 found)."""
    from agent.regions.planner import sweep_grid

    wh = (768, 576)
    first, between = sweep_grid(wh, 240.0), sweep_grid(wh, 240.0, between=True)
    assert len(first) == 12 and len(between) == 6
    assert [r[:2] for r in between[:3]] == [(88.0, 84.0), (264.0, 84.0), (440.0, 84.0)]
    assert all(0 <= x1 < x2 <= 768 and 0 <= y1 < y2 <= 576 for x1, y1, x2, y2 in between)
    assert sweep_grid((200, 200), 240.0, between=True) == [(0.0, 0.0, 200.0, 200.0)]
    pl = RegionPlanner(PlannerParams(sweep_s=0.1))  # a square a frame or two
    plans = [pl.plan(i / 10, wh, ()) for i in range(80)]
    squares = [p.regions[0] for p in plans if p.regions][: 12 + 6 + 12]
    assert squares == [*first, *between, *first]


def test_a_busy_scene_puts_the_sweep_off_a_while():
    """With a moving object on every frame, a due sweep square waits up to sweep_wait_s
    for a quiet frame, then is looked at anyway."""
    pl = RegionPlanner(PlannerParams(sweep_s=0.5, sweep_wait_s=1.0))
    moving = [(1, TrackHint((100, 100, 140, 200), True, 0.0))]
    plans = [pl.plan(i / 10, (768, 576), (), moving) for i in range(40)]
    swept = [i for i, p in enumerate(plans) if any("sweep" in w for w in p.reasons)]
    assert swept == [0, 15, 30]


def test_planner_rechecks_still_objects_and_follows_moving_ones():
    """A moving track is looked at every frame; a steady still one every recheck_s, its
    last look standing in between (``Plan.held``)."""
    pl = RegionPlanner(PlannerParams(recheck_s=1.0, sweep_s=100.0))
    pl.plan(0.0, (768, 576), ())  # the first sweep
    moving = [(1, TrackHint((100, 100, 140, 200), True, 0.0))]
    assert all(pl.plan(0.1 * k, (768, 576), (), moving).regions for k in range(1, 6))
    still = [(2, TrackHint((500, 300, 540, 400), False, 0.5, steady=True))]
    plans = {k: pl.plan(0.1 * k, (768, 576), (), still) for k in range(6, 40)}
    looked = [k for k, plan in plans.items() if plan.regions]
    assert looked == [15, 25, 35]
    assert all(plan.held == (() if k in looked else (2,)) for k, plan in plans.items())


def test_a_steady_walker_is_looked_at_every_other_frame_and_moved_on_between():
    """A steady walker (found plainly over several looks) last seen by its own region's
    look less than predict_s ago stands in (``Plan.held``) and the motion it makes calls no
    region of its own; the frame after, its last sighting is that stand-in, so it is looked
    at: every other frame at most, at any frame rate. A fifth of the frame tall or more,
    in motion that runs on past it, about to leave the frame, not steady, after a scene
    cut, or with predict_s 0: looked at every frame."""
    wh = (768, 576)

    def walker(k: int, x0: float = 100.0, tall: float = 100.0, fps: float = 10.0,
               **kw: object) -> TrackHint:  # fmt: skip
        # Seen at the frame before k, walking right at 50 px/s.
        x = x0 + 50.0 * (k - 1) / fps
        return TrackHint((x, 200.0, x + 0.4 * tall, 200.0 + tall), True, (k - 1) / fps,
                         steady=True, velocity=(50.0, 0.0), **kw)  # type: ignore[arg-type]  # fmt: skip

    def fresh() -> RegionPlanner:
        planner = RegionPlanner(PlannerParams(sweep_s=100.0))
        planner.plan(0.0, wh, ())  # the first sweep
        return planner

    def blob(h: TrackHint, t: float) -> list[tuple[float, float, float, float]]:
        dx = 50.0 * (t - h.last_seen_t)
        return [(h.xyxy[0] + dx, h.xyxy[1], h.xyxy[2] + dx, h.xyxy[3])]

    for fps in (10.0, 90.0):  # a camera, and a recording read as fast as it decodes
        pl = fresh()
        plans = []
        for k in range(1, 9):
            h = walker(k, fps=fps)
            plans.append(pl.plan(k / fps, wh, blob(h, k / fps), [(1, h)]))
        held = [bool(p.held) for p in plans]
        assert held == [False, True] * 4
        assert all(p.held == (1,) and not p.regions for p, x in zip(plans, held, strict=True) if x)
        assert all(p.regions and not p.held for p, x in zip(plans, held, strict=True) if not x)
    # Planned before the stand-in's frame is tracked (the tracks lag a frame): it stands in
    # again from the same look of its own, but never longer than predict_s after it.
    lag = fresh()
    h = walker(1)
    assert not lag.plan(0.1, wh, (), [(1, h)]).held  # its own look at 0.1
    seen = TrackHint(walker(2).xyxy, True, 0.1, steady=True, velocity=(50.0, 0.0))
    assert lag.plan(0.2, wh, (), [(1, seen)]).held == (1,)
    assert not lag.plan(0.3, wh, (), [(1, seen)]).held  # 0.2 s after its look: looked at

    def ever_held(pl: RegionPlanner, hint: Callable[[int], TrackHint], grow: float = 0.0) -> bool:
        """Whether the walker ``hint(k)`` stands in on any of 8 frames, its blob grown by
        ``grow`` each side (motion that runs on past it)."""
        for k in range(1, 9):
            h = hint(k)
            x1, y1, x2, y2 = blob(h, k / 10)[0]
            if pl.plan(k / 10, wh, [(x1 - grow, y1 - grow, x2 + grow, y2 + grow)], [(1, h)]).held:
                return True
        return False

    assert ever_held(fresh(), walker)  # the check itself: a lone walker does stand in
    # A fifth of the frame tall or more (near: a porch camera's whole job, and a box as
    # big as the coarse look finds plainly): looked at every frame.
    assert not ever_held(fresh(), lambda k: walker(k, tall=120.0))
    assert not ever_held(fresh(), lambda k: walker(k, tall=200.0))
    # Its motion runs on past its region (a piece of someone near, or someone beside it):
    # not all of it is its own, so it is looked at.
    assert not ever_held(fresh(), walker, grow=60.0)
    # About to walk out of the frame: its moved-on box would stick out, so it is looked at.
    assert not ever_held(fresh(), lambda k: walker(k, x0=727.0))
    # Not steady, or a scene cut: looked at.
    other = fresh()
    for k in range(1, 9):
        h = walker(k)
        unsteady = TrackHint(h.xyxy, True, h.last_seen_t, velocity=h.velocity)
        assert not other.plan(k / 10, wh, (), [(1, unsteady)]).held
        assert not other.plan(k / 10 + 0.05, wh, (), [(1, h)], cut=True).held
    # predict_s 0: every frame.
    every = RegionPlanner(PlannerParams(sweep_s=100.0, predict_s=0.0))
    every.plan(0.0, wh, ())
    assert not any(every.plan(k / 10, wh, (), [(1, walker(k))]).held for k in range(1, 9))


def test_a_walker_inside_a_neighbours_region_is_that_looks_to_find():
    """A steady walker whose box lies inside a region looked at anyway (someone new moving
    beside them) does not stand in: the look finds them, and a moved-on box beside the
    one found would be two boxes of one person."""
    wh = (768, 576)
    h = TrackHint((300.0, 200.0, 340.0, 300.0), True, 0.05, steady=True, velocity=(50.0, 0.0))
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, wh, ())
    pl.plan(0.05, wh, (), [(1, h)])  # looked at, and seen there
    alone = pl.plan(0.1, wh, [(302.0, 200.0, 342.0, 300.0)], [(1, h)])
    assert alone.held == (1,) and not alone.regions  # its own motion calls no region
    pl2 = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl2.plan(0.0, wh, ())
    pl2.plan(0.05, wh, (), [(1, h)])
    newcomer = (290.0, 190.0, 420.0, 310.0)  # someone passing close behind, a blob with them
    beside = pl2.plan(0.1, wh, [newcomer], [(1, h)])
    assert beside.regions and beside.held == ()
    assert any(r[0] <= 305.0 and r[2] >= 345.0 for r in beside.regions)
    # Someone moving further off: their region leaves the walker out, who stands in.
    pl3 = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl3.plan(0.0, wh, ())
    pl3.plan(0.05, wh, (), [(1, h)])
    apart = pl3.plan(
        0.1, wh, [(302.0, 200.0, 342.0, 300.0), (450.0, 200.0, 490.0, 300.0)], [(1, h)]
    )
    assert apart.held == (1,) and apart.regions
    assert not any(r[0] <= 305.0 and r[2] >= 345.0 for r in apart.regions)


def test_a_still_object_is_looked_at_where_it_cannot_stand_in():
    """A still track stands in for its look only while steady (its last look found it
    plainly), with no motion in its box and no scene cut: else it is looked at, never
    left out of the frame."""
    wh = (768, 576)
    box = (500.0, 300.0, 540.0, 400.0)
    pl = RegionPlanner(PlannerParams(recheck_s=1.0, sweep_s=100.0))
    pl.plan(0.0, wh, ())  # the first sweep
    steady = [(2, TrackHint(box, False, 0.0, steady=True))]
    # Seen at 0.0 s: it stands in until 1.0 s.
    assert pl.plan(0.1, wh, (), steady).held == (2,) == pl.plan(0.2, wh, (), steady).held
    # Motion in its box (an arm, someone passing in front): looked at, not held.
    plan = pl.plan(0.3, wh, [(530.0, 350.0, 560.0, 380.0)], steady)
    assert plan.held == () and any(r[0] <= box[0] and r[2] >= box[2] for r in plan.regions)
    assert pl.plan(0.4, wh, [(600.0, 100.0, 640.0, 150.0)], steady).held == (2,)  # elsewhere
    # A scene cut: nothing stands in for the new view.
    assert pl.plan(0.5, wh, (), steady, cut=True).held == ()
    # Not steady (missed by its last look, or found at a low score): looked at each frame.
    unsteady = [(2, TrackHint(box, False, 0.0, seen=False))]
    plans = [pl.plan(0.6 + 0.1 * k, wh, (), unsteady) for k in range(5)]
    assert all(p.regions and p.held == () for p in plans)
    # recheck_s 0 (every frame): nothing ever stands in.
    every = RegionPlanner(PlannerParams(sweep_s=100.0, recheck_s=0.0))
    every.plan(0.0, wh, ())
    assert all(every.plan(0.1 * k, wh, (), steady).regions for k in range(1, 10))


def test_small_people_in_a_tall_blob_are_magnified():
    """A blob of people at different depths is taller than any of them: the tracks in it
    say they are 40 px tall, so it is looked at magnified 2x (80 model pixels for a 40 px
    person; 2x is the most), in pieces that each fit the input."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, (768, 576), ())  # the first sweep
    people = [(i, TrackHint((300 + 50 * i, 150 + 40 * i, 320 + 50 * i, 190 + 40 * i), False, 0.0))
              for i in range(4)]  # fmt: skip
    plan = pl.plan(0.1, (768, 576), [(290.0, 140.0, 500.0, 340.0)], people, input_px=320)
    assert len(plan.regions) >= 2 and all(s == pytest.approx(2.0) for s in plan.scales)
    for (x1, y1, x2, y2), s in zip(plan.regions, plan.scales, strict=True):
        assert max(x2 - x1, y2 - y1) * s <= 320 + 1e-6
    assert min(r[0] for r in plan.regions) <= 290 and max(r[2] for r in plan.regions) >= 500
    assert min(r[1] for r in plan.regions) <= 140 and max(r[3] for r in plan.regions) >= 340


def test_a_big_object_gets_one_region_around_it():
    """A near person 300 px tall (0.42 of the frame: big) is not cut into pieces: one
    region around it, shrunk so the person stands ``near_px`` (120) model pixels tall;
    and a coarse look at once (not before ``big_s``)."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    assert pl.plan(0.0, (1280, 720), ()).coarse  # the first frame's
    plan = pl.plan(0.1, (1280, 720), [(500.0, 200.0, 620.0, 500.0)], input_px=320)
    assert not plan.coarse  # the last one is 0.1 s old: not yet
    plan = pl.plan(0.3, (1280, 720), [(500.0, 200.0, 620.0, 500.0)], input_px=320)
    assert plan.coarse
    assert len(plan.regions) == 1 and plan.scales[0] == pytest.approx(120 / 300)
    x1, y1, x2, y2 = plan.regions[0]
    assert x1 < 500 and x2 > 620 and y1 < 200 and y2 > 500


def test_a_small_seed_in_a_near_persons_blob_does_not_size_it():
    """Someone near entering at the frame's edge: a look a few frames before found only a
    piece of them (a head, scoring too low for a track: a seed, 40 px tall). Their blob,
    345 px tall, is still looked at whole, shrunk: where no track is, a seed far smaller
    than the blob is a piece of what moves there, not the size of it (the close-up clip
    with the live lag of 2 frames: cut into three stacked pieces magnified 2x, each found
    as a "person" 0.26 of the frame tall). Tracked people of any size still size a blob
    (people at different depths: ``test_small_people_in_a_tall_blob_are_magnified``), and
    so does a seed as tall as a fair share of it."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, (960, 540), ())
    blob = (855.0, 150.0, 960.0, 495.0)
    piece = [(-1, TrackHint((935.0, 223.0, 960.0, 263.0), False, -math.inf))]
    plan = pl.plan(0.1, (960, 540), [blob], piece, input_px=320)
    assert len(plan.regions) == 1 and plan.scales[0] < 1.0
    x1, y1, x2, y2 = plan.regions[0]
    assert x1 <= 855 and y1 <= 150 and x2 >= 960 and y2 >= 495
    # A seed a fair share of the blob's height still says how tall what moves there is.
    person = [(-1, TrackHint((900.0, 200.0, 960.0, 330.0), False, -math.inf))]
    plan = pl.plan(0.2, (960, 540), [blob], person, input_px=320)
    assert plan.scales and all(s > 0.5 for s in plan.scales)
    assert _object_height(blob, piece) == pytest.approx(345.0)
    # With a track in the blob, its seeds count as they always did: a crowd at different
    # depths (two 40 px people, one of them a seed, and one 300 px) is sized by its median.
    crowd = [
        (1, TrackHint((900.0, 200.0, 930.0, 240.0), True, 0.0)),
        (2, TrackHint((860.0, 160.0, 960.0, 460.0), True, 0.0)),
        (-1, TrackHint((920.0, 300.0, 950.0, 340.0), False, -math.inf)),
    ]
    assert _object_height(blob, crowd) == pytest.approx(40.0)


def test_motion_of_a_tracked_walker_is_looked_at_once():
    """A walker's blob lies inside the region around its track: one region, not two; a
    blob elsewhere gets its own."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, (768, 576), ())
    walker = [(1, TrackHint((300.0, 200.0, 340.0, 300.0), True, 0.0))]
    plan = pl.plan(0.1, (768, 576), [(302.0, 205.0, 338.0, 298.0)], walker, input_px=320)
    assert plan.reasons == ("track",)
    plan = pl.plan(0.2, (768, 576), [(600.0, 400.0, 630.0, 460.0)], walker, input_px=320)
    assert sorted(plan.reasons) == ["motion", "track"]


def test_of_a_blob_partly_tracked_only_the_rest_is_looked_at():
    """A walker and someone new a little way off move as one blob: the walker's region, and
    a motion region around the newcomer's side only (grown a little toward the walker),
    not the whole blob again; a limb poking out of the walker's region adds nothing."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, (768, 576), ())
    walker = [(1, TrackHint((300.0, 200.0, 340.0, 300.0), True, 0.0))]
    blob = (290.0, 195.0, 520.0, 305.0)

    def newcomer(area, rects):  # what moves outside the walker's region
        return [(478.0, 200.0, 518.0, 300.0)]

    whole = pl.plan(0.1, (768, 576), [blob], walker, input_px=320)
    rest = pl.plan(0.2, (768, 576), [blob], walker, input_px=320, outside=newcomer)
    assert "motion" in "+".join(rest.reasons)

    def holds(plan, box):
        return any(
            r[0] <= box[0] and r[1] <= box[1] and box[2] <= r[2] and box[3] <= r[3]
            for r in plan.regions
        )

    assert holds(rest, (478.0, 200.0, 518.0, 300.0)) and holds(rest, walker[0][1].xyxy)

    def cost(plan):
        pairs = zip(plan.regions, plan.scales, strict=True)
        return sum((r[2] - r[0]) * (r[3] - r[1]) * s * s for r, s in pairs)

    assert cost(rest) < 0.8 * cost(whole)

    def limb(area, rects):  # an arm: 10 px tall
        return [(340.0, 240.0, 352.0, 250.0)]

    assert pl.plan(0.3, (768, 576), [blob], walker, input_px=320, outside=limb).reasons == (
        "track",
    )


@pytest.mark.parametrize("seed", range(30))
def test_pack_places_every_region_once_inside_and_apart(seed):
    """Random regions at random scales: each is on exactly one sheet, inside it, at its
    scale (or shrunk to fit), and no two overlap (a gutter lies between them)."""
    rng = np.random.default_rng(seed)
    regions, scales = [], []
    for _ in range(int(rng.integers(1, 12))):
        x, y = rng.uniform(0, 600), rng.uniform(0, 400)
        w, h = rng.uniform(20, 300), rng.uniform(20, 300)
        regions.append((x, y, min(768.0, x + w), min(576.0, y + h)))
        scales.append(float(rng.uniform(0.5, 2.0)))
    sheets = pack(regions, scales, (320, 320), (768, 576), gutter=6)
    placed = [p for sh in sheets for p in sh.placements]
    assert len(placed) == len(regions)
    for sh in sheets:
        for p in sh.placements:
            assert p.x >= 0 and p.x + p.w <= 320 and p.y >= 0 and p.y + p.h <= 320
        for a, b in itertools.combinations(sh.placements, 2):
            apart_x = a.x + a.w + 6 <= b.x or b.x + b.w + 6 <= a.x
            apart_y = a.y + a.h + 6 <= b.y or b.y + b.h + 6 <= a.y
            assert apart_x or apart_y
    for p in placed:
        sx, sy = p.scale_xy
        assert sx == pytest.approx(sy, rel=0.05)


@pytest.mark.parametrize(
    ("input_hw", "image_wh"), [((480, 640), (1920, 1080)), ((320, 320), (120, 90))]
)
def test_planned_regions_always_pack(input_hw, image_wh):
    """A non-square model input and a frame smaller than a region: every planned region
    lies in the frame and is placed on a sheet of the model's input size."""
    pl = RegionPlanner(PlannerParams(sweep_s=0.1))
    w, h = image_wh
    tracks = [(1, TrackHint((0.1 * w, 0.2 * h, 0.3 * w, 0.9 * h), True, 0.0))]
    for k in range(5):
        plan = pl.plan(0.1 * k, image_wh, [(0.5 * w, 0.1 * h, 0.9 * w, 0.6 * h)], tracks,
                       input_px=min(input_hw))  # fmt: skip
        assert plan.regions
        for x1, y1, x2, y2 in plan.regions:
            assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
        sheets = pack_fewest(plan.regions, plan.scales, input_hw, image_wh)
        assert sum(len(s.placements) for s in sheets) == len(plan.regions)
        for sheet in sheets:
            assert sheet.hw == input_hw
            assert compose(np.zeros((h, w, 3), np.uint8), sheet).shape == (*input_hw, 3)


def test_small_regions_share_one_sheet():
    """Four people's regions, 100 x 150 model pixels each, fit one 320 input, not four."""
    regions = [(100.0 * i, 0.0, 100.0 * i + 50, 75.0) for i in range(4)]
    sheets = pack(regions, [2.0] * 4, (320, 320), (768, 576))
    assert len(sheets) == 1 and len(sheets[0].placements) == 4


def test_a_little_less_magnification_saves_a_model_run():
    """Four regions that just miss fitting one input (2 x 160 px and a gutter > 320) go on
    one input 8 % smaller, not on two; regions that fit one input are left as they are."""
    regions = [(200.0 * i, 0.0, 200.0 * i + 80, 80.0) for i in range(4)]
    assert len(pack(regions, [2.0] * 4, (320, 320), (768, 576))) > 1
    (sheet,) = pack_fewest(regions, [2.0] * 4, (320, 320), (768, 576))
    assert [p.w for p in sheet.placements] == [147] * 4
    fit = [(0.0, 0.0, 70.0, 70.0), (200.0, 0.0, 270.0, 70.0)]
    (sheet,) = pack_fewest(fit, [2.0] * 2, (320, 320), (768, 576))
    assert [p.w for p in sheet.placements] == [140, 140]


@pytest.mark.parametrize("seed", range(20))
def test_trim_cuts_a_sheet_to_its_regions_and_a_border(seed):
    """A trimmed sheet: sides multiples of the stride, no larger than the whole sheet,
    holding every region where it was (moved by the border) with grey around it."""
    rng = np.random.default_rng(seed)
    regions = []
    for _ in range(int(rng.integers(1, 6))):
        x, y = rng.uniform(0, 600), rng.uniform(0, 400)
        regions.append((x, y, x + rng.uniform(20, 160), y + rng.uniform(20, 170)))
    for sheet in pack(regions, [1.0] * len(regions), (320, 320), (768, 576)):
        cut = trim(sheet, 32)
        h, w = cut.hw
        assert h % 32 == 0 and w % 32 == 0 and h <= 320 and w <= 320
        assert [p.region for p in cut.placements] == [p.region for p in sheet.placements]
        dx = {q.x - p.x for p, q in zip(sheet.placements, cut.placements, strict=True)}
        dy = {q.y - p.y for p, q in zip(sheet.placements, cut.placements, strict=True)}
        assert len(dx) == len(dy) == 1 and 0 <= dx.pop() <= BORDER and 0 <= dy.pop() <= BORDER
        right = max(p.x + p.w for p in cut.placements)
        bottom = max(p.y + p.h for p in cut.placements)
        assert right <= w and bottom <= h
        # As small as the stride allows: a border fits, or the sheet is as large as it was.
        assert w - 32 < right + BORDER or w == 320
        assert h - 32 < bottom + BORDER or h == 320


def test_one_small_region_gets_a_small_sheet():
    """One person, 40 x 80 source pixels at 1x: a 96 x 64 sheet instead of 320 x 320, the
    person 8 pixels in from its corner."""
    (sheet,) = pack([(100.0, 100.0, 140.0, 180.0)], [1.0], (320, 320), (768, 576))
    cut = trim(sheet, 32)
    assert cut.hw == (96, 64)
    (p,) = cut.placements
    assert (p.x, p.y, p.w, p.h) == (8, 8, 40, 80)
    image = np.zeros((576, 768, 3), np.uint8)
    image[100:180, 100:140] = 200
    canvas = compose(image, cut)
    assert canvas.shape == (96, 64, 3)
    assert (canvas[8:88, 8:48] == 200).all() and (canvas[:8] == 114).all()


def test_unpack_maps_boxes_back_to_their_region():
    """A box on a sheet goes back to frame pixels, clipped to its region, and remembers the
    region; a box whose centre lies in a gutter belongs to no region."""
    sheets = pack([(10.0, 20.0, 60.0, 95.0), (300.0, 100.0, 350.0, 175.0)], [2.0, 2.0],
                  (320, 320), (768, 576), gutter=6)  # fmt: skip
    (sheet,) = sheets
    a, b = sorted(sheet.placements, key=lambda p: p.region[0])
    on_sheet = dets(
        (a.x + 20, a.y + 10, a.x + 60, a.y + 140, 0.9),  # inside a: (10, 5)-(30, 70)
        (b.x - 20, b.y + 10, b.x + 40, b.y + 100, 0.8),  # centre in b, sticks out left
        (a.x + a.w + 1, 0, a.x + a.w + 5, 10, 0.7),  # in the gutter
    )
    out = unpack(on_sheet, sheet)
    assert out.looked == 2
    assert out.dets.xyxy.tolist() == [[20, 25, 40, 90], [300, 105, 320, 150]]
    assert out.regions.tolist() == [list(a.region), list(b.region)]
    assert out.dets.score.tolist() == pytest.approx([0.9, 0.8])


def test_compose_draws_each_region_at_its_place():
    """The sheet holds each region's pixels, resized, and grey elsewhere."""
    image = np.zeros((576, 768, 3), np.uint8)
    image[20:95, 10:60] = 200
    sheet = Sheet(
        (320, 320), pack([(10.0, 20.0, 60.0, 95.0)], [2.0], (320, 320), (768, 576))[0].placements
    )
    canvas = compose(image, sheet)
    (p,) = sheet.placements
    assert (canvas[p.y : p.y + p.h, p.x : p.x + p.w] == 200).all()
    assert (canvas[p.y + p.h + 1 :, :] == 114).all()


@pytest.mark.parametrize(
    ("src_hw", "wh"),
    [((864, 700), (97, 120)), ((1080, 1920), (711, 400)), ((577, 769), (160, 120)),
     ((301, 199), (99, 150)), ((300, 200), (100, 150)), ((200, 150), (120, 160))],
)  # fmt: skip
def test_a_shrunk_region_lands_where_an_area_resize_puts_it(
    src_hw: tuple[int, int], wh: tuple[int, int]
) -> None:
    """``resized`` (halved by area, then linear) gives the size asked for, and on smooth
    gradients the pixels of OpenCV's area resize (within one level): nothing is shifted by
    the rows and columns a halving leaves out, even at odd sizes."""
    h, w = src_hw
    yy, xx = np.mgrid[0:h, 0:w]
    image = np.stack([xx * 255 / w, yy * 255 / h, np.zeros_like(xx)], -1).astype(np.uint8)
    out = resized(image, *wh)
    assert out.shape == (wh[1], wh[0], 3)
    want = cv2.resize(image, wh, interpolation=cv2.INTER_AREA)
    if 2 * wh[0] > w:  # less than 2x smaller: a plain linear resize, as before
        want = cv2.resize(image, wh, interpolation=cv2.INTER_LINEAR)
    assert np.abs(out.astype(int) - want.astype(int)).max() <= 1


def test_a_resized_region_has_the_size_asked_for_at_every_small_size():
    """Every source up to 24 x 24 pixels to every size up to it: exactly that size (a
    halving's left-out row or column never leaves the sheet a pixel short or long)."""
    for sw, sh in itertools.product(range(1, 25), range(1, 25)):
        image = np.zeros((sh, sw, 3), np.uint8)
        for w, h in itertools.product(range(1, sw + 1), range(1, sh + 1)):
            assert resized(image, w, h).shape == (h, w, 3), (sw, sh, w, h)


def test_a_region_shrunk_5x_is_not_aliased():
    """One-pixel stripes shrunk 5x come out an even grey; a linear resize alone samples
    single stripes there and gives black and white bands."""
    image = np.zeros((400, 400, 3), np.uint8)
    image[:, ::2] = 255
    out = resized(image, 80, 80)
    assert np.abs(out.astype(int) - 127).max() <= 2
    aliased = cv2.resize(image, (80, 80), interpolation=cv2.INTER_LINEAR)
    assert np.abs(aliased.astype(int) - 127).max() > 100


def dets(*boxes: tuple[float, ...]) -> Detections:
    n = len(boxes)
    return Detections(
        np.array([b[:4] for b in boxes], np.float32).reshape(-1, 4),
        np.array([b[4] for b in boxes], np.float32),
        np.zeros(n, np.int32),
        ("person",) * n,
    )


def test_shift_moves_boxes_into_frame_pixels():
    """A crop's detections are shifted by the crop's corner."""
    assert shift(dets((1, 2, 3, 4, 0.9)), 10, 20).xyxy.tolist() == [[11, 22, 13, 24]]


def test_one_object_seen_by_two_regions_is_one_detection():
    """Overlapping regions find the same person: NMS keeps one."""
    a = ((0, 0, 240, 240), dets((100, 50, 140, 150, 0.9)))
    b = ((100, 0, 340, 240), dets((0, 50, 40, 150, 0.8)))  # the same person, region b's pixels
    out = merge_regions([a, b], (768, 576), iou_threshold=0.45, max_det=100)
    assert len(out) == 1 and out.score.tolist() == pytest.approx([0.9])


def test_a_box_cut_by_a_region_edge_gives_way_to_the_whole_one():
    """The half of a person at a region's inner edge is dropped where another region saw all."""
    a = ((0, 0, 240, 240), dets((200, 50, 240, 150, 0.95)))  # cut at x=240 (inner edge)
    b = ((150, 0, 390, 240), dets((50, 50, 130, 150, 0.7)))  # whole: 200..280 in the frame
    out = merge_regions([a, b], (768, 576), iou_threshold=0.45, max_det=100)
    assert out.xyxy.tolist() == [[200, 50, 280, 150]]


def test_regions_of_one_frame_on_two_sheets_merge_as_one():
    """What two sheets found (a frame's regions split over two model runs) merges as if
    it came from one: the half of a person at one region's edge gives way to the whole."""
    a = ((0, 0, 240, 240), dets((200, 50, 240, 150, 0.95)))
    b = ((150, 0, 390, 240), dets((50, 50, 130, 150, 0.7)))
    out, _ = merge_found(
        [found_in([a]), found_in([b])], (768, 576), iou_threshold=0.45, max_det=100
    )
    assert out.xyxy.tolist() == [[200, 50, 280, 150]]
    # One region alone: its boxes stand as they are, cut or not.
    alone, _ = merge_found([found_in([a])], (768, 576), iou_threshold=0.45, max_det=100)
    assert alone.xyxy.tolist() == [[200, 50, 240, 150]]


def test_a_cut_box_nobody_saw_whole_is_kept():
    """A person at a region edge that no other region covers is still reported."""
    a = ((0, 0, 240, 240), dets((200, 50, 240, 150, 0.9)))
    b = ((500, 300, 740, 540), dets())
    out = merge_regions([a, b], (768, 576), iou_threshold=0.45, max_det=100)
    assert len(out) == 1


def test_drop_pieces_keeps_what_no_larger_look_holds_whole():
    """A box mostly inside a larger box of a larger look is a piece of that object and is
    dropped; boxes of the same look, boxes half outside and boxes that no larger look saw
    are kept. Region pixels: the small tile's boxes are shifted by its corner."""
    small = (100, 100, 260, 260)  # a 160 px tile
    large = (0, 0, 320, 320)  # a 320 px look holding the whole person
    person = (110.0, 90.0, 170.0, 250.0, 0.8)  # image pixels
    head = (12.0, 0.0, 58.0, 40.0, 0.7)  # tile pixels: (112, 100)-(158, 140), inside
    half_out = (50.0, 0.0, 130.0, 40.0, 0.6)  # (150, 100)-(230, 140): 25 % inside
    parts = [(small, dets(head, half_out)), (large, dets(person))]
    kept = drop_pieces(parts)
    assert kept[0][1].xyxy.tolist() == [[50, 0, 130, 40]]
    assert kept[1][1].xyxy.tolist() == [list(person[:4])]
    # Inside a larger box of its own look: the model's decision, kept.
    same_look = [(large, dets(person, (120.0, 100.0, 160.0, 140.0, 0.5)))]
    assert len(drop_pieces(same_look)[0][1]) == 2
    # Another class holds it: kept.
    other = dets(person)
    other = Detections(other.xyxy, other.score, np.ones(1, np.int32), ("car",))
    assert len(drop_pieces([(small, dets(head)), (large, other)])[0][1]) == 1


@pytest.mark.parametrize(
    ("wh", "sides"),
    [
        ((768, 576), [160, 320, 768]),
        ((2304, 1728), [160, 320, 640, 1280, 2304]),
        ((100, 80), [80, 100]),
    ],
)
def test_plan_tiles_doubles_until_the_whole_image(wh, sides):
    """Tile sides double while they fit (the last entry is the whole image); each scale's
    tiles cover the image and overlap, so an object up to the overlap lies whole in one."""
    plan = plan_tiles(wh, 160, 0.2)
    got = sorted({round(max(x2 - x1, y2 - y1)) for x1, y1, x2, y2 in plan})
    assert got == sides
    assert plan[-1] == (0.0, 0.0, float(wh[0]), float(wh[1]))
    for side in sides[:-1]:
        level = [t for t in plan if round(t[2] - t[0]) == side]
        assert min(t[0] for t in level) == 0 and max(t[2] for t in level) == wh[0]
        assert min(t[1] for t in level) == 0 and max(t[3] for t in level) == wh[1]
        xs = sorted({t[0] for t in level})
        assert all(b - a <= 0.8 * side + 1e-6 for a, b in itertools.pairwise(xs))


def test_a_piece_of_a_near_person_gives_way_to_the_coarse_looks_whole_person():
    """Issue 38: a region's box on a near person's head or arm, lying inside the person's
    box of the coarse look, is a piece of them: one box per person. A smaller person of
    their own beside them (not inside) stays."""
    whole = replace(found_in([((0, 0, 960, 540), dets((300, 40, 600, 540, 0.8)))]), coarse=True)
    fine = found_in(
        [
            ((350, 30, 550, 230), dets((50, 20, 150, 150, 0.7))),  # the head, magnified
            ((650, 200, 760, 400), dets((20, 20, 90, 190, 0.6))),  # someone beside
        ]
    )
    out, _ = merge_found([fine, whole], (960, 540), iou_threshold=0.45, max_det=100)
    assert sorted(out.xyxy[:, 0].tolist()) == [300, 670]
    # Without the coarse look, the head box is all anyone saw of them: kept.
    out, _ = merge_found([fine], (960, 540), iou_threshold=0.45, max_det=100)
    assert sorted(out.xyxy[:, 0].tolist()) == [400, 670]


def test_the_coarse_look_comes_every_sweep_s_and_never_waits_for_a_quiet_frame():
    """The whole frame is looked at on the first frame and then every ``sweep_s`` while
    someone ``plain`` of the frame tall is in view, busy frames included (a big person
    must not wait)."""
    pl = RegionPlanner(PlannerParams(sweep_s=0.5))
    busy = [(100.0, 100.0, 140.0, 200.0)]  # someone small walking all along
    near = [(1, TrackHint((400.0, 100.0, 500.0, 400.0), True, 0.0))]  # 0.56 of the frame
    coarse = [t for t in np.arange(0, 3.0, 0.1) if pl.plan(float(t), (960, 540), busy, near).coarse]
    assert coarse[0] == 0.0 and len(coarse) == 6
    assert np.diff(coarse) == pytest.approx([0.5] * 5, abs=0.11)


@pytest.mark.parametrize("origin", [0.0, 1740.575504371, 86400.3])
def test_a_look_due_on_a_frame_comes_on_that_frame_on_any_clocks_origin(origin: float):
    """A recording read losslessly goes by index / fps: from 0 in ``edge-agent track``, from
    its first frame's capture time in ``run``. A coarse look or sweep square due exactly on
    a frame (a period after the last: here the coarse look after a cut on each of the first
    40 frames) comes on that frame on either clock, since a span a hair under a period has
    lasted it (``HAIR_S``). Before, 4.6 - 3.6 < 1.0 put one on the next frame, and track's
    boxes drifted from run's from there (14 of these 120 phases and origins)."""
    busy = [(100.0, 100.0, 140.0, 200.0)]  # the sweep waits for no quiet frame: 3 s
    near = [(1, TrackHint((400.0, 100.0, 500.0, 400.0), True, origin))]  # 0.56 tall
    for k in range(1, 40):
        pl = RegionPlanner(PlannerParams(sweep_s=1.0, sweep_wait_s=2.0))
        plans = [pl.plan(origin + i / 10, (960, 540), busy, near, cut=i == k) for i in range(80)]
        coarse = [i for i, p in enumerate(plans) if p.coarse]
        assert coarse == sorted({0, *range(10, k, 10), *range(k, 80, 10)}), (origin, k)
        assert [i for i, p in enumerate(plans) if "sweep" in p.reasons] == [0, 30, 60]


@pytest.mark.parametrize("origin", [0.0, 1740.575504371, 86400.3])
def test_a_span_a_hair_under_its_period_has_lasted_it_and_a_frame_under_has_not(origin: float):
    """``lasted``: ten tenths of scene time have lasted 1.0 s on any clock's origin (their
    difference rounds either side of it), nine have not, nor has 1.0 s less a microsecond
    and more."""
    for i in range(100):
        a, b = origin + i / 10, origin + (i + 10) / 10
        assert lasted(b - a, 1.0), (origin, i, b - a)
        assert not lasted(origin + (i + 9) / 10 - a, 1.0), (origin, i)
    assert not lasted(1.0 - 2e-6, 1.0)


def test_with_only_small_things_in_view_the_coarse_look_comes_quiet_times_less_often():
    """Small walkers (under ``plain`` of the frame tall) or an empty scene: the coarse look
    finds nothing there the regions do not, so it comes every ``quiet`` x ``sweep_s``; once
    someone that tall is tracked, at once (the last look is older than ``sweep_s``)."""
    pl = RegionPlanner(PlannerParams(sweep_s=0.5, quiet=4.0))
    busy = [(100.0, 100.0, 140.0, 200.0)]
    small = [(1, TrackHint((100.0, 100.0, 140.0, 200.0), True, 0.0))]  # 0.19 of the frame
    coarse = [
        t for t in np.arange(0, 4.5, 0.1) if pl.plan(float(t), (960, 540), busy, small).coarse
    ]
    assert coarse == pytest.approx([0.0, 2.0, 4.0], abs=0.11)
    assert not pl.plan(4.6, (960, 540), ()).coarse  # an empty frame: none until 6.0
    near = [(2, TrackHint((400.0, 100.0, 500.0, 400.0), True, 4.6))]
    assert pl.plan(4.7, (960, 540), busy, near).coarse  # 0.7 s since the last: now
    assert not pl.plan(4.8, (960, 540), busy, near).coarse


def test_the_coarse_sheet_is_the_whole_frame_shrunk_never_magnified():
    """The coarse look's sheet: the whole frame fitted into the model input, cut to
    what it takes for a model that takes any size; a small frame is not blown up."""
    s = whole_sheet((960, 540), (640, 640), 32)
    (p,) = s.placements
    assert p.region == (0, 0, 960, 540) and (p.w, p.h) == (640, 360)
    assert s.hw == (384, 640)
    s = whole_sheet((384, 288), (640, 640), 32)
    (p,) = s.placements
    assert (p.w, p.h) == (384, 288) and s.hw == (320, 416)
    s = whole_sheet((768, 576), (640, 640), 32)  # at most COARSE_PX (400) tall
    assert (s.placements[0].w, s.placements[0].h) == (533, 400) and s.hw == (416, 576)
    s = whole_sheet((1024, 768), (640, 640), 32)
    assert (s.placements[0].w, s.placements[0].h) == (533, 400) and s.hw == (416, 576)
    s = whole_sheet((640, 480), (640, 640), 32)  # a 4:3 camera: the scene's look, 0.83x
    assert (s.placements[0].w, s.placements[0].h) == (533, 400) and s.hw == (416, 576)
    s = whole_sheet((540, 960), (640, 640), 32)  # a doorbell: 400 tall
    assert (s.placements[0].w, s.placements[0].h) == (225, 400) and s.hw == (416, 256)
    s = whole_sheet((960, 540), (320, 320), None)  # a model of one size: a whole input
    assert s.hw == (320, 320) and (s.placements[0].w, s.placements[0].h) == (320, 180)


def test_a_coarse_look_for_someone_near_sees_a_frame_that_fits_the_model_as_it_is():
    """The scene's coarse looks (the first frame, a cut, the quiet look) stand at most
    ``COARSE_PX`` tall, kinder to far people; one called for someone near (a track that
    tall no coarse look confirmed) shows a 640x480 frame at 1.0x, as the whole-frame look
    does. A frame larger than the model's input is fitted into it either way."""
    s = whole_sheet((640, 480), (640, 640), 32)
    assert (s.placements[0].w, s.placements[0].h) == (533, 400)
    s = whole_sheet((640, 480), (640, 640), 32, near=True)
    assert (s.placements[0].w, s.placements[0].h) == (640, 480)
    s = whole_sheet((768, 576), (640, 640), 32, near=True)
    assert (s.placements[0].w, s.placements[0].h) == (533, 400)
    s = whole_sheet((960, 540), (640, 640), 32, near=True)
    assert (s.placements[0].w, s.placements[0].h) == (640, 360)

    wh = (640, 480)
    near = [(1, TrackHint((200.0, 100.0, 330.0, 420.0), True, 0.0))]
    pl = RegionPlanner(PlannerParams(sweep_s=1.0))
    first = pl.plan(0.0, wh, (), near, 320)
    assert first.coarse and not first.near  # the first frame: the scene's look
    again = pl.plan(1.0, wh, (), near, 320)
    assert again.coarse and again.near  # every sweep_s for someone near
    quiet = RegionPlanner(PlannerParams(sweep_s=1.0))
    assert not quiet.plan(0.0, wh, ()).near
    assert not quiet.plan(1.0, wh, ()).coarse
    late = quiet.plan(4.0, wh, ())
    assert late.coarse and not late.near  # nothing near: the quiet look
    cut = quiet.plan(4.1, wh, (), near, 320, cut=True)
    assert cut.coarse and not cut.near


def test_a_scene_cut_gets_a_coarse_look_at_once():
    """Most of the frame changed (a cut, the camera moved): motion resets and reports no
    blob, so the whole frame is looked at now, not at the next ``sweep_s``."""
    pl = RegionPlanner(PlannerParams(sweep_s=10.0))
    assert pl.plan(0.0, (960, 540), ()).coarse
    assert pl.plan(0.1, (960, 540), ()).empty
    plan = pl.plan(0.2, (960, 540), (), cut=True)
    assert plan.coarse and not plan.empty


def test_big_boxes_of_low_score_need_a_tracked_object_or_a_coarse_box():
    """Anchors (issue 38): a big box scoring under 0.5 that nothing holds is dropped, a
    coarse one unless a track holds it, a region's unless a track or a kept coarse box
    does; a high score, or a small box, needs nothing. On a frame with a coarse look, a
    big box also needs a plain coarse box (0.5 and up): a track's coarse box of low score
    alone there goes too (its own plain box would hold it)."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    coarse = replace(
        found_in(
            [
                (
                    (0, 0, 960, 540),
                    dets(
                        (100, 50, 250, 500, 0.9),  # a person
                        (600, 0, 700, 200, 0.3),  # a shape half taken for one
                        (800, 100, 900, 400, 0.35),  # someone tracked, scored low now
                    ),
                )
            ]
        ),
        coarse=True,
    )
    fine = found_in(
        [
            ((300, 100, 560, 540), dets((20, 20, 120, 400, 0.4))),  # big, low, alone
            ((300, 0, 400, 100), dets((10, 10, 40, 80, 0.3))),  # small
        ]
    )
    anchors = Anchors(((800.0, 100.0, 900.0, 400.0),), 0.2 * 540)
    out, _ = merge_found([fine, coarse], wh, iou_threshold=0.45, max_det=100, anchors=anchors)
    assert sorted(out.xyxy[:, 0].tolist()) == [100, 310]
    # The tracked one's low coarse box beside a plain one of it: held, one box (NMS).
    more = dets(
        (100, 50, 250, 500, 0.9), (600, 0, 700, 200, 0.3), (800, 100, 900, 400, 0.35),
        (805, 105, 900, 400, 0.8),
    )  # fmt: skip
    plain = replace(found_in([((0, 0, 960, 540), more)]), coarse=True)
    out, _ = merge_found([fine, plain], wh, iou_threshold=0.45, max_det=100, anchors=anchors)
    assert sorted(out.xyxy[:, 0].tolist()) == [100, 310, 805]
    # Held by a track, the region's low-score big box stays.
    anchors = Anchors(((320.0, 120.0, 420.0, 500.0),), 0.2 * 540)
    out, _ = merge_found([fine], wh, iou_threshold=0.45, max_det=100, anchors=anchors)
    assert sorted(out.xyxy[:, 0].tolist()) == [310, 320]


def test_a_track_holds_no_low_score_piece_of_itself():
    """The bus zoom's woman half out at the left edge (fresh 16:9 f216-f217): tracked
    whole, a region boxes only her legs at 0.26-0.35, and her track held that box (IoU
    0.52) and shrank to it. A big box of low score lying inside a tracked object's box
    with three of its sides on it is a piece of that object: its track does not hold it.
    Her whole box at a low score, someone else's box, or a plain-scoring legs box is
    held or kept as before; and a piece one track vouches for whole stays held."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    region = (0.0, 50.0, 377.0, 540.0)

    def kept(*boxes: tuple[float, float, float, float, float], tracks=None) -> list[int]:
        anchors = Anchors(tracks or ((-1.0, 163.0, 78.0, 540.0),), 0.2 * 540)
        moved = [(x1 - region[0], y1 - region[1], x2 - region[0], y2 - region[1], sc)
                 for x1, y1, x2, y2, sc in boxes]  # fmt: skip
        found = [found_in([(region, dets(*moved))])]
        out, _ = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=anchors)
        return sorted(round(x) for x in out.xyxy[:, 1].tolist())

    assert kept((1.0, 327.0, 75.0, 538.0, 0.35)) == []  # her legs: a piece of her track
    assert kept((1.0, 327.0, 75.0, 538.0, 0.55)) == [327]  # plain: needs no hold
    assert kept((0.0, 150.0, 77.0, 538.0, 0.35)) == [150]  # her whole box, scored low
    # The legs box whole for a track of them (someone crouching, tracked so): held.
    legs_track = ((-1.0, 163.0, 78.0, 540.0), (0.0, 320.0, 76.0, 540.0))
    assert kept((1.0, 327.0, 75.0, 538.0, 0.35), tracks=legs_track) == [327]


def test_on_a_coarse_frame_a_regions_big_box_the_coarse_look_did_not_see_is_dropped():
    """What is a fifth of the frame tall the whole-frame look sees plainly: on a frame
    with a coarse look, a region's big box no coarse box overlaps is a region's false
    find (a tripod magnified into a "person"), dropped; and its track, doubted, gets no
    region of its own until a coarse look sees it."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    tripod = ((100, 380, 260, 540), dets((40, 20, 90, 160, 0.6)))
    person = ((400, 100, 700, 540), dets((50, 20, 250, 430, 0.9)))
    coarse = replace(found_in([((0, 0, 960, 540), dets((455, 125, 645, 525, 0.9)))]), coarse=True)
    anchors = Anchors(((140.0, 400.0, 190.0, 540.0),), 0.2 * 540)
    out, _ = merge_found(
        [found_in([tripod, person]), coarse], wh, iou_threshold=0.45, max_det=100, anchors=anchors
    )
    assert [round(x) for x in out.xyxy[:, 0].tolist()] == [450]
    # Without a coarse look this frame, the tracked tripod's box stays (nothing says no).
    out, _ = merge_found([found_in([tripod])], wh, iou_threshold=0.45, max_det=100, anchors=anchors)
    assert len(out) == 1
    # Once the coarse look has doubted its track, the frames up to the next coarse look
    # drop a big box there too, whatever it scores (the track's box predicted on, a few
    # pixels off); a person elsewhere stays.
    doubt = Anchors((), 0.2 * 540, ((128.0, 408.0, 169.0, 548.0),))
    out, _ = merge_found(
        [found_in([tripod, person])], wh, iou_threshold=0.45, max_det=100, anchors=doubt
    )
    assert [round(x) for x in out.xyxy[:, 0].tolist()] == [450]
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, wh, ())
    doubted = [(1, TrackHint((140.0, 400.0, 190.0, 540.0), False, 0.0, False, True))]
    assert pl.plan(0.1, wh, (), doubted).empty
    trusted = [(1, TrackHint((140.0, 400.0, 190.0, 540.0), False, 0.0, True, False))]
    assert pl.plan(0.2, wh, (), trusted).regions


def test_on_a_coarse_frame_only_a_plain_coarse_box_holds_a_big_box():
    """A post magnified in a region scores 0.65, and the coarse look half takes it for a
    person too (0.3), its track holding that low box: no plain find of the whole-frame
    look, and both boxes go. Where the coarse look finds it plainly (0.5 and up), the
    region's box stays (NMS keeps one)."""
    from agent.regions.merge import ANCHOR_SCORE, Anchors

    wh = (960, 540)
    post = ((100, 380, 260, 540), dets((50, 30, 92, 160, 0.65)))
    anchors = Anchors(((150.0, 410.0, 192.0, 540.0),), 0.2 * 540)

    def merged(coarse_score: float) -> Detections:
        coarse = replace(
            found_in([((0, 0, 960, 540), dets((151, 411, 192, 540, coarse_score)))]), coarse=True
        )
        out, _ = merge_found(
            [found_in([post]), coarse], wh, iou_threshold=0.45, max_det=100, anchors=anchors
        )
        return out

    assert len(merged(0.3)) == 0
    assert merged(ANCHOR_SCORE).score.tolist() == pytest.approx([0.65])


def test_a_near_persons_region_alone_still_drops_big_boxes_of_low_score_nothing_holds():
    """One region on the frame (a near person's, the only one): its low-score big box
    beside the person (half out of their box: no piece of them), on nothing tracked, is
    dropped as it would be among several regions (the close-up clip: 7 false boxes on one
    of them); tracked, it stays."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    near = found_in(
        [((80, 0, 880, 540), dets((20, 48, 735, 536, 0.9), (673, 189, 785, 386, 0.28)))]
    )
    assert near.looked == 1
    person = Anchors(((104.0, 51.0, 811.0, 535.0),), 0.2 * 540)
    out, _ = merge_found([near], wh, iou_threshold=0.45, max_det=100, anchors=person)
    assert [round(x) for x in out.xyxy[:, 0].tolist()] == [100]
    both = Anchors((*person.boxes, (750.0, 190.0, 865.0, 390.0)), 0.2 * 540)
    out, _ = merge_found([near], wh, iou_threshold=0.45, max_det=100, anchors=both)
    assert sorted(round(x) for x in out.xyxy[:, 0].tolist()) == [100, 753]


def test_a_piece_gives_way_to_a_near_persons_whole_box_of_any_look():
    """A region's box inside a near person's whole box of another region (not only the
    coarse look's) is a piece of them: the top half (three sides on theirs, half the
    area) and a head (a fifth of it) go; someone beside them, and someone in front of
    them (one side in common), stay. Without anchors (no region mode rules), the head
    stays."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    whole = ((400, 50, 700, 450), dets((99, 50, 191, 335, 0.86)))  # 499..591 in the frame
    parts = (
        (450, 60, 650, 300),
        dets(
            (52, 41, 150, 180, 0.88),  # the top half: 502..600 x 101..240
            (60, 45, 120, 110, 0.7),  # the head
            (-20, 140, 40, 230, 0.8),  # in front, lower left: 430..490 x 200..290
        ),
    )
    beside = ((700, 50, 900, 450), dets((10, 60, 100, 330, 0.8)))
    anchors = Anchors((), 0.2 * 540)
    regions = found_in([whole, parts, beside])
    out, _ = merge_found([regions], wh, iou_threshold=0.45, max_det=100, anchors=anchors)
    assert sorted(round(x) for x in out.xyxy[:, 0].tolist()) == [430, 499, 710]
    out, _ = merge_found([regions], wh, iou_threshold=0.45, max_det=100)
    assert 510 in [round(x) for x in out.xyxy[:, 0].tolist()]


def test_a_piece_gives_way_to_a_near_persons_whole_box_of_its_own_region():
    """One region alone (a near person's, the whole frame shrunk: a doorbell's zoom at
    0.16x) boxes the person and, beside that, their right half (three sides on theirs):
    a piece, dropped as one of another look's would be. Someone beside them stays; with
    no anchors (no region mode rules) nothing is dropped."""
    from agent.regions.merge import Anchors

    wh = (540, 960)
    near = (
        (0, 0, 540, 960),
        dets(
            (4, 196, 536, 954, 0.84),  # the person
            (295, 203, 538, 955, 0.59),  # their right half
        ),
    )
    anchors = Anchors(((6.0, 199.0, 538.0, 954.0),), 0.2 * 960)
    out, rows = merge_found([found_in([near])], wh, iou_threshold=0.45, max_det=100,
                            anchors=anchors)  # fmt: skip
    assert [round(x) for x in out.xyxy[:, 0].tolist()] == [4]
    assert rows.tolist() == [0]
    beside = ((0, 0, 540, 960), dets((4, 196, 300, 954, 0.84), (310, 200, 536, 950, 0.8)))
    out, _ = merge_found([found_in([beside])], wh, iou_threshold=0.45, max_det=100,
                         anchors=anchors)  # fmt: skip
    assert len(out) == 2
    out, _ = merge_found([found_in([near])], wh, iou_threshold=0.45, max_det=100)
    assert len(out) == 2


def test_a_cut_box_gives_way_only_to_a_box_that_goes_on_past_the_cut():
    """Two near people, one in front of the other, in one region: the right-hand one
    reaches close to the region's inner edge (it counts as cut) and the left-hand one's
    box covers most of it, but ends far short of where it was cut: another person, not
    the whole of which it is a piece. Both stay (the close-up clip's zoom lost the
    right-hand man in 8 frames)."""
    wh = (960, 540)
    both = ((0, 0, 918, 540), dets((378, 0, 891, 536, 0.78), (0, 62, 777, 540, 0.78)))
    other = ((0, 0, 100, 100), dets())
    out = merge_regions([both, other], wh, iou_threshold=0.45, max_det=100)
    assert sorted(round(x) for x in out.xyxy[:, 0].tolist()) == [0, 378]
    # A box that does go on past the cut (the same person, whole) still takes over.
    whole = ((250, 0, 960, 540), dets((128, 0, 670, 536, 0.8)))  # 378..920 in the frame
    out = merge_regions([both, whole], wh, iou_threshold=0.45, max_det=100)
    assert sorted(round(x) for x in out.xyxy[:, 0].tolist()) == [0, 378]
    assert round(float(out.xyxy[:, 2].max())) == 920


def test_a_cut_box_gives_way_to_a_box_of_a_look_that_saw_past_the_cut():
    """A walker's legs, cut by a sweep square's top and right edges, reach to the square's
    edge, past where the walker's whole box ends: that box does not go on past the cut, but
    its own region held the legs whole and saw past both cuts, so the legs are a piece of
    it (the close-up clip's walk_a frame 112). The coarse look saw the whole frame: the
    same. Where the whole box's region ends at the square's edge too, it saw no more than
    the square did: both stay."""
    wh = (960, 540)
    legs = ((360, 150, 600, 390), dets((117, 0, 240, 111, 0.82)))  # 477..600 x 150..261
    walker = ((177, 0, 623, 540), dets((279, 0, 398, 260, 0.86)))  # 456..575 x 0..260
    out = merge_regions([legs, walker], wh, iou_threshold=0.45, max_det=100)
    assert out.xyxy.round().tolist() == [[456, 0, 575, 260]]
    coarse = replace(found_in([((0, 0, 960, 540), dets((456, 0, 575, 260, 0.86)))]), coarse=True)
    out, _ = merge_found([found_in([legs]), coarse], wh, iou_threshold=0.45, max_det=100)
    assert out.xyxy.round().tolist() == [[456, 0, 575, 260]]
    short = ((177, 0, 600, 540), dets((279, 0, 398, 260, 0.86)))
    out = merge_regions([legs, short], wh, iou_threshold=0.45, max_det=100)
    assert sorted(round(x) for x in out.xyxy[:, 0].tolist()) == [456, 477]


def test_pieces_of_someone_near_entering_across_a_seam_are_one_box():
    """Someone entering at the frame's edge moves as a few small blobs; two magnified
    regions, one above the other, each see a piece cut at their common seam: one box,
    their union, the upper one of low score too. Pieces a track holds, or together small
    (two small people, one behind the other), stay apart."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    upper = ((897, 247, 960, 408), dets((14, 0, 63, 161, 0.51)))  # 911..960 x 247..408
    lower = ((897, 338, 960, 499), dets((24, 0, 63, 124, 0.67)))  # 921..960 x 338..462
    away = ((0, 0, 100, 100), dets())
    found = [found_in([upper, lower, away])]
    out, _ = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=Anchors((), 108.0))
    assert out.xyxy.round().tolist() == [[911, 247, 960, 462]]
    assert out.score.tolist() == pytest.approx([0.67])
    tracked = Anchors(((921.0, 338.0, 960.0, 462.0),), 108.0)
    out, _ = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=tracked)
    assert len(out) == 2
    out, _ = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=Anchors((), 250.0))
    assert len(out) == 2
    # The middle piece of low score (a big box no track holds: dropped alone) still joins
    # the legs found plainly below it: no legs-only box; two low pieces stay dropped.
    faint = ((897, 247, 960, 408), dets((14, 0, 63, 161, 0.41)))
    found = [found_in([faint, lower, away])]
    out, _ = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=Anchors((), 108.0))
    assert out.xyxy.round().tolist() == [[911, 247, 960, 462]]
    assert out.score.tolist() == pytest.approx([0.67])
    dim = ((897, 338, 960, 499), dets((24, 0, 63, 124, 0.45)))
    found = [found_in([faint, dim, away])]
    out, _ = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=Anchors((), 108.0))
    assert len(out) == 0


def test_merge_names_the_look_of_each_box_kept_and_none_for_a_joined_one():
    """``merge_found`` hands back, per box kept, its row among the looks' boxes: the scale
    of the look that saw it (``sharpness``), highest score first. A box joined of two
    pieces across a seam was seen whole by no look: row -1, scale 0."""
    from agent.regions.merge import Anchors, merge_found, sharpness

    wh = (960, 540)
    far = replace(
        found_in([((0, 0, 480, 540), dets((100, 100, 200, 400, 0.9)))]), scales=np.array([0.5])
    )
    upper = ((897, 247, 960, 408), dets((14, 0, 63, 161, 0.51)))
    lower = ((897, 338, 960, 499), dets((24, 0, 63, 124, 0.67)))
    near = replace(found_in([upper, lower]), scales=np.array([2.0, 3.0]))
    found = [far, near]
    out, rows = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=Anchors((), 108.0))
    assert out.xyxy.round().tolist() == [[100, 100, 200, 400], [911, 247, 960, 462]]
    assert rows.tolist() == [0, -1]
    assert sharpness(found, rows).tolist() == [0.5, 0.0]
    tracked = Anchors(((921.0, 338.0, 960.0, 462.0),), 108.0)
    out, rows = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=tracked)
    assert rows.tolist() == [0, 2, 1]
    assert sharpness(found, rows).tolist() == [0.5, 3.0, 2.0]
    alone, rows = merge_found([far], wh, iou_threshold=0.45, max_det=100)
    assert (len(alone), rows.tolist()) == (1, [0])


def test_over_the_cap_a_near_persons_region_goes_with_motion_before_other_tracks():
    """A busy frame wants more regions than ``max_regions``: a near tracked person's region
    ranks with motion (a porch camera's whole job), before small tracked objects."""
    pl = RegionPlanner(PlannerParams(max_regions=3, sweep_s=100.0))
    wh = (960, 540)
    blobs = [(50.0 + 150 * i, 20.0, 90.0 + 150 * i, 100.0) for i in range(3)]
    tracks = [
        (1, TrackHint((700.0, 150.0, 840.0, 500.0), True, 0.0)),  # near: 0.65 of the frame
        (2, TrackHint((60.0, 400.0, 90.0, 480.0), True, 0.0)),  # small
    ]
    plan = pl.plan(0.0, wh, blobs, tracks)
    assert len(plan.regions) == 3
    assert "near" in plan.reasons
    assert any(r[0] <= 700 and r[2] >= 840 for r in plan.regions)


def test_over_the_cap_two_near_peoples_merged_region_keeps_their_place():
    """Two near people standing side by side (bus.jpg zoomed into at 640x480): their
    regions merge into one, which went to the end of the list, and a dozen motion squares
    asked after them took the cap: both were looked at only through a third region, of
    someone cut by the frame's edge, that cut their heads off. A merged region takes its
    first part's place among regions of equal urgency."""
    pl = RegionPlanner(PlannerParams(max_regions=4, sweep_s=100.0))
    wh = (640, 480)
    blobs = [(400.0 + 45 * i, 20.0, 430.0 + 45 * i, 50.0) for i in range(4)]
    tracks = [
        (1, TrackHint((40.0, 112.0, 166.0, 478.0), False, 0.0)),
        (2, TrackHint((184.0, 117.0, 285.0, 476.0), False, 0.0)),
    ]
    plan = pl.plan(0.0, wh, blobs, tracks)
    assert len(plan.regions) == 4
    both = [r for r in plan.regions if r[0] <= 40 and r[1] <= 112 and r[2] >= 285]
    assert len(both) == 1 and plan.reasons[plan.regions.index(both[0])] == "near"
    assert plan.reasons.count("motion") == 3


def test_someone_behind_a_wider_person_is_no_piece_of_them_once_the_coarse_look_confirmed_both():
    """zidane.jpg's left-hand man leans across the frame: his box holds 89-95 % of the
    right-hand man's, and is twice its area, so the piece rule dropped the right-hand man
    from every region look. Both are tracks a coarse look confirmed: a box holding one of
    them that the larger box does not hold is someone else. A head inside a confirmed
    person's box, or the top of that person, still goes; without the confirmations, as
    before, the man behind goes too."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    leaning, behind = (50.0, 35.0, 940.0, 533.0), (619.0, 6.0, 958.0, 535.0)
    head, top = (380.0, 50.0, 540.0, 260.0), (52.0, 36.0, 938.0, 330.0)
    region = (0.0, 0.0, 960.0, 540.0)

    def kept(anchors: Anchors, *boxes: tuple[float, ...]) -> list[int]:
        found = [found_in([(region, dets((*leaning, 0.92), *boxes))])]
        out, _ = merge_found(found, wh, iou_threshold=0.45, max_det=100, anchors=anchors)
        return sorted(round(x) for x in out.xyxy[:, 0].tolist())

    both = Anchors((leaning, behind), 108.0, confirmed=(leaning, behind))
    assert kept(both, (*behind, 0.8)) == [50, 619]
    assert kept(both, (*head, 0.8)) == [50]
    assert kept(both, (*top, 0.8)) == [50]
    assert kept(Anchors((leaning, behind), 108.0), (*behind, 0.8)) == [50]


def test_a_big_box_where_nothing_moved_since_a_coarse_look_that_kept_none_there_is_dropped():
    """A still photo of a man leaning across the frame, a crowd behind him: his near
    region (the whole frame, shrunk to a fifth) took the crowd for a person at 0.5 on
    every recheck, which no coarse look ever found; each coarse look's veto dropped it,
    and the next region look published it again. Until the next coarse look, its verdict
    stands where nothing moved: a region's big box there that it kept no big box on goes.
    Where something moved since, on a coarse look's kept box, and on a tracked person's
    box, it stays; the coarse look's own frame judges anew."""
    from agent.detect.detector import Thresholds
    from agent.regions.looker import MOVED_BOXES, Looker
    from agent.regions.merge import Anchors

    wh = (960, 540)
    image = np.zeros((wh[1], wh[0], 3), np.uint8)
    th = Thresholds()
    man, crowd = (50.0, 35.0, 940.0, 533.0), (3.0, 13.0, 201.0, 532.0)
    looker = Looker(planner=PlannerParams(sweep_s=100.0))
    first = looker.look(image, 0.0, (320, 320), 32)
    assert first.coarse is not None and first.anchors is not None
    assert first.anchors.judged is None
    coarse = replace(found_in([((0, 0, 960, 540), dets((*man, 0.91)))]), coarse=True)
    looker.merge(first, [coarse], wh, th)
    looker.follow([_Track(1, man)], coarse=True, t_frame=0.0)
    region = (0.0, 0.0, 960.0, 540.0)
    seen = found_in([(region, dets((*man, 0.92), (*crowd, 0.53)))])
    then = looker.look(image, 0.1, (320, 320), 32)
    assert then.coarse is None and then.anchors is not None
    assert set(then.anchors.judged or ()) == {man} and then.anchors.moved == ()
    out = looker.merge(then, [seen], wh, th)
    assert [round(x) for x in out.xyxy[:, 0].tolist()] == [50]

    def kept(anchors: Anchors) -> list[int]:
        out, _ = merge_found([seen], wh, iou_threshold=0.45, max_det=100, anchors=anchors)
        return sorted(round(x) for x in out.xyxy[:, 0].tolist())

    anchors = then.anchors
    assert kept(replace(anchors, moved=((150.0, 300.0, 180.0, 330.0),))) == [3, 50]
    assert kept(replace(anchors, judged=(man, crowd))) == [3, 50]
    assert kept(replace(anchors, boxes=(man, crowd))) == [3, 50]
    assert kept(replace(anchors, judged=None)) == [3, 50]
    # What moves is gathered until the next coarse look; too much of it, and no verdict
    # stands; a coarse look judges anew.
    moving = Motion(((600.0, 100.0, 640.0, 140.0),), 0.01)
    looker.motion.update = lambda img, t: moving  # type: ignore[method-assign]
    later = looker.look(image, 0.2, (320, 320), 32)
    assert later.anchors is not None and later.anchors.moved == moving.boxes
    for k in range(MOVED_BOXES):
        later = looker.look(image, 0.3 + 0.01 * k, (320, 320), 32)
    assert later.anchors is not None and later.anchors.judged is None


def test_a_regions_plain_box_of_someone_cut_by_a_side_that_the_coarse_look_half_saw_stays():
    """A man cut by a doorbell's left frame edge: his region scores him 0.6, the coarse
    look (the whole frame) 0.29 on the same box: it half saw him, as a whole-frame look
    sees half a person, so its veto spares him (the close-up clip's 540x960 framing lost
    22 of his 40 frames). A region's box under 0.5 there, a plain one the coarse look did
    not see at all, and one away from the sides (a post at the bottom edge, the test
    before) are still dropped."""
    from agent.regions.merge import Anchors

    wh = (540, 960)
    anchors = Anchors((), 0.2 * 960)

    def merged(
        region: tuple[float, ...], box: tuple[float, ...], coarse_box: tuple[float, ...]
    ) -> list[list[float]]:
        low = replace(found_in([((0, 0, 540, 960), dets(coarse_box))]), coarse=True)
        out, _ = merge_found([found_in([(region, dets(box))]), low], wh, iou_threshold=0.45,
                             max_det=100, anchors=anchors)  # fmt: skip
        return [[round(v) for v in x] for x in out.xyxy.tolist()]

    region = (0, 160, 413, 696)
    coarse_box = (1, 315, 93, 736, 0.29)
    assert merged(region, (2, 183, 92, 533, 0.6), coarse_box) == [[2, 343, 92, 693]]
    assert merged(region, (2, 183, 92, 533, 0.45), coarse_box) == []
    assert merged(region, (2, 183, 92, 533, 0.6), (300, 300, 400, 700, 0.29)) == []
    inner = (100, 160, 513, 696)  # the same man, were he away from the side: no spare
    assert merged(inner, (2, 183, 92, 533, 0.6), (101, 315, 193, 736, 0.29)) == []


def test_a_coarse_look_that_saw_nothing_still_vetoes_a_regions_big_box():
    """The coarse look ran and found nobody: a region's big box (a tripod magnified into
    a "person") is as unseen by it as when it found someone elsewhere; dropped."""
    from agent.regions.merge import Anchors

    wh = (960, 540)
    tripod = ((100, 380, 260, 540), dets((40, 20, 90, 160, 0.6)))
    empty = replace(found_in([((0, 0, 960, 540), dets())]), coarse=True)
    anchors = Anchors(((140.0, 400.0, 190.0, 540.0),), 0.2 * 540)
    out, _ = merge_found(
        [found_in([tripod]), empty], wh, iou_threshold=0.45, max_det=100, anchors=anchors
    )
    assert len(out) == 0


@dataclass(frozen=True)
class _Track:
    """A tracked object as ``Looker.follow`` reads it (``agent.objects.tracker.Track``)."""

    track_id: int
    xyxy: tuple[float, float, float, float]
    moving: bool = False
    last_seen_t: float = 0.0
    seen: bool = True
    hits: int = 1
    velocity: tuple[float, float] = (0.0, 0.0)


def test_a_track_the_coarse_look_did_not_see_holds_no_low_score_box():
    """A big track that a coarse look did not see is doubted: it gets no region, and it
    no longer holds a region's low-score big box on it either (the close-up clip: a person
    hidden behind another, whom a region kept "seeing" at 0.4); seen again, it holds it."""
    from agent.regions.looker import Looker
    from agent.regions.merge import Anchors

    wh = (960, 540)
    image = np.zeros((wh[1], wh[0], 3), np.uint8)
    hidden = (500.0, 100.0, 600.0, 400.0)
    low = found_in([((450, 50, 700, 500), dets((52, 52, 148, 348, 0.4)))])

    def kept(anchors: Anchors | None) -> int:
        return len(merge_found([low], wh, iou_threshold=0.45, max_det=100, anchors=anchors)[0])

    looker = Looker(planner=PlannerParams(sweep_s=100.0))
    looker.follow([_Track(1, hidden)])
    trusted = looker.look(image, 0.0, (320, 320), 32).anchors
    assert trusted is not None and trusted.boxes == (hidden,)
    assert kept(trusted) == 1
    looker.follow([_Track(1, hidden, seen=False)], coarse=True)  # the coarse look missed it
    doubted = looker.look(image, 0.1, (320, 320), 32).anchors
    assert doubted is not None and doubted.boxes == ()
    assert kept(doubted) == 0
    looker.follow([_Track(1, hidden, seen=True)], coarse=True)  # seen again
    again = looker.look(image, 0.2, (320, 320), 32).anchors
    assert again is not None and again.boxes == (hidden,)


def test_someone_every_look_half_takes_for_a_person_is_looked_at_again_and_kept():
    """A man cut by a doorbell frame's left edge (bus.jpg): the coarse look scores him
    0.29 (``full`` publishes him at 0.49), too low for a track, and merge drops a big box
    of low score that nothing holds. The looker keeps the coarse look's such boxes
    (``Looker.merge``) until the objects stage hands that frame back: next frame each is
    a seed, looked at by a region of its own, and a low-score box of it there, in place,
    is held (``Anchors.faint``) and published. That box is a seed again (looked at), but
    holds nothing: a region's low-score box is at best a view of part of someone, and as a
    hold it drifts (the bus zoom's woman half out at the left edge: a coarse box of her
    whole held her legs, 0.45, which held a smaller piece, 0.26, the next frame, and so
    on). A big box of low score elsewhere still goes."""
    from agent.detect.detector import Thresholds
    from agent.regions.looker import FAINT_FRAMES, Looker

    wh = (540, 960)
    image = np.zeros((wh[1], wh[0], 3), np.uint8)
    th = Thresholds()
    man = (1.0, 315.0, 93.0, 736.0)
    looker = Looker(planner=PlannerParams(sweep_s=100.0))
    first = looker.look(image, 0.0, (320, 320), 32)
    assert first.coarse is not None and first.anchors is not None
    assert first.anchors.faint == ()
    coarse = replace(found_in([((0, 0, 540, 960), dets((*man, 0.29)))]), coarse=True)
    out = looker.merge(first, [coarse], wh, th)
    assert len(out) == 0  # nothing holds it: dropped, as before
    looker.follow([], coarse=True, found=(out, []), t_frame=0.0)
    again = looker.look(image, 0.1, (320, 320), 32)
    assert again.coarse is None and again.anchors is not None
    assert again.anchors.faint == (man,)
    assert any(
        r[0] <= man[0] and r[1] <= man[1] and r[2] >= man[2] and r[3] >= man[3]
        for r in again.plan.regions
    )  # looked at again, whole
    region = again.plan.regions[0]
    him, other = (2.0, 320.0, 95.0, 730.0, 0.39), (300.0, 100.0, 400.0, 500.0, 0.4)
    fine = found_in([(region, shift(dets(him, other), -region[0], -region[1]))])
    out = looker.merge(again, [fine], wh, th)
    assert [round(x) for x in out.xyxy[:, 0].tolist()] == [2]
    # Published, no track takes it (0.39): a seed, looked at again, which holds nothing.
    looker.follow([], found=(out, [-1]), t_frame=0.1)
    third = looker.look(image, 0.2, (320, 320), 32)
    assert third.coarse is None and third.anchors is not None and third.anchors.faint == ()
    assert any(
        r[0] <= him[0] and r[1] <= him[1] and r[2] >= him[2] and r[3] >= him[3]
        for r in third.plan.regions
    )
    legs = (2.0, 480.0, 95.0, 730.0, 0.3)  # a piece of him the last box would hold (IoU 0.6)
    region = third.plan.regions[0]
    out = looker.merge(third, [found_in([(region, shift(dets(legs), -region[0], -region[1]))])],
                       wh, th)  # fmt: skip
    assert len(out) == 0
    # A coarse look's box of him holds again the frame after it.
    looker.follow([], found=(out, []), t_frame=0.2)
    fourth = looker.look(image, 0.3, (320, 320), 32)
    out = looker.merge(fourth, [coarse], wh, th)
    looker.follow([], coarse=True, found=(out, []), t_frame=0.3)
    fifth = looker.look(image, 0.4, (320, 320), 32)
    assert fifth.anchors is not None and fifth.anchors.faint == (man,)
    # Without the coarse look's box kept, the region's box of him has nothing to hold it.
    plain = Looker(planner=PlannerParams(sweep_s=100.0))
    plain.look(image, 0.0, (320, 320), 32)
    plain.follow([], coarse=True, found=(Detections.empty(), []), t_frame=0.0)
    bare = plain.look(image, 0.1, (320, 320), 32)
    assert bare.anchors is not None and bare.anchors.faint == ()
    assert len(plain.merge(bare, [fine], wh, th)) == 0
    # Nothing handed back (objects off): the boxes of a few frames are kept, no more.
    alone = Looker(planner=PlannerParams(sweep_s=100.0))
    for k in range(3 * FAINT_FRAMES):
        look = alone.look(image, 0.1 * k, (320, 320), 32)
        alone.merge(look, [coarse], wh, th)
    assert len(alone._merged) == FAINT_FRAMES


def test_a_big_track_no_coarse_look_ever_saw_loses_its_boxes_until_the_next_coarse_look():
    """A post magnified into a "person" (0.5-0.7 in a region, the close-up clip's bottom
    edge): the coarse look misses it, and up to the next one the regions' big boxes there
    are dropped too, whatever they score (published on the frames between before). A
    walker a coarse look has seen and then misses once (half hidden) keeps what the
    regions find."""
    from agent.regions.looker import Looker
    from agent.regions.merge import Anchors

    wh = (960, 540)
    image = np.zeros((wh[1], wh[0], 3), np.uint8)
    post, walker = (150.0, 410.0, 192.0, 540.0), (500.0, 100.0, 600.0, 400.0)
    found = found_in([((100, 380, 260, 540), dets((50, 30, 92, 160, 0.7)))])

    def published(anchors: object) -> int:
        assert isinstance(anchors, Anchors)
        return len(merge_found([found], wh, iou_threshold=0.45, max_det=100, anchors=anchors)[0])

    looker = Looker(planner=PlannerParams(sweep_s=100.0))
    looker.look(image, 0.0, (320, 320), 32)
    looker.follow([_Track(1, post, seen=False), _Track(2, walker)], coarse=True)
    anchors = looker.look(image, 0.1, (320, 320), 32).anchors
    assert isinstance(anchors, Anchors) and anchors.doubted == (post,)
    assert published(anchors) == 0
    looker.follow([_Track(1, post, seen=False), _Track(2, walker, seen=False)], coarse=True)
    anchors = looker.look(image, 0.2, (320, 320), 32).anchors
    assert isinstance(anchors, Anchors) and anchors.doubted == (post,)
    # Without the doubt the same box is published (score 0.7: nothing else says no).
    assert published(Anchors((), anchors.big_px)) == 1


def test_someone_big_a_coarse_look_has_seen_brings_only_the_quiet_coarse_look():
    """Someone ``plain`` tall whom a coarse look has seen (``confirmed``), standing or
    walking, is held by their own regions, and a big blob, a big miss or a cut still call
    a coarse look at once: with only such people in view it comes every ``quiet`` x
    ``sweep_s``. Someone that tall no coarse look has seen yet (a new track, walking or
    not, a box no track took) brings it back every ``sweep_s``."""
    busy = [(100.0, 100.0, 140.0, 200.0)]
    for moving in (True, False):
        pl = RegionPlanner(PlannerParams(sweep_s=0.5, quiet=4.0))
        unseen = [(1, TrackHint((400.0, 100.0, 500.0, 400.0), moving, 0.0))]
        coarse = [
            t for t in np.arange(0, 2.0, 0.1) if pl.plan(float(t), (960, 540), busy, unseen).coarse
        ]
        assert coarse == pytest.approx([0.0, 0.5, 1.0, 1.5], abs=0.11)
        pl = RegionPlanner(PlannerParams(sweep_s=0.5, quiet=4.0))
        seen = [(1, TrackHint((400.0, 100.0, 500.0, 400.0), moving, 0.0, confirmed=True))]
        coarse = [
            t for t in np.arange(0, 4.5, 0.1) if pl.plan(float(t), (960, 540), busy, seen).coarse
        ]
        assert coarse == pytest.approx([0.0, 2.0, 4.0], abs=0.11)
    held = [(1, TrackHint((400.0, 100.0, 500.0, 400.0), False, 0.0, confirmed=True))]
    new = [*held, (2, TrackHint((600.0, 100.0, 700.0, 400.0), True, 4.5))]
    assert pl.plan(4.6, (960, 540), busy, new).coarse  # 0.6 s since the last: now
    assert not pl.plan(4.8, (960, 540), busy, new).coarse
    assert pl.plan(5.1, (960, 540), busy, new).coarse  # every sweep_s while unseen
    seed = [*held, (-1, TrackHint((600.0, 100.0, 700.0, 400.0), False, -math.inf))]
    assert pl.plan(5.7, (960, 540), busy, seed).coarse


def test_the_looker_confirms_big_tracks_a_coarse_look_saw_and_forgets_them_when_missed():
    """A big track seen on a frame with a coarse look is confirmed (its hint says so) until
    a coarse look misses it (then doubted) or it ends; a small one, or one seen on a frame
    without a coarse look, is not."""
    from agent.regions.looker import Looker

    image = np.zeros((540, 960, 3), np.uint8)
    big, small = (500.0, 100.0, 600.0, 400.0), (100.0, 100.0, 130.0, 160.0)
    looker = Looker(planner=PlannerParams(sweep_s=100.0))
    looker.look(image, 0.0, (320, 320), 32)

    def hints() -> dict[int, tuple[bool, bool]]:
        return {tid: (h.confirmed, h.doubted) for tid, h in looker._tracks}

    looker.follow([_Track(1, big), _Track(2, small)])
    assert hints() == {1: (False, False), 2: (False, False)}
    looker.follow([_Track(1, big), _Track(2, small)], coarse=True)
    assert hints() == {1: (True, False), 2: (False, False)}
    looker.follow([_Track(1, big, seen=False)])  # a frame of regions only: kept
    assert hints() == {1: (True, False)}
    looker.follow([_Track(1, big, seen=False)], coarse=True)  # the coarse look missed it
    assert hints() == {1: (False, True)}
    looker.follow([_Track(1, big)], coarse=True)
    looker.follow([])  # ended
    looker.follow([_Track(1, big)])  # the same id again: not seen by a coarse look
    assert hints() == {1: (False, False)}


def test_a_big_track_one_look_found_and_the_next_dropped_is_looked_at_again_coarsely():
    """basketball1.png framed 640x480, one noise draw, a 480 px coarse look: it finds a
    crouching player 455 px tall plainly (0.91), a new track; the next frame's near
    region, shrunk to 120 px, misses him, and the tracker drops a track of one look that
    the next missed. Nothing moves on a still photo, so nothing looked there again until
    the quiet coarse look, 4 s later: he was missed for the whole scene. His box becomes
    a seed not seen: the next frame looks there and gets a coarse look, once. A small
    track dropped, or a doubted one (the coarse look did not see it), calls nothing."""
    from agent.regions.looker import Looker

    wh = (640, 480)
    image = np.zeros((wh[1], wh[0], 3), np.uint8)
    player, small = (432.0, 22.0, 639.0, 477.0), (100.0, 100.0, 130.0, 160.0)
    looker = Looker(planner=PlannerParams(sweep_s=1.0))
    assert looker.look(image, 0.0, (320, 320), 32).coarse is not None  # the first frame
    looker.follow([_Track(1, player), _Track(2, small)], coarse=True)
    assert looker.look(image, 0.1, (320, 320), 32).coarse is None  # confirmed: regions
    looker.follow([])  # the near region missed both: one-look tracks, dropped
    again = looker.look(image, 0.2, (320, 320), 32)
    assert again.coarse is not None
    assert any(r[0] <= player[0] and r[2] >= player[2] for r in again.plan.regions)
    assert not any(r[0] <= small[0] and r[2] >= small[2] for r in again.plan.regions)
    looker.follow([])
    assert looker.look(image, 0.3, (320, 320), 32).coarse is None  # once
    hidden = Looker(planner=PlannerParams(sweep_s=1.0))
    hidden.look(image, 0.0, (320, 320), 32)
    hidden.follow([_Track(1, player, seen=False)], coarse=True)  # doubted
    hidden.follow([])
    assert hidden.look(image, 0.1, (320, 320), 32).plan.empty


def test_a_camera_the_box_is_behind_on_gets_its_sweep_and_quiet_coarse_look_less_often():
    """A camera looked at every 4th frame (``behind`` 4) gets the sweep and the quiet coarse
    look 4 times less often, so each frame of it costs what a frame of a camera that keeps
    up costs; the coarse look for someone ``plain`` tall still comes every ``sweep_s``."""
    pl = RegionPlanner(PlannerParams(sweep_s=0.5, quiet=4.0))
    plans = [(t, pl.plan(t, (768, 576), (), behind=4.0)) for t in np.arange(0, 12.0, 0.4)]
    swept = [t for t, p in plans if "sweep" in p.reasons]
    assert np.diff(swept) == pytest.approx([2.0] * (len(swept) - 1), abs=0.01)
    coarse = [t for t, p in plans if p.coarse]
    assert coarse == pytest.approx([0.0, 8.0], abs=0.01)  # 4 x quiet x sweep_s
    near = [(1, TrackHint((400.0, 100.0, 500.0, 400.0), True, 12.0))]  # 0.52 of the frame
    looks = [
        t for t in np.arange(12.0, 14.0, 0.4) if pl.plan(t, (768, 576), (), near, behind=4.0).coarse
    ]
    assert looks == pytest.approx([12.0, 12.8, 13.6], abs=0.01)  # every sweep_s: never waits


def test_the_looker_counts_how_far_behind_its_camera_is_from_the_frame_numbers():
    """Gaps between the numbers of the frames looked at make ``behind``: every 5th frame
    settles near 5, a long stall counts as ``MAX_GAP`` at most, every frame goes back to 1;
    no numbers (the offline path) and a new reader's lower number change nothing."""
    from agent.regions.looker import MAX_GAP, Looker

    image = np.zeros((288, 384, 3), np.uint8)
    looker = Looker(planner=PlannerParams(sweep_s=100.0))
    for k in range(30):
        looker.look(image, k * 0.5, (320, 320), 32, frame_id=5 * k)
    before = looker.behind
    assert before == pytest.approx(5.0, abs=0.05)
    looker.look(image, 15.5, (320, 320), 32, frame_id=5 * 29 + 1000)  # a stall
    assert looker.behind == pytest.approx(0.8 * before + 0.2 * MAX_GAP)
    for k in range(40):
        looker.look(image, 16.0 + k * 0.1, (320, 320), 32, frame_id=2000 + k)
    assert looker.behind == pytest.approx(1.0, abs=0.01)
    looker.look(image, 20.0, (320, 320), 32, frame_id=0)  # a new reader numbers from 0
    looker.look(image, 20.1, (320, 320), 32)  # no number
    assert looker.behind == pytest.approx(1.0, abs=0.01)


def test_a_held_box_holds_a_regions_piece_and_is_one_box_with_a_fresh_find():
    """A still person's last look stands in as one more look at the whole frame: a piece
    of them (a region's box of a head and shoulder beside the person looked at) is
    dropped as any look's big box drops it (the close-up clip: a near man held, the other
    looked at, gave a narrow box between them); found again by a region, one box."""
    from agent.regions.merge import held_found

    wh = (960, 540)
    held = dets((106, 138, 822, 533, 0.86))
    other = ((500, 0, 960, 540), dets((63, 24, 443, 540, 0.77), (0, 142, 81, 395, 0.56)))
    out, _ = merge_found(
        [found_in([other]), held_found(held, wh)], wh, iou_threshold=0.45, max_det=100
    )
    assert sorted(out.xyxy.tolist()) == [[106, 138, 822, 533], [563, 24, 943, 540]]
    again = ((50, 100, 900, 540), dets((58, 40, 770, 431, 0.9)))  # the held one, fresh
    out, _ = merge_found(
        [found_in([again]), held_found(held, wh)], wh, iou_threshold=0.45, max_det=100
    )
    assert len(out) == 1 and out.score.tolist() == pytest.approx([0.9])


def test_the_looker_lets_a_steady_still_track_stand_in_with_its_last_plain_find():
    """``follow`` keeps each track's last detection found at ``HOLD_SCORE`` or more (one
    found less plainly keeps none); a track seen ``HOLD_HITS`` times with one is steady;
    ``look`` then hands that detection in (``Look.held``) on the frames between its
    rechecks; never in a motion mask, and ``forget_held`` (a new model) drops them all."""
    from agent.regions.looker import HOLD_HITS, Looker

    image = np.full((540, 960, 3), 90, np.uint8)
    box = (500.0, 100.0, 600.0, 400.0)
    found = dets((*box, 0.8))

    def steady(looker: Looker) -> bool:
        return dict(looker._tracks)[1].steady

    looker = Looker(planner=PlannerParams(sweep_s=100.0, recheck_s=1.0))
    looker.look(image, 0.0, (320, 320), 32)
    looker.follow([_Track(1, box, hits=HOLD_HITS - 1)], found=(found, [1]))
    assert not steady(looker)
    looker.follow([_Track(1, box, hits=HOLD_HITS)], found=(found, [1]))
    assert steady(looker)
    look = looker.look(image, 0.1, (320, 320), 32)
    assert look.plan.held == (1,) and look.held is not None
    assert look.held.xyxy.tolist() == [list(box)] and not look.sheets
    # Found at a low score: no detection stands in for it until a plain find.
    looker.follow([_Track(1, box, hits=HOLD_HITS + 1)], found=(dets((*box, 0.4)), [1]))
    assert not steady(looker)
    assert looker.look(image, 0.2, (320, 320), 32).held is None
    looker.follow([_Track(1, box, hits=HOLD_HITS + 2)], found=(found, [1]))
    assert steady(looker)
    looker.forget_held()
    looker.follow([_Track(1, box, hits=HOLD_HITS + 3)])
    assert not steady(looker)
    # A walker's last look stands in moved on by its velocity since it was seen (its
    # keypoints too), at least every predict_s looked at again.
    walking = Looker(planner=PlannerParams(sweep_s=100.0))
    walking.look(image, 0.0, (320, 320), 32)
    small = (100.0, 100.0, 140.0, 200.0)
    kp = np.array([[[110.0, 120.0, 0.9], [130.0, 180.0, 0.8]]], np.float32)
    posed = Detections(np.array([small], np.float32), found.score, found.class_id,
                       found.labels, kp)  # fmt: skip
    walking.follow([_Track(1, small, moving=True, hits=HOLD_HITS, velocity=(50.0, -10.0))],
                   found=(posed, [1]))  # fmt: skip
    assert walking.look(image, 0.05, (320, 320), 32).held is None  # its own look
    walking.follow([_Track(1, small, moving=True, last_seen_t=0.05, hits=HOLD_HITS + 1,
                           velocity=(50.0, -10.0))], found=(posed, [1]))  # fmt: skip
    look = walking.look(image, 0.1, (320, 320), 32)
    assert look.plan.held == (1,) and look.held is not None and not look.sheets
    assert look.held.xyxy[0].tolist() == pytest.approx([102.5, 99.5, 142.5, 199.5])
    assert look.held.keypoints is not None
    assert look.held.keypoints.ravel().tolist() == pytest.approx(
        [112.5, 119.5, 0.9, 132.5, 179.5, 0.8]
    )
    assert posed.xyxy.tolist() == [list(small)]  # the last look itself is not changed
    assert walking.look(image, 0.2, (320, 320), 32).held is None  # predict_s on: looked at
    # A motion mask over part of it: motion cannot see it leave, so it never stands in.
    masked = Looker(
        planner=PlannerParams(sweep_s=100.0, recheck_s=1.0), masks=[[(0.5, 0), (1, 0), (1, 1)]]
    )
    masked.look(image, 0.0, (320, 320), 32)
    masked.follow([_Track(1, box, hits=HOLD_HITS)], found=(found, [1]))
    assert not steady(masked)


def test_after_a_cut_no_track_of_the_old_scene_is_looked_at_or_stands_in():
    """Live, the frames after a cut are planned before the objects stage hands back the
    cut frame's tracks (a frame or two in flight). Those frames know no track of the old
    scene: none of its still people's last looks stands in (the close-up clip: a walker's
    box published on the next scene for seconds), no region goes to where they were, and
    each gets a coarse look, at most ``AFTER_CUT`` of them; ``follow`` of a frame before
    the cut is ignored, the cut frame's own brings the new scene's tracks."""
    from agent.regions.looker import AFTER_CUT, HOLD_HITS, Looker

    old = scene(0)
    h, w = old.shape[:2]
    new = cv2.resize(cv2.imread(str(ROOT / "assets" / "zidane.jpg")), (w, h))
    box = (100.0, 300.0, 300.0, 900.0)
    looker = Looker(planner=PlannerParams(sweep_s=100.0, recheck_s=1.0))
    looker.look(old, 0.0, (320, 320), 32)
    looker.follow([_Track(1, box, hits=HOLD_HITS)], found=(dets((*box, 0.8)), [1]), t_frame=0.0)
    assert looker.look(scene(1), 0.1, (320, 320), 32).plan.held == (1,)
    cut = looker.look(new, 0.2, (320, 320), 32)
    assert cut.motion.reset and cut.coarse is not None and cut.held is None
    # The frame before the cut comes back late: ignored.
    looker.follow([_Track(1, box, hits=HOLD_HITS + 1)], found=(dets((*box, 0.8)), [1]),
                  t_frame=0.1)  # fmt: skip
    after = looker.look(new, 0.3, (320, 320), 32)
    assert not after.motion.reset and after.coarse is not None
    assert after.held is None and after.plan.held == () and after.plan.regions == ()
    # The cut frame's own tracks: planned from again, no more coarse looks for the cut.
    person = (450.0, 200.0, 750.0, 950.0)
    looker.follow([_Track(2, person)], found=(dets((*person, 0.9)), [2]), t_frame=0.2)
    settled = looker.look(new, 0.4, (320, 320), 32)
    assert settled.coarse is None and settled.regions
    assert all(r[0] < person[2] and r[2] > person[0] for r in settled.regions)
    # With nothing handed back at all (objects off), the coarse looks stop after AFTER_CUT.
    alone = Looker(planner=PlannerParams(sweep_s=100.0))
    alone.look(old, 0.0, (320, 320), 32)
    alone.look(new, 0.1, (320, 320), 32)
    looks = [alone.look(new, 0.2 + 0.1 * k, (320, 320), 32) for k in range(AFTER_CUT + 1)]
    assert [look.coarse is not None for look in looks] == [True] * AFTER_CUT + [False]


def _grid_share(blob: XyXy, rects: list[XyXy]) -> float:
    """The share of ``blob``'s 8x8 sample grid inside any of ``rects``, point by point."""
    k = (np.arange(8) + 0.5) / 8
    xs = (blob[0] + k * (blob[2] - blob[0]))[None, :, None]
    ys = (blob[1] + k * (blob[3] - blob[1]))[None, None, :]
    r = np.asarray(rects, np.float64).reshape(-1, 4)[:, :, None, None]
    inside = (r[:, 0] <= xs) & (xs <= r[:, 2]) & (r[:, 1] <= ys) & (ys <= r[:, 3])
    return float(inside.any(axis=0).mean()) if len(rects) else 0.0


@given(
    st.lists(st.integers(-50, 1000), min_size=4, max_size=4),
    st.lists(st.lists(st.integers(-50, 1000), min_size=4, max_size=4), max_size=6),
    st.sampled_from([1.0, 0.5, 1.7]),
)
@settings(max_examples=300, deadline=None)
def test_inside_share_counts_the_grid_points_inside_the_rects(
    blob: list[int], rects: list[list[int]], step: float
) -> None:
    """The bit-mask count gives what testing every sample point against every rectangle
    gives, to the point: overlapping rectangles, edges on a point, empty and back-to-front
    boxes, fractional coordinates."""

    def box(v: list[int]) -> XyXy:
        return (v[0] * step, v[1] * step, v[2] * step, v[3] * step)

    b, rs = box(blob), [box(r) for r in rects]
    assert _inside_share(b, rs) == _grid_share(b, rs)
    whole = (min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3]))
    assert _inside_share(b, [whole]) == 1.0


def test_unpack_of_a_sheet_that_found_nothing_is_empty_and_counts_its_regions() -> None:
    sheet = pack(
        [(0.0, 0.0, 100.0, 100.0), (200.0, 0.0, 300.0, 100.0)], [1.0, 1.0], (320, 320), (640, 480)
    )[0]
    found = unpack(Detections.empty(), sheet)
    assert len(found.dets) == 0 and found.regions.shape == (0, 4) and found.looked == 2


def test_regions_are_packed_in_the_width_that_trims_to_the_fewest_model_pixels():
    """Three regions of 96 x 100 model pixels side by side trim to a sheet 128 x 320; no
    narrower layout is smaller, so they stay. Five of 60 x 100 overflow one row of 320:
    packed 320 wide they trim to 224 x 288; within 224 (two rows of three and two) to
    224 x 224, a fifth fewer pixels, each region still at its scale and apart."""
    row = [(100.0 * i, 0.0, 100.0 * i + 48, 50.0) for i in range(3)]
    (wide,) = pack_fewest(row, [2.0] * 3, (320, 320), (768, 576), stride=32)
    assert wide.hw == (128, 320)
    five = [(100.0 * i, 0.0, 100.0 * i + 30, 50.0) for i in range(5)]
    plain = [trim(s, 32) for s in pack_fewest(five, [2.0] * 5, (320, 320), (768, 576))]
    tight = pack_fewest(five, [2.0] * 5, (320, 320), (768, 576), stride=32)
    assert len(tight) == len(plain) == 1
    assert plain[0].hw == (224, 288) and tight[0].hw == (224, 224)
    assert sorted((p.w, p.h) for p in tight[0].placements) == [(60, 100)] * 5
    for a, b in itertools.combinations(tight[0].placements, 2):
        assert (
            a.x + a.w + 6 <= b.x
            or b.x + b.w + 6 <= a.x
            or a.y + a.h + 6 <= b.y
            or b.y + b.h + 6 <= a.y
        )
    for p in tight[0].placements:
        assert p.x + p.w <= tight[0].hw[1] and p.y + p.h <= tight[0].hw[0]


def test_a_still_person_stands_in_with_the_box_of_the_look_that_saw_them_sharpest():
    """Someone standing still whom the coarse look saw at 0.6x (the close-up clip's still
    man: IoU 0.99 with the reference's box) and a near person's region next at 0.2x, boxed
    looser (IoU 0.73): the coarse look's box stands in for them (``Look.held``). A look
    that saw them about as sharply, a box that no longer agrees, or a walker: the new box."""
    from agent.detect.detector import Thresholds
    from agent.regions.looker import HOLD_HITS, Looker
    from agent.regions.merge import Found, take

    wh = (960, 540)
    image = np.full((wh[1], wh[0], 3), 90, np.uint8)
    th = Thresholds()
    sharp, loose = (558.0, 31.0, 855.0, 532.0), (548.0, 25.0, 951.0, 530.0)
    whole = np.array([[0.0, 0.0, 960.0, 540.0]])

    def frame(
        looker: Looker, t: float, box: tuple[float, ...], scale: float, **track: Any
    ) -> Detections | None:
        look = looker.look(image, t, (320, 320), 32)
        f = Found(dets((*box, 0.9)), whole, 1, coarse=t == 0.0, scales=np.array([scale]))
        out = looker.merge(look, [f], wh, th)
        assert out.xyxy.tolist() == [list(box)]
        looker.follow([_Track(1, box, **track)], t == 0.0, (out, [1]), t)
        return looker.look(image, t + 0.05, (320, 320), 32).held

    def held_after(box: tuple[float, ...], scale: float) -> Detections | None:
        looker = Looker(planner=PlannerParams(sweep_s=100.0, recheck_s=1.0))
        frame(looker, 0.0, sharp, 0.6, hits=HOLD_HITS - 1)
        return frame(looker, 0.1, box, scale, hits=HOLD_HITS)

    held = held_after(loose, 0.2)
    assert held is not None and held.xyxy.tolist() == [list(sharp)]
    held = held_after(loose, 0.5)  # about as sharp
    assert held is not None and held.xyxy.tolist() == [list(loose)]
    elsewhere = (420.0, 31.0, 720.0, 532.0)
    held = held_after(elsewhere, 0.2)  # no longer where the sharp look saw them
    assert held is not None and held.xyxy.tolist() == [list(elsewhere)]
    # A walker keeps its newest look (one moving never stands in still: its row says).
    looker = Looker(planner=PlannerParams(sweep_s=100.0, recheck_s=1.0))
    frame(looker, 0.0, sharp, 0.6, hits=HOLD_HITS - 1, moving=True)
    frame(looker, 0.1, loose, 0.2, hits=HOLD_HITS, moving=True)
    d, i, _ = looker._rows[1]
    assert d.xyxy[i].tolist() == list(loose)
    # A masked detection before them (the objects stage hands back the rest, and their
    # rows among what merge published): their scale is still their own look's.
    looker = Looker(planner=PlannerParams(sweep_s=100.0, recheck_s=1.0))
    look = looker.look(image, 0.0, (320, 320), 32)
    both = dets((10.0, 300.0, 60.0, 532.0, 0.9), (*sharp, 0.9))
    f = Found(both, np.repeat(whole, 2, axis=0), 1, coarse=True, scales=np.array([0.1, 0.6]))
    out = looker.merge(look, [f], wh, th)
    assert out.xyxy.tolist()[1] == list(sharp)
    kept = take(out, np.array([1]))
    looker.follow([_Track(1, sharp, hits=HOLD_HITS - 1)], True, (kept, [1]), 0.0, np.array([1]))
    held = frame(looker, 0.1, loose, 0.2, hits=HOLD_HITS)
    assert held is not None and held.xyxy.tolist() == [list(sharp)]
