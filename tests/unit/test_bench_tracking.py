"""bench/tracking.py's ground truth: paths, visible boxes, the ignore rule, line counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from agent.detect.detections import Detections

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_tracking", ROOT / "bench" / "tracking.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_tracking"] = mod
    spec.loader.exec_module(mod)
    return mod


T = _load()
BG = np.zeros((100, 200, 3), np.uint8)


def sprite(w: int, h: int) -> object:
    return T.Sprite(np.full((h, w, 3), 200, np.uint8), np.ones((h, w, 1), np.float32))


def scene(*paths: object, frames: int = 10) -> object:
    return T.Scene("t", tuple(paths), frames, occluders=())


@pytest.mark.parametrize(
    ("frame", "feet"),
    [
        (-1, None),  # before the walk
        (0, (0.0, 50.0)),
        (5, (50.0, 50.0)),  # half way to the stop
        (10, (100.0, 50.0)),
        (15, (100.0, 50.0)),  # standing still
        (25, (200.0, 70.0)),
        (26, None),  # after the walk
    ],
)
def test_path_feet_interpolates_stops_and_ends(frame, feet):
    """Feet move linearly between waypoints, stay put on a stop, and vanish outside."""
    p = T.Path2D("x", 10, ((0, 0.0, 50.0), (10, 100.0, 50.0), (20, 100.0, 50.0), (25, 200.0, 70.0)))
    assert p.feet(frame) == feet


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        (((0, 10.0, 50.0), (9, 190.0, 50.0)), {"in": 1, "out": 0}),  # left to right
        (((0, 190.0, 50.0), (9, 10.0, 50.0)), {"in": 0, "out": 1}),
        (((0, 10.0, 50.0), (4, 150.0, 50.0), (9, 10.0, 50.0)), {"in": 1, "out": 1}),  # and back
        (((0, 10.0, 50.0), (9, 90.0, 50.0)), {"in": 0, "out": 0}),  # stops short of x=100
    ],
)
def test_expected_crossings_of_the_middle_line(points, expected):
    """The truth's line counts follow the paths across x = width / 2."""
    assert T.expected_crossings(scene(T.Path2D("x", 10, points)), 200) == expected


def test_nearer_person_hides_the_farther_one():
    """The nearer box is cut out of the farther one: visible share and visible box."""
    far = T.Path2D("far", 40, ((0, 50.0, 60.0), (9, 50.0, 60.0)))  # box x 40..60, y 20..60
    near = T.Path2D("near", 40, ((0, 55.0, 80.0), (9, 55.0, 80.0)))  # box x 45..65, y 40..80
    _, truth = T.render(scene(far, near), BG, [sprite(20, 40), sprite(20, 40)], [], 0)
    by_id = {t.person_id: t for t in truth}
    assert by_id[1].visibility == 1.0 and by_id[1].visible_xyxy == (45.0, 40.0, 65.0, 80.0)
    # far: 20x40 = 800 px, of which x 45..60 and y 40..60 (15x20 = 300) are hidden.
    assert by_id[0].visibility == pytest.approx(500 / 800)
    assert by_id[0].visible_xyxy == (40.0, 20.0, 60.0, 60.0)
    assert by_id[0].full_xyxy == (40.0, 20.0, 60.0, 60.0)


def test_fully_hidden_person_is_not_in_the_truth():
    """A person entirely behind a nearer, larger one has no truth entry."""
    far = T.Path2D("far", 20, ((0, 50.0, 50.0), (9, 50.0, 50.0)))
    near = T.Path2D("near", 60, ((0, 50.0, 80.0), (9, 50.0, 80.0)))
    _, truth = T.render(scene(far, near), BG, [sprite(10, 20), sprite(40, 60)], [], 0)
    assert [t.person_id for t in truth] == [1]


