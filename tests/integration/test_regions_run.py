"""Region mode in the running agent: a still scene costs almost nothing, motion is reported.

Real agent, real broker, real model; the cameras are image folders played at 10 fps.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from agent.messages import DetectionMessage
from tests.agent_proc import AgentProc
from tests.brokers import wait_until
from tests.objects_clip import FPS, write_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def still(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Forty frames of one real photo with fresh sensor noise each (a still scene)."""
    folder = tmp_path_factory.mktemp("still") / "frames"
    folder.mkdir()
    base = cv2.imread(str(ROOT / "assets" / "bus.jpg")).astype(np.float32)
    rng = np.random.default_rng(3)
    for i in range(40):
        noisy = np.clip(base + rng.normal(0, 3.0, base.shape), 0, 255).astype(np.uint8)
        cv2.imwrite(str(folder / f"{i:04d}.png"), noisy)
    return folder


def run_camera(broker, recorder, tmp_path, source: Path, seconds: float, **detector):
    rec = recorder(broker, ["vision/dev1/#"])
    camera = {"id": "front", "source": str(source), "loop": True, "fps": FPS}
    agent = AgentProc(broker, tmp_path, cameras=[camera], overrides={"detector": detector})
    agent.start()
    try:
        assert agent.wait_logged("agent_started", 30), agent.tail()
        assert wait_until(lambda: rec.on("vision/dev1/health"), 20)
        start = len(rec.on("vision/dev1/front/detections"))
        rec.wait_for(lambda r: False, seconds)
        msgs = [
            DetectionMessage.model_validate(m.json())
            for m in rec.on("vision/dev1/front/detections")
        ]
    finally:
        assert agent.stop() == 0
    return rec, msgs[start:]


@pytest.mark.timeout(90)
def test_still_scene_skips_inference(broker, recorder, tmp_path, still):
    """A still, noisy scene: only the slow sweep and re-checks of the people it found run
    the model, on parts of the frame; motion stays OFF."""
    rec, msgs = run_camera(broker, recorder, tmp_path, still, 6.0)
    # 10 fps for 6 s is 60 frames; the sweep looks every 0.5 s (about 12), the people it
    # finds are re-checked every 2 s, on the same frames or others.
    assert 6 <= len(msgs) <= 30, len(msgs)
    for m in msgs:
        assert m.regions
        for x1, y1, x2, y2 in m.regions:
            assert 0 <= x1 < x2 <= 810 and 0 <= y1 < y2 <= 1080 and x2 - x1 < 810
    motion = [m.payload for m in rec.on("vision/dev1/front/motion")]
    live = [p for p in motion if p]
    assert live and set(live) == {b"OFF"}
    assert motion[-1] == b""  # a clean stop clears it: a stopped agent sees nothing
    hb = rec.on("vision/dev1/health")[-1].json()["cameras"]["front"]
    assert hb["frames_dropped"] == 0 and hb["fps_processed"] >= 0.9 * hb["fps_in"]


@pytest.mark.timeout(90)
def test_a_person_walking_turns_motion_on_and_is_looked_at(broker, recorder, tmp_path):
    """The walking person of the objects clip: motion ON, regions around them, found."""
    clip = write_folder(tmp_path / "clip")
    (tmp_path / "run").mkdir()
    rec, msgs = run_camera(broker, recorder, tmp_path / "run", clip, 6.0)
    assert b"ON" in [m.payload for m in rec.on("vision/dev1/front/motion")]
    found = [m for m in msgs if m.detections]
    assert found, "the walking person was never detected"
    for m in found:
        d = m.detections[0]
        assert m.regions
        # The detection lies in one of the frame's regions (as looked at: cut at whole
        # pixels, so up to half a pixel past the planned region's edge).
        inside = [r[0] - 0.5 <= d.xyxy[0] and d.xyxy[2] <= r[2] + 0.5 for r in m.regions]
        assert any(inside), (m.frame_id, d.xyxy, m.regions)


@pytest.mark.timeout(90)
def test_full_mode_looks_at_the_whole_frame_every_frame(broker, recorder, tmp_path, still):
    """regions: full keeps the old behaviour: every frame, the whole frame, no motion topic."""
    model = str(ROOT / "models" / "yolo11n-pose-320-int8.onnx")
    rec, msgs = run_camera(broker, recorder, tmp_path, still, 4.0, regions="full", model=model)
    assert len(msgs) >= 30
    assert all(m.regions == [(0.0, 0.0, 810.0, 1080.0)] for m in msgs)
    assert rec.on("vision/dev1/front/motion") == []
