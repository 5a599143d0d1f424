"""Capture from real media: vtest.avi and still images, through CameraWorker."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agent.capture import (
    CameraState,
    CameraWorker,
    LatestFrameSlot,
    RoundRobinFeed,
    close_capture,
)
from agent.settings import CameraSettings
from tests.integration._capture_tools import ROOT, SHARED_MEDIA, VTEST, StatusLog

VTEST_FRAMES = 795
S = CameraState


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    ev = threading.Event()
    yield ev
    ev.set()


@pytest.fixture
def run_camera(stop: threading.Event) -> Iterator:
    """Factory: start a CameraWorker on a fresh slot; every worker is stopped afterwards."""
    workers: list[CameraWorker] = []

    def make(**kw: object) -> tuple[CameraWorker, LatestFrameSlot, StatusLog]:
        kw.setdefault("id", "cam")
        status = StatusLog()
        slot = LatestFrameSlot(str(kw["id"]))
        w = CameraWorker(CameraSettings(**kw), slot, stop, status)
        workers.append(w)
        w.start()
        return w, slot, status

    yield make
    for w in workers:
        assert w.stop(3.0)


def drain(
    slot: LatestFrameSlot, worker: CameraWorker, timeout: float
) -> list[tuple[int, tuple[int, ...]]]:
    """(frame_id, image shape) of every frame until the camera goes offline (or timeout).

    Images are not kept: holding 795 of them would measure page faults, not capture.
    """
    frames: list[tuple[int, tuple[int, ...]]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        f = slot.get(0.05)
        if f is not None:
            frames.append((f.frame_id, f.image.shape))
        elif worker.status.state is S.OFFLINE and not slot.has_frame:
            break
    return frames


@pytest.mark.timeout(30)
def test_file_realtime_false_delivers_every_frame_in_order(run_camera):
    """realtime: false hands over all 795 frames of vtest.avi, in order, none dropped."""
    worker, slot, _ = run_camera(source=str(VTEST), realtime=False)
    ids, kept = [], []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and worker.status.state is not S.OFFLINE:
        f = slot.get(0.05)
        if f is not None:
            ids.append(f.frame_id)
            if len(kept) < 3:
                kept.append(f)
            if len(ids) % 100 == 0:
                time.sleep(0.05)  # a consumer hiccup must not cost a frame
    ids += [fid for fid, _ in drain(slot, worker, 2)]
    assert ids == list(range(VTEST_FRAMES))
    assert kept[0].image.shape == (576, 768, 3) and kept[0].image_wh == (768, 576)
    assert slot.frames_dropped == 0
    # Frames must not share a buffer: the consumer may hold several at once.
    assert not np.shares_memory(kept[0].image, kept[1].image)
    assert not np.array_equal(kept[0].image, kept[2].image)
    assert kept[0].t_capture <= kept[1].t_capture <= kept[2].t_capture


@pytest.mark.timeout(30)
def test_file_realtime_false_runs_on_the_recordings_time(run_camera):
    """realtime: false: each frame's scene time (motion, regions, tracks, events go by it)
    is the recording's, a tenth of a second apart for vtest.avi's 10 fps, whether the
    consumer takes the frames faster or slower than that; the capture time stays the
    box's clock (latency, freshness)."""
    _, slot, _ = run_camera(source=str(VTEST), realtime=False)
    frames = []
    deadline = time.monotonic() + 20
    while len(frames) < 12 and time.monotonic() < deadline:
        f = slot.get(0.5)
        if f is not None:
            frames.append((f.t_capture, f.t_media, f.t_scene))
            if len(frames) > 6:
                time.sleep(0.15)  # a slow box: slower than the recording
    assert len(frames) == 12
    assert all(t_media == t_scene for _, t_media, t_scene in frames)
    scene = [t for _, _, t in frames]
    assert scene[0] == pytest.approx(frames[0][0], abs=0.5)  # from the first capture on
    assert np.diff(scene) == pytest.approx([0.1] * 11)
    fast = frames[1][0] - frames[0][0]  # taken at once: far less than a frame period
    slow = frames[-1][0] - frames[-2][0]  # taken 0.15 s apart
    assert fast < 0.08 and slow > 0.12, frames


