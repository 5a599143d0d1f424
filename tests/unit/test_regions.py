"""Motion, region planning and merging regions' detections: table-driven, on real frames."""

from __future__ import annotations

import itertools
from pathlib import Path

import cv2
import numpy as np
import pytest

from agent.detect.detections import Detections
from agent.regions.merge import merge_regions, shift
from agent.regions.motion import MotionDetector, MotionParams
from agent.regions.planner import PlannerParams, RegionPlanner, TrackHint, cover, merge, square
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


def test_motion_under_a_mask_does_not_count():
    """The same square under a mask (fractions of the image) is no motion."""
    md = MotionDetector()
    md.set_masks([[(0.5, 0.2), (0.8, 0.2), (0.8, 0.5), (0.5, 0.5)]])  # 405..648 x 216..540
    for i in range(5):
        md.update(scene(i))
    img = scene(7)
    img[300:420, 500:560] = 20
    assert not md.update(img).any


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


@pytest.mark.parametrize(
    ("box", "side", "wh", "expected"),
    [
        ((100, 100, 140, 200), 240, (768, 576), (0.0, 30.0, 240.0, 270.0)),  # shifted inside
        ((700, 500, 760, 570), 240, (768, 576), (528.0, 336.0, 768.0, 576.0)),
        ((300, 200, 340, 300), 800, (768, 576), (32.0, 0.0, 608.0, 576.0)),  # shrunk to fit
    ],
)
def test_square_stays_in_the_image(box, side, wh, expected):
    """A square centred on a box is moved (and shrunk) to lie inside a non-square image."""
    assert square(box, side, wh) == pytest.approx(expected)


def test_a_wide_moving_area_is_covered_by_magnifying_squares():
    """A group spread over 500 px gets several 240 px squares, not one big one."""
    squares = cover((100, 200, 600, 320), 240, 1.6, (768, 576))
    assert len(squares) >= 2 and all(s[2] - s[0] == 240 for s in squares)
    assert min(s[0] for s in squares) <= 100 and max(s[2] for s in squares) >= 600


@pytest.mark.parametrize(
    ("regions", "n"),
    [
        ([((0, 0, 240, 240), "motion"), ((20, 20, 260, 260), "motion")], 1),  # overlap: merge
        ([((0, 0, 240, 240), "motion"), ((500, 300, 740, 540), "motion")], 2),  # apart
        ([((0, 0, 240, 240), "motion"), ((200, 0, 440, 240), "motion")], 2),  # would grow 1.8x
    ],
)
def test_merge_only_while_cheap(regions, n):
    """Overlapping squares merge while the merged one stays small; apart ones stay apart."""
    assert len(merge(regions, (768, 576), 1.3, 384, 8)) == n


def test_cap_keeps_the_most_urgent():
    """Over the cap, motion and moving tracks go first; the sweep waits."""
    wanted = [((i * 250.0, 0.0, i * 250.0 + 240, 240.0), "sweep" if i == 0 else "motion")
              for i in range(3)]  # fmt: skip
    kept = merge(wanted, (768, 576), 1.3, 384, 2)
    assert [w for _, w in kept] == ["motion", "motion"]


def test_planner_skips_a_still_frame_and_sweeps_slowly():
    """No motion, no track: one sweep square every sweep_s, nothing in between."""
    pl = RegionPlanner(PlannerParams(sweep_s=0.5))
    plans = [pl.plan(i / 10, (768, 576), ()) for i in range(20)]
    looked = [i for i, p in enumerate(plans) if p.regions]
    assert looked == [0, 5, 10, 15]
    assert {p.reasons for p in plans if p.regions} == {("sweep",)}


def test_planner_rechecks_still_objects_and_follows_moving_ones():
    """A moving track is looked at every frame; a still one every recheck_s."""
    pl = RegionPlanner(PlannerParams(recheck_s=1.0, sweep_s=100.0))
    pl.plan(0.0, (768, 576), ())  # the first sweep
    moving = [(1, TrackHint((100, 100, 140, 200), True, 0.0))]
    assert all(pl.plan(0.1 * k, (768, 576), (), moving).regions for k in range(1, 6))
    still = [(2, TrackHint((500, 300, 540, 400), False, 0.5))]
    looked = [k for k in range(6, 40) if pl.plan(0.1 * k, (768, 576), (), still).regions]
    assert looked == [15, 25, 35]


def test_small_people_in_a_tall_blob_get_magnifying_squares():
    """A blob of people at different depths is taller than any of them: the tracks in it
    say they are 60 px tall, so it is covered by squares of half the input (magnified 2x)."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, (768, 576), ())  # the first sweep
    people = [(i, TrackHint((300 + 50 * i, 150 + 40 * i, 325 + 50 * i, 210 + 40 * i), False, 0.0))
              for i in range(4)]  # fmt: skip
    plan = pl.plan(0.1, (768, 576), [(290.0, 140.0, 500.0, 340.0)], people, input_px=320)
    assert plan.regions and all(r[2] - r[0] == pytest.approx(160) for r in plan.regions)


def test_a_big_object_gets_one_square_around_it():
    """A near person 300 px tall is not cut into a grid: one square 1.4x its size."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, (1280, 720), ())
    plan = pl.plan(0.1, (1280, 720), [(500.0, 200.0, 620.0, 500.0)], input_px=320)
    assert len(plan.regions) == 1
    x1, y1, x2, y2 = plan.regions[0]
    assert x2 - x1 == pytest.approx(420) and x1 <= 500 and x2 >= 620 and y1 <= 200 and y2 >= 500


def test_a_track_already_inside_a_motion_square_gets_no_second_one():
    """A walker whose blob's square holds it whole is looked at once, not twice."""
    pl = RegionPlanner(PlannerParams(sweep_s=100.0))
    pl.plan(0.0, (768, 576), ())
    walker = [(1, TrackHint((300.0, 200.0, 325.0, 260.0), True, 0.0))]
    plan = pl.plan(0.1, (768, 576), [(298.0, 198.0, 330.0, 262.0)], walker, input_px=320)
    assert plan.reasons == ("motion",)
    plan = pl.plan(0.2, (768, 576), [(600.0, 400.0, 630.0, 460.0)], walker, input_px=320)
    assert sorted(plan.reasons) == ["motion", "track"]


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
