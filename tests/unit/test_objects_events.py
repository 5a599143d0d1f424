"""The objects stage: confirmation, updates, end once per new, zones, lines, masks, restarts."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from agent.detect.detections import Detections
from agent.messages import EventMessage, ModelRef
from agent.objects.stage import CameraObjects
from agent.settings import CameraSettings, ObjectsSettings

MODEL = ModelRef(name="m", version=1, sha256="ab")
WH = (800, 400)
T0 = 1_764_000_000.0


def box(cx: float, bottom: float, score: float = 0.9, w: float = 40, h: float = 100) -> tuple:
    return (cx - w / 2, bottom - h, cx + w / 2, bottom, score)


def dets(*boxes: tuple) -> Detections:
    arr = np.array([b[:4] for b in boxes], np.float32).reshape(-1, 4)
    n = len(boxes)
    return Detections(
        arr, np.array([b[4] for b in boxes], np.float32), np.zeros(n, np.int32), ("person",) * n
    )


def stage(params: dict[str, Any] | None = None, **camera: Any) -> CameraObjects:
    cam = CameraSettings(id="front", source="x", **camera)
    return CameraObjects(cam, "dev", "boot", ObjectsSettings(**(params or {})))


def run(st: CameraObjects, frames: list[Detections | None], t0: float = 0.0) -> list[EventMessage]:
    events: list[EventMessage] = []
    for i, d in enumerate(frames):
        t = t0 + i / 10
        events += st.step(d, t, T0 + t, WH, MODEL).events
    return events


def walk(x0: float, x1: float, n: int, bottom: float = 300, score: float = 0.9) -> list[Detections]:
    return [dets(box(x0 + (x1 - x0) * i / max(1, n - 1), bottom, score)) for i in range(n)]


def test_new_needs_confirmation_frames():
    """A track becomes an object on its confirm_frames-th sighting, not before."""
    st = stage({"confirm_frames": 4})
    events = run(st, walk(100, 130, 4))
    assert [e.type for e in events] == ["new"]
    st2 = stage({"confirm_frames": 4})
    assert run(st2, walk(100, 130, 3)) == []


@pytest.mark.parametrize(("score", "makes_event"), [(0.9, True), (0.55, True), (0.45, False)])
def test_new_needs_a_median_score(score, makes_event):
    """A track whose median score is under confirm_score never makes an event."""
    st = stage({"confirm_score": 0.5, "track_score": 0.4})
    events = run(st, walk(100, 200, 10, score=score))
    assert any(e.type == "new" for e in events) is makes_event


def test_one_frame_false_positive_makes_no_event():
    """A box seen in one frame only: no new, no end."""
    st = stage()
    events = run(st, [dets(box(400, 300)), *[dets()] * 40])
    assert events == []


def test_every_new_has_exactly_one_end():
    """Objects that leave end once (lost); those still there end once at close."""
    st = stage({"lost_s": 0.5})
    frames = [dets(box(100 + 5 * i, 300), box(600, 350)) for i in range(20)]
    frames += [dets(box(600, 350))] * 20  # the walker vanishes, the other stays
    events = run(st, frames)
    events += st.close("shutdown", T0 + 10).events
    news = Counter(e.id for e in events if e.type == "new")
    ends = Counter(e.id for e in events if e.type == "end")
    assert news == ends and set(news.values()) == {1} and len(news) == 2
    reasons = sorted(e.end_reason or "" for e in events if e.type == "end")
    assert reasons == ["lost", "shutdown"]
    assert [e.seq for e in events] == list(range(len(events)))


def test_a_parked_object_sends_no_periodic_updates():
    """A still object: one update when it becomes stationary, then silence."""
    st = stage({"stationary_s": 2.0})
    events = run(st, [dets(box(400, 300))] * 600)  # 60 s
    assert [e.type for e in events] == ["new", "update"]
    assert events[1].stationary is True


def test_updates_are_rate_limited():
    """Zone changes on every frame still give at most one update per update_interval_s."""
    zones = {
        "a": {"polygon": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "inertia": 1},
        "b": {"polygon": [[0.5, 0], [1, 0], [1, 1], [0.5, 1]], "inertia": 1},
    }
    st = stage({"update_interval_s": 1.0}, zones=zones)
    # Feet step across the zones' shared border (x 400) and back every frame for 10 s, a
    # few pixels each way, as a detector's boxes jitter.
    frames = [dets(box(396 if i % 2 else 404, 300)) for i in range(100)]
    events = run(st, frames)
    updates = [e for e in events if e.type == "update"]
    assert 5 <= len(updates) <= 10


@pytest.mark.parametrize(
    ("points", "x0", "x1", "direction"),
    [
        ([[0.5, 0.0], [0.5, 1.0]], 100, 700, "in"),  # the contract's example: left to right
        ([[0.5, 0.0], [0.5, 1.0]], 700, 100, "out"),
        ([[0.5, 1.0], [0.5, 0.0]], 100, 700, "out"),  # drawn the other way
    ],
)
def test_line_crossing_direction_and_totals(points, x0, x1, direction):
    """A walk across a line counts once, in the direction the contract defines."""
    st = stage(lines={"gate": {"points": points}})
    events = run(st, walk(x0, x1, 30))
    assert st.line_totals == {("gate", "person", direction): 1}
    crossed = [c.direction for e in events for c in e.crossings]
    assert set(crossed) == {direction}


def test_line_outside_the_segment_does_not_count():
    """Passing beside a short segment is no crossing."""
    st = stage(lines={"gate": {"points": [[0.5, 0.0], [0.5, 0.3]]}})
    run(st, walk(100, 700, 30, bottom=350))  # feet at y=350 of 400; the line ends at 120
    assert st.line_totals == {}


def test_jitter_on_a_line_counts_nothing():
    """Feet wobbling a few pixels around a line stay within its deadband."""
    st = stage(lines={"gate": {"points": [[0.5, 0.0], [0.5, 1.0]]}})
    run(st, [dets(box(400 + (3 if i % 2 else -3), 300)) for i in range(50)])
    assert st.line_totals == {}


def test_crossing_before_confirmation_is_counted():
    """A fast object crossing in its first frames is counted once it is confirmed."""
    st = stage({"confirm_frames": 5}, lines={"gate": {"points": [[0.5, 0.0], [0.5, 1.0]]}})
    events = run(st, walk(360, 460, 8))
    assert st.line_totals == {("gate", "person", "in"): 1}
    assert events[0].type == "new" and events[0].crossings[0].direction == "in"


def test_zone_inertia_and_counts():
    """Entering needs `inertia` looks inside; counts follow confirmed objects."""
    zone = {"polygon": [[0.5, 0.0], [1.0, 0.0], [1.0, 1.0], [0.5, 1.0]], "inertia": 3}
    st = stage(zones={"right": zone})
    counts: list[int] = []
    for i, d in enumerate(walk(100, 700, 40)):
        out = st.step(d, i / 10, T0 + i / 10, WH, MODEL)
        if ("right", "person") in out.zone_counts:
            counts.append(out.zone_counts[("right", "person")])
    assert counts == [1]


def test_loitering_zone_waits():
    """With loiter_s, an object counts as in the zone only after that long inside."""
    zone = {"polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "inertia": 1, "loiter_s": 3.0}
    st = stage(zones={"door": zone})
    events = run(st, [dets(box(400, 300))] * 25)
    assert all(e.zones == [] for e in events)
    events = run(st, [dets(box(400, 300))] * 20, t0=2.5)
    assert any(e.zones == ["door"] for e in events)


def test_zone_objects_filter():
    """A zone for cars does not count people."""
    zone = {"polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "objects": ["car"]}
    st = stage(zones={"drive": zone})
    events = run(st, [dets(box(400, 300))] * 20)
    assert events and all(e.zones == [] and e.entered_zones == [] for e in events)


def test_masks_drop_detections():
    """A detection whose feet fall inside a mask is dropped before tracking."""
    st = stage(masks=[[[0.0, 0.0], [0.5, 0.0], [0.5, 1.0], [0.0, 1.0]]])
    out = st.step(dets(box(100, 300), box(600, 300)), 0.0, T0, WH, MODEL)
    assert out.detections is not None and len(out.detections) == 1
    assert float(out.detections.xyxy[0, 0]) == 580.0
    # Each kept detection's row among those handed in (the looker's record of the frame).
    assert out.rows is not None and out.rows.tolist() == [1]
    assert st.step(dets(box(600, 300)), 0.1, T0, WH, MODEL).rows is None  # none masked


def test_restart_ends_what_was_open():
    """Open events saved by one run are ended with reason restart by the next."""
    st = stage()
    new = run(st, walk(100, 130, 5))
    saved = st.events.open_events()
    assert [s["id"] for s in saved] == [new[0].id]
    later = stage()
    end = later.events.end_restored(saved[0], T0 + 100)
    assert end.type == "end" and end.end_reason == "restart" and end.id == new[0].id
    assert end.seq == 0 and end.boot_id == "boot" and end.start_ts == new[0].start_ts


def test_configure_keeps_tracks_and_totals():
    """New lines apply from the next frame; events and totals carry on."""
    st = stage(lines={"gate": {"points": [[0.5, 0.0], [0.5, 1.0]]}})
    run(st, walk(100, 700, 30))
    st.configure(
        CameraSettings(id="front", source="x", lines={"gate2": {"points": [[0.25, 0], [0.25, 1]]}})
    )
    run(st, walk(100, 700, 30), t0=10)
    assert st.line_totals == {("gate", "person", "in"): 1, ("gate2", "person", "in"): 1}


def test_event_messages_follow_the_contract():
    """new carries the contract's fields: ids, times in ms, model, has_snapshot."""
    st = stage()
    e = run(st, walk(100, 130, 5))[0]
    body = e.model_dump(mode="json", by_alias=True)
    assert body["schema"] == "edge-vision/event/1"
    assert body["id"].startswith("front-") and body["end_ts"] is None
    assert body["ts"].endswith("Z") and len(body["ts"]) == 24
    assert body["has_snapshot"] is True and body["model"]["name"] == "m"


