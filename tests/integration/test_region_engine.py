"""The inference engine in region mode, in process, on real vtest.avi frames: what each
processed frame says about the model work it took (the health window of model updates
judges a new model by it)."""

from __future__ import annotations

import queue
import threading

import pytest

from agent.capture.latest import RoundRobinFeed
from agent.detect.detector import Detector
from agent.detect.inputs import build_detector
from agent.frames import Frame
from agent.modeltools.media import read_video_frames
from agent.regions.looker import Look, Looker
from agent.service.engine import InferenceEngine, ModelSet, Processed
from agent.settings import PROJECT_ROOT, DetectorSettings
from tests.agent_proc import VIDEO

FRAMES = 60


class _Frames:
    """The engine's feed: a fixed run of frames, in order."""

    def __init__(self, frames: list[Frame]) -> None:
        self._q: queue.Queue[Frame] = queue.Queue()
        for f in frames:
            self._q.put(f)

    def get(self, timeout: float) -> Frame | None:
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None

    def ready_count(self) -> int:
        return self._q.qsize()

    def finished(self, camera_id: str) -> None:
        pass


class _RecordingLooker(Looker):
    """A looker that keeps what it planned, by capture time."""

    def __init__(self) -> None:
        super().__init__()
        self.looks: dict[float, Look] = {}

    def look(self, image, t, input_hw, stride=None, coarse=None, frame_id=None) -> Look:  # type: ignore[no-untyped-def]
        out = super().look(image, t, input_hw, stride, coarse, frame_id)
        self.looks[t] = out
        return out


def _frames(n: int, media: bool = False) -> list[Frame]:
    """The first ``n`` frames of vtest.avi, 0.1 s apart (``media``: in the recording's
    time, read a millisecond apart, as a box reads a recording with ``realtime: false``)."""
    t0, read = (1e3, 1e-3) if media else (0.0, 0.1)  # first capture, seconds between two
    out = [Frame(f.image, "front", i, t0 + read * i, 1.7e9 + read * i,
                 0.1 * i if media else None)
           for i, f in enumerate(read_video_frames(VIDEO, range(n)))]  # fmt: skip
    assert len(out) == n
    return out


def _run(regions: bool) -> tuple[list[Processed], _RecordingLooker | None]:
    looker = _RecordingLooker() if regions else None
    return _engine(looker, FRAMES, any_size=regions), looker


def _sessions(any_size: bool) -> tuple[Detector, ...]:
    """Two sessions of the bundled 320 model (taking any size: region mode's sheets)."""
    model = PROJECT_ROOT / "models" / "yolo11n-pose-320-int8.onnx"
    ds = DetectorSettings(model=str(model))
    return tuple(build_detector(ds, any_size=any_size) for _ in range(2))


def _until(
    engine: InferenceEngine,
    stop: threading.Event,
    finished: threading.Event,
    done: list[Processed],
    frames: int,
) -> None:
    """Start ``engine`` and stop it once ``finished`` is set (all ``frames`` are in ``done``)."""
    engine.start()
    try:
        assert finished.wait(120), f"{len(done)} of {frames} frames processed"
    finally:
        stop.set()
        engine.join(5.0)


def _engine(
    looker: Looker | None, frames: int, *, any_size: bool = True, media: bool = False
) -> list[Processed]:
    """``frames`` frames of vtest.avi through an engine of two 320 sessions (regions from
    ``looker``, else whole frames): the results, in the order handed on."""
    dets = _sessions(any_size)
    done: list[Processed] = []
    finished = threading.Event()

    def on_result(p: Processed) -> None:
        done.append(p)
        if len(done) == frames:
            finished.set()

    stop = threading.Event()
    engine = InferenceEngine(
        ModelSet(dets[0].info, dets),
        _Frames(_frames(frames, media)),
        on_result,
        stop,
        {"front": looker} if looker is not None else None,
    )
    _until(engine, stop, finished, done, frames)
    assert engine.errors == sum(p.error is not None for p in done)
    return done


