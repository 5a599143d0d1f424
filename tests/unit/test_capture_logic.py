"""Pure capture logic: source classification, backoff, pacing, state machine, freshness."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from agent.capture.backoff import Backoff
from agent.capture.base import (
    CameraState,
    CameraStateMachine,
    CameraStatus,
    InvalidTransitionError,
)
from agent.capture.camera import _RecordingTime
from agent.capture.freshness import FreezeDetector
from agent.capture.pacing import MediaClock, RateGate
from agent.capture.sources import SourceKind, classify_source, redact
from agent.settings import CameraSettings

S = CameraState


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("0", SourceKind.DEVICE),
        ("12", SourceKind.DEVICE),
        ("/dev/video2", SourceKind.DEVICE),
        ("/dev/v4l/by-id/usb-Logitech-video-index0", SourceKind.DEVICE),
        ("rtsp://cam.local:554/stream1", SourceKind.URL),
        ("RTSPS://user:pw@cam/s", SourceKind.URL),
        ("http://127.0.0.1:8080/video.mjpg", SourceKind.URL),
        ("https://example.com/live.m3u8", SourceKind.URL),
        ("videotestsrc ! videoconvert ! appsink", SourceKind.GSTREAMER),
        ("nvarguscamerasrc ! nvvidconv ! video/x-raw,format=BGRx ! appsink", SourceKind.GSTREAMER),
        ("assets/vtest.avi", SourceKind.FILE),
        ("/media/clips/door.mp4", SourceKind.FILE),
        ("assets/*.jpg", SourceKind.IMAGES),
        ("/data/frames/img_[0-9].png", SourceKind.IMAGES),
        ("assets/bus.jpg", SourceKind.IMAGES),
        ("assets", SourceKind.IMAGES),
    ],
)
def test_classify_source(source, kind):
    """Each config string form maps to the backend that can read it."""
    assert classify_source(source) is kind


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("rtsp://admin:s3cret@10.0.0.5:554/h264", "rtsp://***@10.0.0.5:554/h264"),
        ("http://10.0.0.5/mjpg", "http://10.0.0.5/mjpg"),
        ("rtspsrc location=rtsp://u:p@cam/s ! decodebin ! appsink",
         "rtspsrc location=rtsp://***@cam/s ! decodebin ! appsink"),
        ("/dev/video0", "/dev/video0"),
    ],
)  # fmt: skip
def test_redact_removes_credentials(source, shown):
    """Credentials never reach logs or the retained status topic."""
    assert redact(source) == shown


@pytest.mark.timeout(5)
def test_backoff_grows_exponentially_with_jitter_up_to_the_cap():
    """Delay n lies in [d/2, d] with d = min(cap, base*2^n); reset starts over."""
    b = Backoff(0.5, 4.0, rng=random.Random(1))
    for n in range(40):
        d = min(4.0, 0.5 * 2**n)
        delay = b.next_delay()
        assert d / 2 <= delay <= d, (n, delay)
    b.reset()
    assert b.next_delay() <= 0.5


@pytest.mark.timeout(5)
def test_backoff_jitter_spreads_cameras_apart():
    """Two cameras failing together do not retry at the same instants."""
    a, b = Backoff(0.5, 30.0, random.Random(1)), Backoff(0.5, 30.0, random.Random(2))
    assert [round(a.next_delay(), 3) for _ in range(5)] != [
        round(b.next_delay(), 3) for _ in range(5)
    ]


@pytest.mark.timeout(5)
def test_backoff_base_above_cap_is_capped():
    """A cap below the base delay still bounds every delay."""
    b = Backoff(0.5, 0.2)
    assert all(b.next_delay() <= 0.2 for _ in range(5))


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("source_fps", "cap", "expected"),
    [(30.0, 10.0, 10), (30.0, 5.0, 5), (25.0, 10.0, 10), (10.0, 30.0, 10), (30.0, 1.0, 1)],
)
def test_rate_gate_admits_the_capped_rate(source_fps, cap, expected):
    """A camera at source_fps capped at cap passes about min(cap, source_fps) per second."""
    gate = RateGate(cap, slack_s=0.5 / source_fps)
    rng = random.Random(0)
    # 10 s of frames with +-2 ms arrival jitter.
    times = [i / source_fps + rng.uniform(-0.002, 0.002) for i in range(int(10 * source_fps))]
    admitted = sum(gate.admit(t) for t in times)
    assert abs(admitted / 10 - expected) <= 0.2, admitted


@pytest.mark.timeout(5)
def test_rate_gate_restarts_after_a_gap_instead_of_bursting():
    """After a long gap the cap resumes from now; the backlog is not admitted at once."""
    gate = RateGate(10.0)
    assert gate.admit(0.0)
    assert gate.admit(5.0)
    assert not gate.admit(5.01)
    assert gate.wait_s(5.01) == pytest.approx(0.09)


@pytest.mark.timeout(5)
def test_media_clock_paces_and_rebases_when_far_behind():
    """Frame k is due at start + k/fps; a player over 1 s late restarts the clock."""
    clock = MediaClock(10.0, start=100.0)
    assert clock.due(100.0) == 100.0
    clock.advance()
    assert clock.due(100.05) == pytest.approx(100.1)
    clock.advance()
    assert clock.due(105.0) == 105.0  # 4.8 s late: rebased
    clock.advance()
    assert clock.due(105.0) == pytest.approx(105.1)


@pytest.mark.timeout(5)
def test_recording_time_counts_frames_from_the_session_start_as_track_does():
    """realtime: false: frame i of a session is at the session's start plus i periods,
    reckoned as ``edge-agent track`` reckons it (index / fps), not summed period by period:
    a sum's rounding put a cadence due exactly on a frame on the other side of it now and
    then, and from there the agent's regions and boxes drifted from track's. A session of
    the file opened again goes on one period after the last frame, or from its own first
    capture if that is later."""
    cam = CameraSettings(id="clip", source="clip.mp4", realtime=False)
    rt = _RecordingTime()
    # read sessions of a 10 fps file (the time needs only their source's fps)
    first, again, later = (SimpleNamespace(source=SimpleNamespace(fps=10.0)) for _ in "abc")
    start = 12345.678
    ts = [rt.at(first, start + 0.001 * i, cam) for i in range(1000)]
    assert ts == [start + i * 0.1 for i in range(1000)]  # equal, not approximately
    resumed = start + 1000 * 0.1
    assert rt.at(again, start + 1.0, cam) == resumed  # opened at once: no step back
    assert rt.at(again, start + 1.1, cam) == resumed + 0.1
    assert rt.at(later, 99999.0, cam) == 99999.0  # opened much later: from its capture


@pytest.mark.timeout(5)
def test_recording_time_of_an_image_folder_follows_its_fps_set_at_run_time():
    """An image folder plays at the camera's ``fps``: one changed by config/set while it
    is read goes on from the frame after the last one at the new rate (the reader paces
    by the camera's settings of now, and so does the recording's time)."""
    rt = _RecordingTime()
    folder = SimpleNamespace(source=SimpleNamespace(fps=None))
    at5 = CameraSettings(id="pics", source="pics/", realtime=False, fps=5)
    at2 = at5.model_copy(update={"fps": 2})
    assert [rt.at(folder, 100.0 + i, at5) for i in range(3)] == [100.0, 100.2, 100.4]
    assert [rt.at(folder, 200.0 + i, at2) for i in range(3)] == [100.6, 101.1, 101.6]


@pytest.mark.timeout(5)
def test_state_machine_publishes_changes_in_order_and_skips_repeats():
    """Each change reaches the callback once, in order; the same state+reason is a no-op."""
    got: list[CameraStatus] = []
    m = CameraStateMachine("front", got.append)
    assert m.transition(S.RECONNECTING, "cannot open")
    assert not m.transition(S.RECONNECTING, "cannot open")
    assert m.transition(S.RECONNECTING, "stalled")
    assert m.transition(S.STREAMING, "")
    assert m.transition(S.OFFLINE, "end of file")
    assert [(s.state, s.reason) for s in got] == [
        (S.RECONNECTING, "cannot open"),
        (S.RECONNECTING, "stalled"),
        (S.STREAMING, ""),
        (S.OFFLINE, "end of file"),
    ]
    assert all(s.camera_id == "front" for s in got)


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ([], S.STARTING),
        ([S.STREAMING], S.STREAMING),
        ([S.OFFLINE], S.STREAMING),
        ([S.OFFLINE], S.RECONNECTING),
    ],
)
def test_state_machine_rejects_transitions_not_allowed(path, bad):
    """Offline and stopped are final; nothing returns to starting."""
    m = CameraStateMachine("c")
    for state in path:
        m.transition(state, "x")
    with pytest.raises(InvalidTransitionError):
        m.transition(bad, "y")


@pytest.mark.timeout(5)
def test_state_machine_ignores_late_reports_after_stopped():
    """A capture thread finishing after stop() cannot bring a stopped camera back."""
    got: list[CameraStatus] = []
    m = CameraStateMachine("c", got.append)
    m.transition(S.STOPPED, "stopped")
    assert not m.transition(S.STREAMING, "")
    assert m.status.state is S.STOPPED
    assert [s.state for s in got] == [S.STOPPED]


@pytest.mark.timeout(5)
def test_state_machine_survives_a_failing_callback():
    """A subscriber that raises does not stop the transition."""

    def boom(_: CameraStatus) -> None:
        raise RuntimeError("subscriber bug")

    m = CameraStateMachine("c", boom)
    assert m.transition(S.STREAMING, "")
    assert m.status.state is S.STREAMING


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("state", "contract"),
    [
        (S.STARTING, "reconnecting"),
        (S.STREAMING, "streaming"),
        (S.RECONNECTING, "reconnecting"),
        (S.OFFLINE, "offline"),
        (S.STOPPED, "offline"),
    ],
)
def test_contract_state_values(state, contract):
    """Internal states map onto the three values of the MQTT camera status topic."""
    assert state.contract == contract


@pytest.mark.timeout(5)
def test_freeze_detector_counts_identical_frames_only():
    """Byte-identical frames accumulate frozen time; any sampled change resets it."""
    img = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    fd = FreezeDetector()
    assert fd.frozen_for(img, 0.0) == 0.0
    assert fd.frozen_for(img.copy(), 4.0) == 4.0
    changed = img.copy()
    changed[7, 10, 0] ^= 1  # a sampled pixel (grid 15 x 20, offset 7 x 10)
    assert fd.frozen_for(changed, 5.0) == 0.0
    assert fd.frozen_for(changed, 6.5) == 1.5


@pytest.mark.timeout(5)
def test_freeze_detector_does_not_flag_a_static_but_noisy_scene():
    """A static dark scene with sensor noise of one grey level is never called frozen."""
    rng = np.random.default_rng(1)
    scene = np.full((480, 640, 3), 12, np.uint8)
    fd = FreezeDetector()
    frozen = [
        fd.frozen_for(scene + rng.integers(0, 2, scene.shape, dtype=np.uint8), t / 30)
        for t in range(300)
    ]
    assert max(frozen) == 0.0


@pytest.mark.timeout(5)
def test_freeze_detector_handles_resolution_change():
    """A new resolution is a new image, not an error."""
    fd = FreezeDetector()
    fd.frozen_for(np.zeros((480, 640, 3), np.uint8), 0.0)
    assert fd.frozen_for(np.zeros((720, 1280, 3), np.uint8), 1.0) == 0.0
