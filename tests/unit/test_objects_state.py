"""objects.json: each save writes every camera's state, serialising only the one that changed."""

from __future__ import annotations

import json
import threading

import numpy as np
from structlog.testing import capture_logs

from agent.mqtt.topics import Topics
from agent.service.objects import ObjectsService, ObjectsState
from agent.settings import AgentSettings
from tests.unit.test_objects_events import MODEL, T0, run, stage, walk


def test_a_save_keeps_every_other_camera_as_it_was(tmp_path):
    path = tmp_path / "objects.json"
    walking = stage({"confirm_frames": 2})
    assert [e.type for e in run(walking, walk(100, 130, 3))] == ["new"]
    first = ObjectsState(path)
    first.save("front", walking)
    first.save("back", stage())
    # A restart: "front" and "back" are loaded, only "side" is saved by this run, twice.
    state = ObjectsState(path)
    state.load()
    state.save("side", stage())
    state.save("side", walking)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["version"] == 1 and sorted(data["cameras"]) == ["back", "front", "side"]
    ids = [e["id"] for e in walking.events.open_events()]
    assert [e["id"] for e in data["cameras"]["front"]["open"]] == ids
    assert [e["id"] for e in data["cameras"]["side"]["open"]] == ids
    assert data["cameras"]["back"] == {"open": [], "lines": []}
    # The file is exactly what one dump of the whole state gives.
    assert path.read_text(encoding="utf-8") == json.dumps(
        {"version": 1, "cameras": state.cameras}, separators=(",", ":")
    )
    state.forget_open("front")
    again = ObjectsState(path)
    again.load()
    assert again.open_events("front") == []
    assert [e["id"] for e in again.open_events("side")] == ids


class _Outbox:
    """Records what the objects send, and what objects.json held when each event was spooled."""

    def __init__(self, path):
        self.path = path
        self.events: list[tuple[str, list[str]]] = []  # (type, open ids in the file then)

    def publish_spooled(self, topic, payload, qos=None):
        body = json.loads(payload)
        data = json.loads(self.path.read_text(encoding="utf-8"))
        self.events.append((body["type"], [e["id"] for e in data["cameras"]["front"]["open"]]))
        return True

    def publish_state(self, topic, payload):
        pass

    def clear_state(self, topic):
        pass

    def publish_event(self, topic, payload, *, qos=1):
        return True


def _service_on_a_hung_disk(
    tmp_path,
) -> tuple[ObjectsService, _Outbox, threading.Event, threading.Event]:
    """An objects service whose writes of objects.json hang until ``release`` is set;
    ``writing`` is set once a write has begun (and hangs)."""
    settings = AgentSettings(
        state_dir=tmp_path,
        cameras=[{"id": "front", "source": "x"}],  # type: ignore[list-item]
        objects={"confirm_frames": 2},  # type: ignore[arg-type]
    )
    outbox = _Outbox(tmp_path / "objects.json")
    service = ObjectsService(settings, outbox, Topics("edge", "dev"), "boot")
    release, writing = threading.Event(), threading.Event()
    write = service.state._write

    def slow_write():
        writing.set()
        release.wait(10)
        write()

    service.state._write = slow_write  # type: ignore[method-assign]
    service.start(["person"])
    return service, outbox, release, writing


def test_the_frame_path_never_waits_for_the_file_and_events_wait_for_it(tmp_path):
    """A write of objects.json that hangs (a slow SD card, ext4 with discard: a rename can
    take half a second) does not hold up the frames; each event is spooled only once the
    file holds what it changed, in order."""
    service, outbox, release, writing = _service_on_a_hung_disk(tmp_path)
    image = np.zeros((400, 800, 3), np.uint8)
    done = threading.Event()

    def frames():
        for i, d in enumerate(walk(100, 130, 3)):
            service.process("front", d, image, i / 10, T0 + i / 10, MODEL)
        done.set()

    threading.Thread(target=frames, daemon=True).start()
    assert done.wait(5), "a frame waited for objects.json to be written"
    # The save of the new is under way (not yet joined by the end, which would make one
    # write of both: the file would then hold the later state when the new is spooled).
    assert writing.wait(5)
    assert outbox.events == []  # the new waits for the file
    release.set()
    service.close("shutdown", 5.0)
    assert service.state.cameras["front"]["open"] == []
    assert [t for t, _ in outbox.events] == ["new", "end"]
    assert len(outbox.events[0][1]) == 1  # the file held the new event when it was spooled
    assert outbox.events[1][1] == []  # and no longer held it when its end was


def test_a_close_the_disk_outlasts_says_what_waits_for_it(tmp_path):
    """A save still under way when close's time is up: an error names the file and what
    becomes of the ends behind it (they are not dropped without a word)."""
    service, outbox, release, writing = _service_on_a_hung_disk(tmp_path)
    image = np.zeros((400, 800, 3), np.uint8)
    for i, d in enumerate(walk(100, 130, 3)):
        service.process("front", d, image, i / 10, T0 + i / 10, MODEL)
    assert writing.wait(5)
    with capture_logs() as logs:
        service.close("shutdown", 0.2)
    late = [e for e in logs if e["event"] == "objects_state_close_timed_out"]
    assert len(late) == 1 and late[0]["path"] == str(tmp_path / "objects.json"), logs
    assert "next start" in late[0]["hint"]
    assert outbox.events == []  # nothing spooled ahead of the file
    release.set()
    service.writer._thread.join(5)
    assert [t for t, _ in outbox.events] == ["new", "end"]  # in order, once the disk is done