@pytest.mark.timeout(180)
def test_region_frames_count_the_model_inputs_they_ran():
    """Each frame that ran the model says how many whole model inputs its sheets came to
    (its planned sheets' pixels over 320 x 320); its inference time per input is the
    time over that. Busy and quiet frames of the street differ several times in model
    work, which is why a model's speed is judged per input."""
    done, looker = _run(regions=True)
    assert looker is not None
    assert [p.frame.frame_id for p in done] == list(range(FRAMES)), "frame order"
    ran = [p for p in done if not p.skipped]
    assert len(ran) >= FRAMES // 2
    shares = []
    for p in ran:
        look = looker.looks[p.frame.t_capture]
        sheets = (*look.sheets, *((look.coarse,) if look.coarse else ()))
        want = sum(s.hw[0] * s.hw[1] for s in sheets) / (320 * 320)
        assert p.inputs == pytest.approx(want)
        assert p.times is not None
        assert p.ms_per_input == pytest.approx(p.times.inference_ms / want)
        assert p.coarse == (look.coarse is not None)  # what the looker's tracks are told
        shares.append(want)
    assert min(shares) < 0.5 * max(shares), shares
    assert any(p.coarse for p in ran) and not all(p.coarse for p in ran)


@pytest.mark.timeout(180)
def test_whole_frames_are_one_model_input_each():
    """Full mode: every frame is one whole model input; its time per input is its time."""
    done, _ = _run(regions=False)
    for p in done:
        assert p.inputs == 1.0
        assert p.times is not None
        assert p.ms_per_input == p.times.inference_ms


@pytest.mark.timeout(180)
def test_frames_of_a_recording_are_planned_on_its_time():
    """Frames of a recording read as fast as the box takes them (``Frame.t_media``) are
    planned on the recording's time, as ``edge-agent track`` plans them: its motion, sweep,
    coarse looks and re-checks go by the recording's seconds, not by how fast it was read."""
    looker = _RecordingLooker()
    done = _engine(looker, 20, media=True)
    assert [p.frame.frame_id for p in done] == list(range(20))
    assert sorted(looker.looks) == pytest.approx([0.1 * i for i in range(20)])


class _HandedOnLooker(Looker):
    """A looker that notes, per frame it plans, how many frames had been handed on then."""

    def __init__(self, done: list[Processed]) -> None:
        super().__init__()
        self.done = done
        self.handed_on: dict[int | None, int] = {}

    def look(self, image, t, input_hw, stride=None, coarse=None, frame_id=None) -> Look:  # type: ignore[no-untyped-def]
        self.handed_on[frame_id] = len(self.done)
        return super().look(image, t, input_hw, stride, coarse, frame_id)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("one_in_flight", [True, False])
def test_a_lossless_recording_plans_each_frame_after_the_one_before(one_in_flight):
    """A recording read losslessly in region mode (its slot ``one_in_flight``, as the agent
    makes it for ``realtime: false``) hands over a frame only once the frame before was
    handed on, so each frame is planned with the tracks of the one before, as ``edge-agent
    track`` plans it (its sheets still run on both sessions). A plain slot lets a
    second worker plan the next frame while the first one's model runs are still out: a
    person still from the first frame was then missed for a second or two."""
    dets = _sessions(True)
    frames = _frames(20, media=True)
    done: list[Processed] = []
    finished, stop = threading.Event(), threading.Event()

    def on_result(p: Processed) -> None:
        done.append(p)
        if len(done) == len(frames):
            finished.set()

    feed = RoundRobinFeed()
    slot = feed.add("front", one_in_flight=one_in_flight)

    def read() -> None:  # as a lossless camera reader hands frames over
        for f in frames:
            while not slot.put_wait(f, 0.2):
                if stop.is_set():
                    return

    looker = _HandedOnLooker(done)
    engine = InferenceEngine(ModelSet(dets[0].info, dets), feed, on_result, stop, {"front": looker})
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _until(engine, stop, finished, done, len(frames))
    reader.join(5.0)
    assert [p.frame.frame_id for p in done] == list(range(len(frames)))
    early = [i for i, n in looker.handed_on.items() if n != i]
    if one_in_flight:
        assert early == [] and len(looker.handed_on) == len(frames)
    else:
        assert early, "a plain slot's frames are planned before the one before is back"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("regions", ["motion", "full"])
