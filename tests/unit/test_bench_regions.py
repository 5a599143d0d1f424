"""The scoring of bench/regions.py (people recall/precision) and its hand-checked labels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import harness  # noqa: E402  (bench/harness.py)
import regions  # noqa: E402  (bench/regions.py, found through the path above)

A = [0.0, 0.0, 10.0, 10.0]


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (A, A, 1.0),
        (A, [10.0, 0.0, 20.0, 10.0], 0.0),  # touching edges
        (A, [5.0, 0.0, 15.0, 10.0], 50 / 150),
        (A, [0.0, 0.0, 5.0, 10.0], 0.5),  # half of A, inside it
        (A, [20.0, 20.0, 30.0, 30.0], 0.0),
        ([0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], 0.0),  # empty boxes
    ],
)
def test_iou(a, b, want):
    """IoU of xyxy boxes: identical 1, disjoint or touching 0, partial overlaps exact."""
    assert regions.iou(a, b) == pytest.approx(want)


P1, P2 = [0.0, 0.0, 10.0, 40.0], [100.0, 0.0, 110.0, 40.0]
DC = [200.0, 0.0, 205.0, 20.0]


@pytest.mark.parametrize(
    ("dets", "want"),
    [
        ([], (0, 0, 2, 0)),  # nothing found: both missed
        ([(P1, 0.9), (P2, 0.8)], (2, 0, 0, 0)),
        ([(P1, 0.9), (P1, 0.8)], (1, 1, 1, 0)),  # a duplicate is a false positive
        ([(DC, 0.5)], (0, 0, 2, 1)),  # on a don't-care box: ignored
        ([([50.0, 0.0, 60.0, 40.0], 0.7)], (0, 1, 2, 0)),  # on nobody
        ([([0.0, 0.0, 10.0, 19.0], 0.9)], (0, 1, 2, 0)),  # IoU 0.475 < 0.5: no match
        ([([0.0, 0.0, 10.0, 21.0], 0.9)], (1, 0, 1, 0)),  # IoU 0.525: a match
    ],
)
def test_match_frame(dets, want):
    """Greedy IoU >= 0.5 matching: (true positives, false positives, missed, ignored)."""
    m = regions.match_frame([P1, P2], [DC], dets)
    assert (m["tp"], m["fp"], m["fn"], m["ignored"]) == want
    assert len(m["missed"]) == m["fn"] and len(m["false"]) == m["fp"]


def test_match_frame_takes_the_highest_score_first():
    """Of two detections on one person the higher-scoring one matches, the other is false."""
    low = [0.0, 0.0, 10.0, 40.0]
    high = [0.0, 1.0, 10.0, 39.0]
    m = regions.match_frame([P1], [], [(low, 0.3), (high, 0.9)])
    assert (m["tp"], m["fp"]) == (1, 1)
    assert m["false"] == [low]


def test_score_counts_frames_without_a_message_as_missed():
    """A labelled frame with no detections counts its people as missed."""
    labels = {
        "frames": {
            "0": {"people": [P1], "dont_care": []},
            "40": {"people": [P1, P2], "dont_care": []},
        }
    }
    s = regions.score(labels, {0: [(P1, 0.9)]})
    assert (s["tp"], s["fp"], s["fn"]) == (1, 0, 2)
    assert s["recall"] == pytest.approx(1 / 3) and s["precision"] == 1.0


@pytest.mark.parametrize(
    ("regs", "want"),
    [
        (None, "unknown"),
        ([], "none"),
        ([[0.0, 0.0, 50.0, 50.0]], "whole"),
        ([[5.0, 0.0, 50.0, 50.0]], "part"),
        ([[20.0, 0.0, 50.0, 50.0]], "none"),
        ([[5.0, 0.0, 50.0, 50.0], [-5.0, -5.0, 20.0, 60.0]], "whole"),
    ],
)
def test_covered(regs, want):
    """Whether the regions an agent looked at hold a box whole, in part or not at all."""
    assert regions.covered(P1, regs) == want


def test_labels_are_well_formed():
    """bench/data/vtest_people.json: 20+ frames within 768x576, people boxes at least 40 px
    tall and ordered x1 < x2, y1 < y2."""
    doc = json.loads((ROOT / "bench" / "data" / "vtest_people.json").read_text())
    assert doc["source"] == "vtest.avi" and doc["method"]
    assert len(doc["frames"]) >= 20
    for key, frame in doc["frames"].items():
        assert 0 <= int(key) < 795
        for box in frame["people"] + frame["dont_care"]:
            x1, y1, x2, y2 = box
            assert 0 <= x1 < x2 <= 768 and 0 <= y1 < y2 <= 576, (key, box)
        assert all(b[3] - b[1] >= 40 for b in frame["people"]), key


def test_spread_copies_start_each_camera_at_its_own_point_of_the_clip(tmp_path):
    """Copy k of a clip starts k x 0.618 of the way through it and wraps round, whole, in
    the clip's codec; copy 0 is the clip itself; the agent's config gives camera i copy i."""
    cv2 = regions.cv2
    frames = [img for _, img in zip(range(20), regions.video_frames(), strict=False)]
    source = regions.write_video(tmp_path / "clip.avi", frames, 10, "MJPG")
    copies = regions.spread_copies(source, 3, tmp_path / "copies")
    frames = list(regions.video_frames(source))  # as the copies were made from them
    assert copies[0] == source
    starts = []
    for path in copies[1:]:
        cap = cv2.VideoCapture(str(path))
        assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 20
        assert int(cap.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little") == b"MJPG"
        ok, first = cap.read()
        cap.release()
        assert ok
        diffs = [float(np.abs(first.astype(np.int16) - f).mean()) for f in frames]
        starts.append(int(np.argmin(diffs)))  # the source frame it is a re-encoding of
    assert starts == [int(20 * 0.6180339887), int(20 * ((2 * 0.6180339887) % 1))]
    v = harness.AgentVariant("x", None, cameras=4, sources=copies)
    cfg = harness.agent_config(v, 1883, tmp_path / "state")
    assert [c["source"] for c in cfg["cameras"]] == [*map(str, copies), str(v.source)]


def test_the_at_part_repeats_each_count_in_turn_and_takes_medians(monkeypatch):
    """``--parts at``: every variant at every count once per run, in turn (so the variants
    share the machine's moods), then per variant and count the median frames a second
    and the share dropped, and its range."""
    calls = []
    fps = {("full", 4): [15.0, 16.0, 17.0], ("defaults", 4): [39.0, 40.0, 38.0]}
    drops = {("full", 4): [100, 120, 80], ("defaults", 4): [0, 38, 2]}

    def window(v, source, n, window, quiet, start, warm):
        assert warm == 20.0  # --cameras-warm reaches every run
        k = sum(c == (v.name, n) for c in calls)
        calls.append((v.name, n))
        cams = [{"fps_processed": fps[v.name, n][k], "dropped": drops[v.name, n][k],
                 "frames_in": 756}]  # fmt: skip
        hb = [(100.0 + i, {"cameras": {"cam0": {"fps_processed": 9.5 + i, "frames_dropped": 3 * i},
                                       "cam1": {"fps_processed": 10.0, "frames_dropped": i}}})
              for i in range(3)]  # fmt: skip
        return {"cores": 1.8, "foreign_cores": 0.01, "heartbeats": hb}, cams

    monkeypatch.setattr(regions, "_copies_window", window)
    monkeypatch.setattr(regions, "scene_sources", lambda scenes: {s: Path("x") for s in scenes})
    rows = regions.part_at(20.0, [4], 3, (0.3, 0.0), warm=20.0)
    assert calls == [("full", 4), ("defaults", 4)] * 3
    by = {r["variant"]: r for r in rows}
    assert by["full"]["fps_median"] == 16.0 and by["defaults"]["fps_median"] == 39.0
    assert by["defaults"]["dropped_median"] == round(2 / 756, 3)
    assert by["defaults"]["dropped_range"] == f"0.000-{38 / 756:.3f}"
    assert len(by["full"]["runs"]) == 3
    # Each run's timeline: per heartbeat its time, the frames a second of all cameras and
    # the frames they dropped so far (bursts of drops show, which a run's share hides).
    assert by["full"]["runs"][0]["timeline"] == [[0.0, 19.5, 0], [1.0, 20.5, 4], [2.0, 21.5, 8]]


@pytest.mark.parametrize(
    ("limit", "want", "tried"),
    [
        (20, (20, 21), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 24, 20, 22, 21]),
        (14, (14, 15), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 15]),
        (3, (3, 4), [1, 2, 3, 4]),
        (0, (0, 1), [1]),
        (99, (32, None), list(regions.COUNTS)),
    ],
)
def test_the_cameras_part_tries_the_counts_between_the_last_kept_and_the_first_behind(
    limit, want, tried
):
    """Past 10 cameras ``COUNTS`` steps by 2 and then 8: a box that carries 20 read 16, one
    that carries 15 read 14. The counts between are tried, halving the gap."""
    calls = []

    def attempt(n):
        calls.append(n)
        return n <= limit

    assert regions.between(attempt, regions.COUNTS) == want
    assert calls == tried


def test_the_variants_searches_take_a_step_each_in_turn():
    """A search of one variant after the other read a host that slowed within the hour
    as a ratio of the two: each variant's next count is tried in turn with the others',
    and each search ends as it would alone."""
    calls = []

    def attempt(name, limit):
        def run(n):
            calls.append((name, n))
            return n <= limit

        return run

    got = regions.in_turn([attempt("full", 3), attempt("defaults", 5)], regions.COUNTS)
    assert got == [(3, 4), (5, 6)]
    assert calls == [
        ("full", 1), ("defaults", 1), ("full", 2), ("defaults", 2), ("full", 3),
        ("defaults", 3), ("full", 4), ("defaults", 4), ("defaults", 5), ("defaults", 6),
    ]  # fmt: skip
    assert regions.in_turn([attempt("none", 0)], ()) == [(0, None)]


def test_each_variant_is_given_as_a_multiple_of_full_on_its_own_scene():
    """The issues set cameras per box and CPU as multiples of ``full``'s: each variant of
    a scene is divided by that scene's ``full``; none where ``full`` or the figure is
    missing or zero, and ``full`` itself gets none."""
    rows = [
        {"scene": "vtest", "variant": "full", "cameras": 2},
        {"scene": "vtest", "variant": "defaults", "cameras": 5},
        {"scene": "vtest", "variant": "wide", "cameras": 7},
        {"scene": "still", "variant": "full", "cameras": 0},
        {"scene": "still", "variant": "defaults", "cameras": 9},
        {"scene": "corner", "variant": "defaults", "cameras": 4},
        {"scene": "corner2", "variant": "full", "cameras": 3},
        {"scene": "corner2", "variant": "defaults", "cameras": None},
    ]
    regions.versus_full(rows, "cameras", "x")
    assert [r.get("x") for r in rows] == [None, 2.5, 3.5, None, None, None, None, None]
