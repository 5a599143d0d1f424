"""The scoring of bench/nearstill.py (issue 38, point 5): big people found in published
messages, misses by segment, and false big boxes."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import nearstill  # noqa: E402  (bench/nearstill.py, found through the path above)

H = nearstill.H
BIG = [100.0, 0.0, 300.0, 0.8 * H]  # a near person, 0.8 of the frame tall
SMALL_FALSE = [600.0, 0.0, 620.0, 0.1 * H]  # too small to count as a false big box
SEGMENTS = [{"name": "a", "first": 0, "last": 1}, {"name": "b", "first": 2, "last": 2}]


def _ref(*frames: tuple[list[list[float]], list[list[float]]]) -> dict[str, object]:
    return {"frames": [{"big": big, "seen": seen} for big, seen in frames]}


def test_a_frame_without_a_message_misses_its_people():
    """Frame 1 published nothing: its person is a miss; frame 0 found them."""
    ref = _ref(([BIG], [BIG]), ([BIG], [BIG]), ([], []))
    out = nearstill.score_run(ref, SEGMENTS, {0: [(BIG, 0.9)]}, {})
    assert (out["tp"], out["fn"]) == (1, 1)
    assert out["segments"]["a"]["recall"] == pytest.approx(0.5)
    assert [m["frame"] for m in out["misses"]] == [1]
    assert out["misses"][0]["message"] is False


def test_pieces_and_unseen_big_boxes_are_false_big_boxes():
    """A head-only box does not match the person (IoU < 0.5) and is a false big box when
    tall enough; a box on something the reference saw at a low score is not false; a
    small box never counts."""
    head = [150.0, 0.0, 250.0, 0.3 * H]
    lowscore = [500.0, 0.0, 600.0, 0.5 * H]  # the reference's "seen" box (score 0.3)
    ref = _ref(([BIG], [BIG, lowscore]), ([], []), ([], []))
    published = {0: [(head, 0.7), (lowscore, 0.4), (SMALL_FALSE, 0.6)], 1: [], 2: []}
    out = nearstill.score_run(ref, SEGMENTS, published, {})
    assert (out["tp"], out["fn"]) == (0, 1)
    assert [f["xyxy"] for f in out["false"]] == [[round(x) for x in head]]


def test_one_published_box_finds_one_person():
    """Two people side by side and one box over both: at most one of them is found."""
    a, b = [100.0, 0.0, 200.0, 0.8 * H], [180.0, 0.0, 280.0, 0.8 * H]
    assert nearstill.matched([a, b], [(a, 0.9)]) == [1.0, None]
    assert nearstill.matched([a, b], [(a, 0.9), (b, 0.8)]) == [1.0, 1.0]


def test_a_false_big_box_on_someone_the_reference_saw_a_moment_ago_is_counted_apart():
    """Frame 1's box is on a person the reference saw in frame 0 (hidden in frame 1): a
    false big box on someone there ("seen_near"); frame 2's is in another segment (after a
    cut), where the reference never saw anyone: on nobody."""
    person = [400.0, 0.0, 500.0, 0.6 * H]
    ref = _ref(([person], [person]), ([], []), ([], []))
    published = {0: [(person, 0.8)], 1: [(person, 0.4)], 2: [(person, 0.4)]}
    out = nearstill.score_run(ref, SEGMENTS, published, {})
    assert [(f["frame"], f["seen_near"]) for f in out["false"]] == [(1, True), (2, False)]


def test_a_false_big_box_on_someone_the_reference_loses_for_a_frame_is_not_unseen():
    """The acceptance's false big boxes are on nobody the reference sees on that frame nor
    a frame either side ("seen_beside"): frame 3's box is on a person the reference saw in
    frame 2 and lost in frame 3 (a man stepping in before them); frame 5's person it saw
    two frames later (in 0.3 s, "seen_near", but not beside); frame 7's head-only box lies
    on the person it sees there: a piece, false on every judge."""
    person = [400.0, 0.0, 500.0, 0.6 * H]
    head = [400.0, 0.0, 500.0, 0.25 * H]
    segs = [{"name": "a", "first": 0, "last": 8}]
    lost: tuple[list[list[float]], list[list[float]]] = ([], [])
    seen = ([person], [person])
    ref = _ref(lost, lost, seen, lost, lost, lost, lost, seen, lost)
    published = {3: [(person, 0.7)], 5: [(person, 0.6)], 7: [(person, 0.8), (head, 0.6)]}
    out = nearstill.score_run(ref, segs, published, {})
    assert [(f["frame"], f["seen_beside"], f["seen_near"]) for f in out["false"]] == [
        (3, True, True), (5, False, True), (7, False, False)]  # fmt: skip


def test_false_big_boxes_are_drawn_for_a_person_to_judge(tmp_path):
    """``--draw``: one JPEG per frame with a false big box, the box in red where it was
    published, the reference's box of that frame in green; frames without one: none."""
    cv2 = pytest.importorskip("cv2")
    import numpy as np

    clip = nearstill.write_video(
        tmp_path / "clip.avi", [np.full((H, nearstill.W, 3), 90, np.uint8)] * 3, 10
    )
    seen = [700.0, 100.0, 800.0, 400.0, 0.8]
    ref = _ref(([], []), ([], [seen]), ([], []))
    false = [{"frame": 1, "xyxy": [100, 50, 300, 450], "score": 0.66}]
    row = {"variant": "defaults", "false_big_boxes": false}
    (path,) = nearstill.draw_false(clip, ref, SEGMENTS, row, tmp_path / "drawn")
    assert path.name == "defaults-f1.jpg"
    img = cv2.imread(str(path))
    assert img.shape == (H, nearstill.W, 3)
    b, g, r = (int(v) for v in img[250, 100])  # the false box's left edge
    assert r > 180 and g < 90 and b < 90
    b, g, r = (int(v) for v in img[250, 700])  # the reference's box
    assert g > 150 and r < 90
    assert np.abs(img[250, 500].astype(int) - 90).max() < 12  # grey between them
    row["false_big_boxes"] = []
    assert nearstill.draw_false(clip, ref, SEGMENTS, row, tmp_path / "none") == []