def test_the_agent_holds_a_lossless_recording_to_one_frame_in_flight_in_region_mode(
    tmp_path, regions
):
    """The agent gives a file read with ``realtime: false`` a ``one_in_flight`` slot in
    region mode only: a camera in real time drops frames rather than wait, and whole
    frames (``regions: full``) plan nothing, so there two frames stay in flight."""
    from agent.service.daemon import Agent
    from agent.settings import AgentSettings

    settings = AgentSettings(
        device_id="inflight",
        state_dir=tmp_path / "state",
        mqtt={"host": "127.0.0.1", "port": 1},
        cameras=[
            {"id": "bulk", "source": str(VIDEO), "realtime": False},
            {"id": "paced", "source": str(VIDEO)},
        ],
        detector={"regions": regions},
    )
    agent = Agent(settings)
    try:
        held = {s.camera_id: s._one_in_flight for s in agent.feed.slots}
        assert held == {"bulk": regions == "motion", "paced": False}
        # Region mode runs every sheet on the workers' sessions: no latency session is
        # loaded for it (whole frames keep theirs where there is more than one core).
        latency = agent.engine.models.latency
        assert (latency is not None) == (regions == "full" and agent.cores > 1)
    finally:
        agent.shutdown()


class _FailingLooker(Looker):
    """A looker whose planning fails on one frame."""

    def look(self, image, t, input_hw, stride=None, coarse=None, frame_id=None) -> Look:  # type: ignore[no-untyped-def]
        if abs(t - 0.5) < 1e-6:
            raise ValueError("planner bug")
        return super().look(image, t, input_hw, stride, coarse, frame_id)


@pytest.mark.timeout(180)
def test_a_frame_whose_planning_fails_is_an_error_and_the_workers_go_on():
    """A planning failure is counted as that frame's error; the frames after it are still
    processed and handed on in order (it used to end the worker thread, and with it the
    camera's results)."""
    done = _engine(_FailingLooker(), 20)
    assert [p.frame.frame_id for p in done] == list(range(20))
    failed = [p for p in done if p.error is not None]
    assert [p.frame.frame_id for p in failed] == [5] and "planner bug" in (failed[0].error or "")


class _SlowLooker(Looker):
    """A looker whose first frame's planning waits (up to ``wait_s``) for ``until``."""

    def __init__(self, until: threading.Event, wait_s: float) -> None:
        super().__init__()
        self.until, self.wait_s = until, wait_s
        self.saw: bool | None = None  # whether ``until`` came while the first frame planned

    def look(self, image, t, input_hw, stride=None, coarse=None, frame_id=None) -> Look:  # type: ignore[no-untyped-def]
        if self.saw is None:
            self.saw = self.until.wait(self.wait_s)
        return super().look(image, t, input_hw, stride, coarse, frame_id)


@pytest.mark.timeout(180)
def test_a_camera_whose_frame_plans_slowly_holds_up_no_other_camera():
    """One camera's frame being planned (motion and regions: CPU work between model runs)
    does not stop the other workers: they take the other cameras' frames meanwhile, and
    each camera's frames are still handed on in order. Planning under the one dispatch
    lock made every other camera wait for it."""
    dets = _sessions(True)
    images = [f.image for f in read_video_frames(VIDEO, range(6))]
    frames = [Frame(images[0], "a", 0, 0.0, 1.7e9)]
    frames += [Frame(img, "b", i, 0.1 * i, 1.7e9 + 0.1 * i) for i, img in enumerate(images)]
    frames += [Frame(images[i], "a", i, 0.1 * i, 1.7e9 + 0.1 * i) for i in range(1, 4)]
    b_done, finished = threading.Event(), threading.Event()
    done: list[Processed] = []

    def on_result(p: Processed) -> None:
        done.append(p)
        if sum(q.frame.camera_id == "b" for q in done) == len(images):
            b_done.set()
        if len(done) == len(frames):
            finished.set()

    slow = _SlowLooker(b_done, 30.0)
    stop = threading.Event()
    engine = InferenceEngine(
        ModelSet(dets[0].info, dets), _Frames(frames), on_result, stop, {"a": slow, "b": Looker()}
    )
    _until(engine, stop, finished, done, len(frames))
    assert slow.saw is True, "camera b's frames waited for camera a's planning"
    for camera, ids in (("a", [0, 1, 2, 3]), ("b", list(range(len(images))))):
        assert [p.frame.frame_id for p in done if p.frame.camera_id == camera] == ids
    assert engine.errors == 0