@pytest.mark.timeout(20)
def test_a_file_in_real_time_and_a_live_camera_run_on_their_capture_time(run_camera):
    """realtime: true: the frames come at the recording's pace, and the scene's time is
    the capture time."""
    _, slot, _ = run_camera(source=str(VTEST), realtime=True)
    f = slot.get(5.0)
    assert f is not None and f.t_media is None and f.t_scene == f.t_capture


@pytest.mark.timeout(20)
def test_a_camera_started_after_a_shutdown_in_this_process_streams(run_camera):
    """An agent's shutdown closes capture (no OpenCV call may return into an exiting
    interpreter); a camera started later in the same process (a new agent, an embedding
    program) opens it again and streams."""
    assert close_capture(1.0)
    _, slot, status = run_camera(source=str(VTEST), realtime=False)
    assert status.wait_for(S.STREAMING, 5), status.items
    assert slot.get(2.0) is not None


@pytest.mark.timeout(20)
def test_file_realtime_is_paced_at_native_fps(run_camera):
    """A 10 FPS file with realtime: true yields about 10 frames/s, evenly spaced."""
    worker, slot, status = run_camera(source=str(VTEST), realtime=True)
    assert status.wait_for(S.STREAMING, 5)
    frames = []
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        f = slot.get(0.2)
        if f is not None:
            frames.append(f)
    span = frames[-1].t_capture - frames[0].t_capture
    rate = (len(frames) - 1) / span
    assert 8.5 <= rate <= 11.5, rate
    gaps = np.diff([f.t_capture for f in frames])
    assert 0.07 < float(np.median(gaps)) < 0.13
    assert 8.0 <= worker.stats().fps_in <= 12.0
    assert abs(frames[-1].ts_capture - time.time()) < 1.0


@pytest.mark.timeout(20)
def test_file_fps_cap_skips_frames_at_real_speed(run_camera):
    """fps: 5 on a 10 FPS file passes every other frame, still at real-time speed."""
    worker, slot, status = run_camera(source=str(VTEST), realtime=True, fps=5)
    assert status.wait_for(S.STREAMING, 5)
    frames = []
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        f = slot.get(0.3)
        if f is not None:
            frames.append(f)
    rate = (len(frames) - 1) / (frames[-1].t_capture - frames[0].t_capture)
    assert 4.0 <= rate <= 6.0, rate
    assert worker.stats().frames_skipped >= 7


@pytest.mark.timeout(30)
def test_file_loop_restarts_at_the_end(run_camera):
    """loop: true rewinds to the first frame and keeps streaming; frame ids keep counting."""
    worker, slot, _ = run_camera(source=str(VTEST), realtime=False, loop=True)
    ids, at = [], {}
    deadline = time.monotonic() + 20
    while len(ids) < VTEST_FRAMES + 20 and time.monotonic() < deadline:
        f = slot.get(0.2)
        if f is not None:
            if len(ids) in (0, VTEST_FRAMES - 1, VTEST_FRAMES):
                at[len(ids)] = f.image
            ids.append(f.frame_id)
    assert ids == list(range(VTEST_FRAMES + 20))
    assert np.array_equal(at[VTEST_FRAMES], at[0])
    assert not np.array_equal(at[VTEST_FRAMES - 1], at[0])
    assert worker.status.state is S.STREAMING
    assert worker.reconnects == 0


@pytest.mark.timeout(30)
def test_file_end_without_loop_goes_offline_and_stays(run_camera):
    """A non-looping file that ends is offline ("end of file") for good: no reconnects."""
    worker, slot, status = run_camera(source=str(VTEST), realtime=False, reconnect_max_s=0.2)
    assert len(drain(slot, worker, 20)) == VTEST_FRAMES
    offline = status.wait_for(S.OFFLINE, 2)
    assert offline is not None and offline.reason == "end of file"
    time.sleep(1.0)
    assert worker.status.state is S.OFFLINE
    assert worker.reconnects == 0
    assert status.states() == [S.STREAMING, S.OFFLINE]
    assert slot.get(0.05) is None