def test_rounds_are_summed_up_as_medians_per_variant_with_their_ranges():
    """Three rounds of two variants, in turn: each variant's medians and ranges are its own
    rounds', in the order the variants first ran."""
    rows = [
        {"variant": v, "round": k, "recall": rec, "false_big": fb, "cpu_ms_per_frame": ms}
        for k, (v, rec, fb, ms) in enumerate(
            [
                ("full", 1.0, 4, 90.0),
                ("defaults", 0.99, 14, 30.0),
                ("full", 0.99, 3, 95.0),
                ("defaults", 0.97, 5, 31.0),
                ("full", 1.0, 5, 80.0),
                ("defaults", 0.98, 4, 29.0),
            ]
        )
    ]
    full, defaults = nearstill.accuracy_medians(rows)
    assert (full["variant"], full["rounds"]) == ("full", 3)
    assert (full["recall"], full["false_big"], full["cpu_ms_per_frame"]) == (1.0, 4, 90.0)
    assert (full["false_big_range"], full["recall_range"]) == ("3-5", "0.990-1.000")
    assert (defaults["recall"], defaults["false_big"]) == (0.98, 5)
    assert (defaults["false_big_range"], defaults["recall_range"]) == ("4-14", "0.970-0.990")


def test_size_option_takes_width_by_height_and_refuses_anything_else(monkeypatch, capsys):
    """``--size 1920x1080``: the clips' frame size; the default is the 960x540 clip's; a
    malformed or absurd size stops with a line naming the option."""
    monkeypatch.setattr(sys, "argv", ["nearstill.py", "--size", "1920X1080"])
    assert nearstill.parse_args().size == (1920, 1080)
    monkeypatch.setattr(sys, "argv", ["nearstill.py"])
    assert nearstill.parse_args().size == nearstill.SIZE == (960, 540)
    for bad in ("1920", "1920x", "x1080", "1920x1080x3", "16x9", "-960x540"):
        monkeypatch.setattr(sys, "argv", ["nearstill.py", f"--size={bad}"])
        with pytest.raises(SystemExit) as e:
            nearstill.parse_args()
        assert e.value.code == 2
        assert f"--size {bad!r}" in capsys.readouterr().err


