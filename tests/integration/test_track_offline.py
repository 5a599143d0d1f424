"""`edge-agent track` counts what the live agent would: its fps sampling, and no count from
a scene cut (real model, real media written to a video file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import yaml

from agent.capture.pacing import RateGate
from agent.commands.track import Offline
from agent.modeltools.media import read_video_frames
from agent.settings import AgentSettings
from tests.agent_proc import VIDEO, AgentProc
from tests.brokers import wait_until
from tests.objects_clip import FPS, LINE, SIZE_WH, background, frames, person

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, images: list[np.ndarray], fps: float = FPS) -> Path:
    size_wh = (images[0].shape[1], images[0].shape[0])
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), fps, size_wh)
    for img in images:
        writer.write(img)
    writer.release()
    return path


def _track(
    tmp_path: Path, clip: Path, camera: dict[str, Any], *args: str, **sections: Any
) -> tuple[dict, str]:
    config = tmp_path / "track.yaml"
    camera = {"id": "door", "source": "unused", **camera}
    body = {"cameras": [camera], "objects": {"lost_s": 1.0}, **sections}
    config.write_text(yaml.safe_dump(body))
    cmd = [sys.executable, "-m", "agent", "track", str(clip), "--config", str(config), *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two cycles of tests/objects_clip.py (a real person crosses the middle line) at 10 fps."""
    cycle = [img for img, _ in frames()]
    return _write(tmp_path_factory.mktemp("walks") / "walks.avi", cycle * 2)


@pytest.mark.timeout(300)
def test_track_samples_at_the_camera_fps(tmp_path, walks):
    """fps: 5 takes the frames the live reader's gate passes, and counts what it counts."""
    n = 2 * len(frames())
    gate = RateGate(5.0, 0.5 / FPS)  # the live reader's gate on a 10 fps file (reader.py)
    picked = sum(gate.admit(i / FPS) for i in range(n))
    summary, err = _track(tmp_path, walks, {"fps": 5, "lines": {"mid": LINE}})
    assert "sampling at 5 fps (cameras.door.fps); --fps overrides" in err
    assert summary["frames"] == picked == n // 2
    # One crossing per cycle: what the live agent counts on this clip (test_objects.py).
    assert summary["lines"] == {"mid/person/in": 2, "mid/person/out": 0}, summary
    every, err = _track(tmp_path, walks, {"fps": 5, "lines": {"mid": LINE}}, "--fps", "10")
    assert "every frame" in err and every["frames"] == n
    assert every["lines"] == summary["lines"]
    unset, err = _track(tmp_path, walks, {"lines": {"mid": LINE}}, "--max-frames", "3")
    assert "every frame (cameras.door.fps not set" in err and unset["frames"] == 3


def _cut_clip(path: Path) -> Path:
    """A person standing left of a line; then a cut to another scene (a zoomed crop of a
    vtest.avi frame) where the same person, closer, stands right of it: nobody walks."""
    w, h = SIZE_WH
    near = person()
    ph, pw = near.shape[:2]
    big = cv2.resize(near, None, fx=1.5, fy=1.5)
    bh, bw = big.shape[:2]
    cap = cv2.VideoCapture(str(ROOT / "assets" / "vtest.avi"))
    cap.set(cv2.CAP_PROP_POS_FRAMES, 300)
    ok, street = cap.read()
    cap.release()
    assert ok
    other = cv2.resize(street[60:420, 100:580], (w, h))
    images = []
    for i in range(40):
        img = background() if i < 20 else other.copy()
        if i < 20:  # feet at x 232 (the line is at 250)
            img[h - ph - 20 : h - 20, 200 + i % 2 : 200 + i % 2 + pw] = near
        else:  # feet at x 274; the box overlaps the one before the cut (IoU 0.23)
            img[h - bh - 5 : h - 5, 225 + i % 2 : 225 + i % 2 + bw] = big
        images.append(img)
    return _write(path, images)