def _image_dir(tmp_path: Path) -> Path:
    d = tmp_path / "frames"
    d.mkdir()
    # Natural order: img2 before img10, although "img10" < "img2" as strings.
    shutil.copy(ROOT / "assets" / "bus.jpg", d / "img2.jpg")
    shutil.copy(ROOT / "assets" / "zidane.jpg", d / "img10.jpg")
    (d / "notes.txt").write_text("not an image")
    return d


@pytest.mark.timeout(20)
@pytest.mark.parametrize("form", ["directory", "glob"])
def test_image_folder_in_natural_order_then_offline(run_camera, tmp_path, form):
    """A directory or glob of images is read in natural order, non-images ignored."""
    d = _image_dir(tmp_path)
    source = str(d) if form == "directory" else str(d / "img*.jpg")
    worker, slot, status = run_camera(source=source, realtime=False)
    frames = drain(slot, worker, 10)
    assert [shape for _, shape in frames] == [(1080, 810, 3), (720, 1280, 3)]
    assert status.wait_for(S.OFFLINE, 2) is not None


@pytest.mark.timeout(20)
def test_image_glob_loops(run_camera, tmp_path):
    """loop: true cycles through the images again."""
    d = _image_dir(tmp_path)
    _, slot, _ = run_camera(source=str(d / "*.jpg"), realtime=False, loop=True)
    shapes = []
    while len(shapes) < 5:
        f = slot.get(2.0)
        assert f is not None
        shapes.append(f.image.shape[:2])
    assert shapes == [(1080, 810), (720, 1280)] * 2 + [(1080, 810)]


@pytest.mark.timeout(20)
def test_image_folder_realtime_is_paced_by_fps(run_camera, tmp_path):
    """realtime images are released at the fps setting (default would be 1 FPS)."""
    d = _image_dir(tmp_path)
    _, slot, _ = run_camera(source=str(d), realtime=True, loop=True, fps=8)
    frames = []
    t_end = time.monotonic() + 1.5
    while time.monotonic() < t_end:
        f = slot.get(0.3)
        if f is not None:
            frames.append(f)
    rate = (len(frames) - 1) / (frames[-1].t_capture - frames[0].t_capture)
    assert 6.5 <= rate <= 9.5, rate


@pytest.mark.timeout(20)
def test_shared_media_folder_reads_only_images(run_camera):
    """The shared media folder (images beside a video) yields just its images."""
    if not SHARED_MEDIA.is_dir():
        pytest.skip(f"{SHARED_MEDIA} not present")
    n_images = sum(1 for p in SHARED_MEDIA.iterdir() if p.suffix.lower() in {".jpg", ".png"})
    worker, slot, _ = run_camera(source=str(SHARED_MEDIA), realtime=False)
    frames = drain(slot, worker, 10)
    assert len(frames) == n_images > 0


@pytest.mark.timeout(20)
def test_two_file_cameras_share_a_feed_fairly(stop):
    """A paced camera is served at its full rate beside a lossless camera hogging the feed."""
    feed = RoundRobinFeed()
    cams = [
        CameraSettings(id="paced", source=str(VTEST), realtime=True, loop=True),
        CameraSettings(id="bulk", source=str(VTEST), realtime=False, loop=True),
    ]
    workers = [CameraWorker(c, feed.add(c.id), stop) for c in cams]
    for w in workers:
        w.start()
    got = {"paced": 0, "bulk": 0}
    # The window opens with the paced camera's first frame (FFmpeg's opens are serialized
    # process-wide: on a loaded box the paced file may wait for the bulk one's).
    deadline = time.monotonic() + 5.0
    first = feed.get(5.0)
    while first is not None and first.camera_id != "paced" and time.monotonic() < deadline:
        first = feed.get(5.0)  # the bulk camera's frames, before the paced one opens
    assert first is not None and first.camera_id == "paced", "the paced camera gave no frame"
    got["paced"] = 1
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        f = feed.get(0.2)
        if f is not None:
            got[f.camera_id] += 1
            time.sleep(0.005)  # inference stand-in: slower than the bulk camera
    paced_dropped = feed.slots[0].frames_dropped
    for w in workers:
        assert w.stop(3.0)
    assert got["paced"] >= 17, got
    assert got["bulk"] > got["paced"], got
    assert paced_dropped == 0  # the paced camera lost nothing