def test_framings_add_a_doorbell_s_and_a_4_3_camera_s_unless_told_otherwise(monkeypatch, capsys):
    """``--framings``: by default the accuracy part also frames the scenes as a doorbell
    (540x960) and a 4:3 camera (640x480) do; '' none; the ``--size`` framing and repeats
    once; a malformed one stops with a line naming the option."""
    monkeypatch.setattr(sys, "argv", ["nearstill.py"])
    assert nearstill.parse_args().framings == [(540, 960), (640, 480)]
    monkeypatch.setattr(sys, "argv", ["nearstill.py", "--framings", ""])
    assert nearstill.parse_args().framings == []
    argv = ["nearstill.py", "--size", "640x480", "--framings", "640x480,1920x1080,1920X1080"]
    monkeypatch.setattr(sys, "argv", argv)
    assert nearstill.parse_args().framings == [(1920, 1080)]
    monkeypatch.setattr(sys, "argv", ["nearstill.py", "--framings", "540x960,tall"])
    with pytest.raises(SystemExit) as e:
        nearstill.parse_args()
    assert e.value.code == 2
    assert "--framings 'tall'" in capsys.readouterr().err


def test_a_size_taller_than_wide_frames_the_same_scenes_as_a_doorbell(monkeypatch):
    """``--size 540x960``: the portrait table, each scene of the landscape one, its windows
    9:16 and inside their sources; the zoom's first frame is a view of the photo itself
    (no band of black), and a landscape size keeps the landscape table."""
    assert nearstill.segments() is nearstill.SEGMENTS
    monkeypatch.setattr(nearstill, "W", 540)
    monkeypatch.setattr(nearstill, "H", 960)
    table = nearstill.segments()
    assert table is nearstill.PORTRAIT
    assert [s.name for s in table] == [s.name for s in nearstill.SEGMENTS]
    for seg in table:
        if seg.crop is None:
            continue
        w, h = _source_size(seg.source)
        x0, y0, x1, y1 = seg.crop
        assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h, seg.name
        assert abs((x1 - x0) / (y1 - y0) - 540 / 960) < 0.01, seg.name
    photo = np.full((720, 1280, 3), 200, np.uint8)
    first, *_, last = nearstill._zoom(photo, (943.0, 373.0), 3)
    assert first.shape == last.shape == (960, 540, 3)
    inside = (slice(4, -4), slice(4, -4))  # the edge rows blend with warpAffine's border
    assert first[inside].min() == last[inside].min() == 200  # the view stays on the photo


def test_a_window_of_another_shape_than_the_clip_s_is_reshaped_never_squeezed(monkeypatch):
    """``--size 640x480``: a 16:9 window becomes 4:3 round its centre (taller where the
    source has room, else narrower), inside its source; a window of the clip's shape is
    kept as it is."""
    assert nearstill._shaped((100, 370, 420, 550), (768, 576)) == (100, 370, 420, 550)
    monkeypatch.setattr(nearstill, "W", 640)
    monkeypatch.setattr(nearstill, "H", 480)
    assert nearstill._shaped((100, 300, 420, 480), (768, 576)) == (100, 270, 420, 510)
    assert nearstill._shaped((100, 370, 420, 550), (768, 576)) == (100, 336, 420, 576)
    assert nearstill._shaped((0, 0, 1280, 720), (1280, 720)) == (160, 0, 1120, 720)
    assert nearstill._shaped((0, 0, 240, 480), (640, 480)) == (0, 0, 640, 480)
    still = nearstill._fit(np.zeros((720, 1280, 3), np.uint8), None)
    assert still.shape == (480, 640, 3)


def _source_size(path: Path) -> tuple[int, int]:
    """A segment's source's width and height: vtest.avi's, or a photo's (read)."""
    return (768, 576) if path.name == "vtest.avi" else _photo_size(path)


def _photo_size(path: Path) -> tuple[int, int]:
    if not path.is_file():
        pytest.skip(f"{path.name} is absent")
    img = cv2.imread(str(path))
    return img.shape[1], img.shape[0]