def test_frame_edge_clips_the_visible_box():
    """A person half out of the frame is seen as the part inside it."""
    edge = T.Path2D("edge", 40, ((0, 0.0, 60.0), (9, 0.0, 60.0)))  # box x -10..10
    _, truth = T.render(scene(edge), BG, [sprite(20, 40)], [], 0)
    assert truth[0].visible_xyxy == (0.0, 20.0, 10.0, 60.0)
    assert truth[0].visibility == pytest.approx(0.5)


def _dets(*boxes: tuple[float, float, float, float]) -> Detections:
    n = len(boxes)
    return Detections(
        np.array(boxes, np.float32).reshape(-1, 4),
        np.full((n,), 0.9, np.float32),
        np.zeros((n,), np.int32),
        ("person",) * n,
    )


@pytest.mark.parametrize(
    ("box", "kept", "why"),
    [
        ((0, 0, 20, 40), 1, "on a person in the truth: a hit"),
        ((100, 0, 120, 40), 0, "on a barely visible person: ignored"),
        ((150, 50, 170, 90), 1, "on nobody: a false positive"),
    ],
)
def test_ignore_rule_drops_only_boxes_on_barely_visible_people(box, kept, why):
    """Tracked boxes over people under VIS_MIN visible count neither as hit nor as miss."""
    people = [
        T.Truth(0, (0.0, 0.0, 20.0, 40.0), 1.0, (0.0, 0.0, 20.0, 40.0)),
        T.Truth(1, (100.0, 0.0, 120.0, 40.0), 0.2, (100.0, 0.0, 140.0, 40.0)),
    ]
    gt, hyp, _, dropped = T._frame_pairs(people, _dets(box), np.array([7], np.int64))
    assert [p.person_id for p in gt] == [0]
    assert (len(hyp), dropped) == (kept, 1 - kept), why


def test_mot_metrics_counts_an_id_switch():
    """One true person whose track id changes half way: IDF1 below 1, one switch."""
    pytest.importorskip("motmetrics")
    p = T.Path2D("x", 40, ((0, 50.0, 60.0), (9, 50.0, 60.0)))
    truth = [[T.Truth(0, (40.0, 20.0, 60.0, 60.0), 1.0, (40.0, 20.0, 60.0, 60.0))]] * 10
    dets = [_dets((40, 20, 60, 60))] * 10
    ids = [np.array([1 if f < 5 else 2], np.int64) for f in range(10)]
    clip = T.Clip(scene(p), truth, dets, {"in": 0, "out": 0})
    run = T.StageRun(ids, dets, [], {}, [], [])
    m = T.mot_metrics([clip], [run])
    assert (m["mota"], m["num_switches"], m["idf1"]) == (pytest.approx(0.9), 1, 0.5)


@pytest.mark.parametrize(
    ("gap_frames", "same_track"),
    [(3, True), (25, False)],  # 0.3 s unseen: kept; 2.5 s: past the 2 s lifespan
)
def test_edgefirst_adapter_keeps_ids_through_short_gaps(gap_frames, same_track):
    """The adapter gives one integer id per ByteTrack track and reports removed tracks."""
    pytest.importorskip("edgefirst.tracker")
    tr = T.EdgefirstTracker(0.5, 0.1, 0.5, lost_s=2.0)
    t, ids, removed = 0.0, [], []
    for i in range(5):
        up = tr.update(_dets((100 + 5 * i, 50, 140 + 5 * i, 150)), t)
        ids.append(int(up.track_ids[0]))
        t += 0.1
    for _ in range(gap_frames):
        removed += tr.update(_dets(), t).removed
        t += 0.1
    up = tr.update(_dets((125 + 5 * gap_frames, 50, 165 + 5 * gap_frames, 150)), t)
    assert ids[1:] == [ids[0]] * 4 and ids[0] > 0
    assert (int(up.track_ids[0]) == ids[0]) is same_track
    assert (ids[0] in removed) is not same_track
    seen = [x for x in up.tracks if x.seen]
    assert len(seen) == 1 and seen[0].hits == (6 if same_track else 1)
