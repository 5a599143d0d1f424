"""objects.json: each save writes every camera's state, serialising only the one that changed."""

from __future__ import annotations

import json

from agent.service.objects import ObjectsState
from tests.unit.test_objects_events import run, stage, walk


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