def test_several_cameras_scores_add_up_and_name_each_miss_s_camera():
    """``--cameras``: each camera scored on its own messages, pooled: found and missed
    people add up, per segment too, and each miss says whose it is."""
    ref = _ref(([BIG], [BIG]), ([BIG], [BIG]), ([], []))
    one = nearstill.score_run(ref, SEGMENTS, {0: [(BIG, 0.9)], 1: [(BIG, 0.9)]}, {})
    other = nearstill.score_run(ref, SEGMENTS, {0: [(BIG, 0.9)]}, {})
    out = nearstill._pooled([one, other])
    assert (out["tp"], out["fn"]) == (3, 1)
    assert out["recall"] == pytest.approx(0.75)
    assert out["segments"]["a"] == {"tp": 3, "fn": 1, "recall": 0.75}
    assert [(m["camera"], m["frame"]) for m in out["misses"]] == [(1, 1)]
    assert nearstill._pooled([one]) is one


def test_box_agreement_is_the_iou_of_each_person_found_with_the_box_that_found_them():
    """A box a little short of the person still finds them (IoU >= 0.5), and its IoU is
    what the run reports; a person missed adds none."""
    short = [100.0, 0.0, 300.0, 0.6 * H]  # IoU 0.75 with BIG
    ref = _ref(([BIG], [BIG]), ([BIG], [BIG]), ([BIG], [BIG]))
    published = {0: [(BIG, 0.9)], 1: [(short, 0.8)], 2: []}
    out = nearstill.score_run(ref, SEGMENTS, published, {})
    assert (out["tp"], out["fn"]) == (2, 1)
    assert out["ious"] == pytest.approx([1.0, 0.75])
    assert nearstill.matched([BIG], [(short, 0.8), (SMALL_FALSE, 0.9)]) == [pytest.approx(0.75)]


def test_noise_seeds_default_to_the_clip_s_own_draw_and_refuse_anything_else(monkeypatch, capsys):
    """``--noise-seeds``: by default the one draw the clips were always made with; several,
    each once, in order; a malformed or negative one stops with a line naming the option."""
    monkeypatch.setattr(sys, "argv", ["nearstill.py"])
    assert nearstill.parse_args().noise_seeds == [nearstill.SEED]
    monkeypatch.setattr(sys, "argv", ["nearstill.py", "--noise-seeds", "38, 1,2,1"])
    assert nearstill.parse_args().noise_seeds == [38, 1, 2]
    for bad in ("", "one", "1,-2", "1.5"):
        monkeypatch.setattr(sys, "argv", ["nearstill.py", f"--noise-seeds={bad}"])
        with pytest.raises(SystemExit) as e:
            nearstill.parse_args()
        assert e.value.code == 2
        assert f"--noise-seeds {bad!r}" in capsys.readouterr().err


def test_another_noise_draw_is_a_clip_of_its_own_with_the_same_scenes(tmp_path):
    """A seed other than the default: its framing's name says so, its photos carry other
    noise, the same scenes in the same frames; the same seed again gives the same clip."""
    assert nearstill.framing_label((540, 960), nearstill.SEED) == "540x960"
    assert nearstill.framing_label((540, 960), 1) == "540x960-s1"
    made = {}
    for seed, name in ((nearstill.SEED, "a"), (1, "b"), (1, "c")):
        clip, table = nearstill.closeup_video(tmp_path / f"{name}.avi", frames=2, seed=seed)
        cap = cv2.VideoCapture(str(clip))
        frames = [cap.read()[1] for _ in range(2)]
        cap.release()
        assert all(f is not None for f in frames)
        made[name] = (np.stack(frames).astype(np.int16), table)
    (a, ta), (b, tb), (c, tc) = made["a"], made["b"], made["c"]
    assert ta == tb == tc  # the same scenes, frame for frame
    assert np.array_equal(b, c)
    diff = np.abs(a - b)
    assert diff.mean() > 1.0  # other noise on every frame (sigma 3 grey levels)
    assert diff.mean() < 10.0  # on the same photo