def _run_cut(st: CameraObjects, frames: list[Detections | None], cut_at: int) -> list[EventMessage]:
    events: list[EventMessage] = []
    for i, d in enumerate(frames):
        t = i / 10
        events += st.step(d, t, T0 + t, WH, MODEL, cut=i == cut_at).events
    return events


def test_a_scene_cut_counts_nothing_and_ends_tracks():
    """A box that jumps across a line and grows at a cut: no crossing, ended by scene_change."""
    st = stage(
        lines={"gate": {"points": [[0.5, 0.0], [0.5, 1.0]]}},
        zones={"right": {"polygon": [[0.5, 0.0], [1.0, 0.0], [1.0, 1.0], [0.5, 1.0]]}},
    )
    # Left of the line, walking right; at the cut the box jumps over it and grows (still
    # overlapping: without the cut the tracker would drag the track there).
    before = [dets(box(190 + 20 * i, 300, w=100, h=250)) for i in range(10)]
    after = [dets(box(440, 390, w=150, h=340))] * 10
    events = _run_cut(st, [*before, *after], cut_at=10)
    assert st.line_totals == {}
    ends = [e for e in events if e.type == "end"]
    assert [e.end_reason for e in ends] == ["scene_change"] and not ends[0].crossings
    first = ends[0].id
    later = [e for e in events if e.id != first]
    assert later and later[0].type == "new" and not later[0].entered_zones
    # The same walk with no cut is one track crossing the line (the box is dragged).
    st2 = stage(lines={"gate": {"points": [[0.5, 0.0], [0.5, 1.0]]}})
    _run_cut(st2, [*before, *after], cut_at=-1)
    assert sum(st2.line_totals.values()) == 1


def test_a_track_that_fits_goes_on_across_a_cut():
    """Lights switched: a person standing where they were keeps their track and event."""
    st = stage()
    frames = [dets(box(300, 300))] * 10 + [dets(box(302, 301))] * 5
    events = _run_cut(st, frames, cut_at=10)
    assert [e.type for e in events if e.type in ("new", "end")] == ["new"]
    ids = {e.id for e in events}
    assert len(ids) == 1


def test_a_cut_not_looked_at_ends_every_track():
    """A cut frame that was not looked at cannot confirm anyone: every track ends."""
    st = stage()
    events = _run_cut(st, [dets(box(300, 300))] * 10 + [None], cut_at=10)
    assert [e.end_reason for e in events if e.type == "end"] == ["scene_change"]
    assert len(st.tracker) == 0