@pytest.mark.timeout(200)
def test_a_scene_cut_counts_no_crossing(tmp_path):
    """A cut that moves a person's box over a line: 0 crossings, the track ends scene_change."""
    clip = _cut_clip(tmp_path / "cut.avi")
    events = tmp_path / "events.jsonl"
    line = {"gate": {"points": [[0.39, 0.0], [0.39, 1.0]]}}
    # The whole frame, every frame: region mode does not find a person standing still from
    # the start (issue 38's first point), and a cut must count nothing in either mode.
    summary, _ = _track(
        tmp_path, clip, {"lines": line}, "--events", str(events), detector={"regions": "full"}
    )
    assert set(summary["lines"].values()) == {0}, summary  # nobody crossed
    evs = [json.loads(x) for x in events.read_text().splitlines()]
    ends = [e for e in evs if e["type"] == "end"]
    assert any(e["end_reason"] == "scene_change" for e in ends), ends
    assert not any(e["crossings"] for e in evs)


@pytest.mark.timeout(120)
def test_track_counts_what_the_live_agent_counts(broker, recorder, tmp_path, walks):
    """The same clip, fps: 5: the live agent's retained line count is track's count."""
    camera = {"fps": 5, "lines": {"mid": LINE}}
    offline, _ = _track(tmp_path, walks, camera)
    live_cam = {"id": "door", "source": str(walks), "realtime": True, "loop": False, **camera}
    rec = recorder(broker, ["vision/dev1/#"])
    (tmp_path / "live").mkdir()
    agent = AgentProc(
        broker, tmp_path / "live", cameras=[live_cam], overrides={"objects": {"lost_s": 1.0}}
    )
    topic = "vision/dev1/door/lines/mid/person/in"

    def ends() -> int:
        return sum(m.json()["type"] == "end" for m in rec.on("vision/dev1/door/events"))

    try:
        agent.start()
        assert wait_until(lambda: ends() >= 2, 60), agent.tail()
    finally:
        assert agent.stop() == 0
    counts = [int(m.payload) for m in rec.on(topic)]
    assert counts and counts[-1] == offline["lines"]["mid/person/in"], (counts, offline)


@pytest.mark.timeout(180)
def test_a_recording_read_losslessly_gets_tracks_boxes_frame_for_frame(broker, recorder, tmp_path):
    """The live agent playing a recording with ``realtime: false`` (the embedded defaults:
    region mode, coarse looks, tracks) publishes, frame for frame, the boxes that
    ``edge-agent track``'s path finds on it: each frame is planned with the tracks of the
    one before (one frame in flight), at the recording's time reckoned as track reckons it
    (index / fps). Before, a second worker planned ahead, and a summed frame period put a
    cadence on the other side of a frame now and then: the boxes drifted apart."""
    n = 120
    images = [f.image for f in read_video_frames(VIDEO, range(n))]
    clip = _write(tmp_path / "street.avi", images, 10.0)
    camera = {"id": "street", "source": str(clip), "realtime": False, "loop": False}
    settings = AgentSettings(cameras=[camera])
    pipe = Offline.of(settings, settings.cameras[0])
    offline: dict[int, list[list[float]]] = {}
    for i, frame in enumerate(read_video_frames(clip, range(n))):
        found, out = pipe.step(frame.image, i / 10.0, 1.7e9 + i / 10.0)
        if found is not None and out.detections is not None:
            offline[i] = sorted(out.detections.xyxy.round(1).tolist())
    topic = "vision/dev1/street/detections"
    rec = recorder(broker, [topic])
    (tmp_path / "live").mkdir()
    agent = AgentProc(broker, tmp_path / "live", cameras=[camera],
                      overrides={"detector": {"model": None}})  # fmt: skip
    try:
        agent.start()
        assert wait_until(lambda: len(rec.on(topic)) >= len(offline), 120), agent.tail()
    finally:
        assert agent.stop() == 0
    live = {m.json()["frame_id"]: m.json()["detections"] for m in rec.on(topic)}
    assert sorted(live) == sorted(offline), "the same frames looked at"
    drift = []
    for i, boxes in offline.items():
        got = sorted(d["xyxy"] for d in live[i])
        if len(got) != len(boxes) or any(
            abs(a - b) > 0.11
            for g, o in zip(got, boxes, strict=True)
            for a, b in zip(g, o, strict=True)
        ):
            drift.append(i)
    assert drift == [], f"frames whose boxes differ from track's: {drift[:10]}"
    assert sum(len(b) for b in offline.values()) > 4 * n  # a busy street, not empty frames