def test_framing_totals_add_up_false_big_boxes_and_pool_recall_per_variant():
    """The framings' table ends with a row per variant over all its framings and noise
    draws (and, before it, over each framing's draws): false big boxes (and those on
    nobody) added up, recall of all their big people together (not a mean of recalls), in
    the order the variants first ran."""
    rows = [
        {"framing": f, "variant": v, "big_people": big, "fn": fn, "false_big": fb,
         "false_big_unseen": un, "false_big_nobody": nb, "recall": 1.0 - fn / big}
        for f, v, big, fn, fb, un, nb in [
            ("960x540", "full", 1000, 0, 3, 1, 0),
            ("960x540", "defaults", 1000, 10, 1, 0, 0),
            ("540x960-s1", "full", 200, 0, 9, 4, 1),
            ("540x960-s1", "defaults", 200, 30, 5, 3, 2),
        ]
    ]  # fmt: skip
    full, defaults = nearstill.framing_totals(rows)
    assert (full["framing"], full["variant"], full["big_people"]) == ("all 2", "full", 1200)
    assert (full["recall"], full["fn"], full["false_big"], full["false_big_nobody"]) == (
        1.0, 0, 12, 1)  # fmt: skip
    assert defaults["variant"] == "defaults"
    assert (defaults["fn"], defaults["false_big"], defaults["false_big_nobody"]) == (40, 6, 2)
    assert (full["false_big_unseen"], defaults["false_big_unseen"]) == (5, 3)
    assert defaults["recall"] == round(1 - 40 / 1200, 3) == 0.967  # the mean would be 0.92
    (one,) = nearstill.framing_totals(rows[1::2][1:], "540x960 all")  # one framing's draws
    assert (one["framing"], one["variant"], one["false_big"], one["recall"]) == (
        "540x960 all 1", "defaults", 5, 0.85)  # fmt: skip


def test_fresh_scenes_are_a_clip_of_their_own_in_windows_inside_their_sources(
    monkeypatch, tmp_path
):
    """``--scenes fresh``: scenes no default was tuned on, none a close-up scene's, their
    windows inside their sources in every framing; a clip of their own whose framings are
    named so."""
    assert nearstill.segments("fresh") is nearstill.FRESH
    assert not {s.name for s in nearstill.FRESH} & {s.name for s in nearstill.SEGMENTS}
    assert {s.describe() for s in nearstill.FRESH}.isdisjoint(
        s.describe() for s in nearstill.SEGMENTS
    )
    for wh in ((960, 540), (540, 960), (640, 480)):
        monkeypatch.setattr(nearstill, "W", wh[0])
        monkeypatch.setattr(nearstill, "H", wh[1])
        assert nearstill.segments("fresh") is nearstill.FRESH
        for seg in nearstill.FRESH:
            if seg.crop is None:
                continue
            w, h = _source_size(seg.source)
            x0, y0, x1, y1 = nearstill._shaped(seg.crop, (w, h))
            assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h, (seg.name, wh)
            assert abs((x1 - x0) / (y1 - y0) - wh[0] / wh[1]) < 0.01, (seg.name, wh)
    monkeypatch.setattr(nearstill, "W", 960)
    monkeypatch.setattr(nearstill, "H", 540)
    _clip, table = nearstill.closeup_video(tmp_path / "fresh.avi", frames=2, scenes="fresh")
    assert [s["name"] for s in table] == [nearstill.FRESH[0].name]
    assert nearstill.framing_label((640, 480), 1, "fresh") == "fresh 640x480-s1"
    assert nearstill.framing_label((640, 480), nearstill.SEED) == "640x480"


def test_scenes_default_to_the_close_up_clip_s_and_the_fresh_ones(monkeypatch, capsys):
    """``--scenes``: by default both sets, each once, in order; an unknown one stops with a
    line naming the option."""
    monkeypatch.setattr(sys, "argv", ["nearstill.py"])
    assert nearstill.parse_args().scenes == ["closeup", "fresh"]
    monkeypatch.setattr(sys, "argv", ["nearstill.py", "--scenes", "fresh, fresh"])
    assert nearstill.parse_args().scenes == ["fresh"]
    for bad in ("", "street", "closeup,porch"):
        monkeypatch.setattr(sys, "argv", ["nearstill.py", f"--scenes={bad}"])
        with pytest.raises(SystemExit) as e:
            nearstill.parse_args()
        assert e.value.code == 2
        assert f"--scenes {bad!r}" in capsys.readouterr().err
