"""The inference engine in region mode, in process, on real vtest.avi frames: what each
processed frame says about the model work it took (the health window of model updates
judges a new model by it)."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from agent.detect.detector import Detector
from agent.detect.inputs import build_detector
from agent.detect.nms import iou_matrix
from agent.frames import Frame
from agent.modeltools.media import read_video_frames
from agent.regions.looker import Look, Looker
from agent.regions.pack import pack_fewest
from agent.service.engine import InferenceEngine, ModelSet, Processed
from agent.settings import PROJECT_ROOT, DetectorSettings
from tests.agent_proc import VIDEO

FRAMES = 60


class _Frames:
    """The engine's feed: a fixed run of frames, in order; ``backlog`` False: it says no
    frame waits (as one camera that the box keeps up with), so none is batched."""

    def __init__(self, frames: list[Frame], backlog: bool = True) -> None:
        self._q: queue.Queue[Frame] = queue.Queue()
        self._backlog = backlog
        for f in frames:
            self._q.put(f)

    def get(self, timeout: float) -> Frame | None:
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None

    def ready_count(self) -> int:
        return self._q.qsize() if self._backlog else 0


class _RecordingLooker(Looker):
    """A looker that keeps what it planned, by capture time."""

    def __init__(self) -> None:
        super().__init__()
        self.looks: dict[float, Look] = {}

    def look(self, image, t, input_hw, stride=None, coarse=None, frame_id=None) -> Look:  # type: ignore[no-untyped-def]
        out = super().look(image, t, input_hw, stride, coarse, frame_id)
        self.looks[t] = out
        return out


def _frames(n: int, cameras: int = 1) -> list[Frame]:
    """``n`` frames of vtest.avi, 0.1 s apart, of each of ``cameras`` (``_camera``; each
    from its own point of the clip, ``APART`` frames on), in the order they come in."""
    wanted = sorted({k * APART + i for k in range(cameras) for i in range(n)})
    images = dict(zip(wanted, (f.image for f in read_video_frames(VIDEO, wanted)), strict=True))
    return [Frame(images[k * APART + i], _camera(k), i, 0.1 * i, 1.7e9 + 0.1 * i)
            for i in range(n) for k in range(cameras)]  # fmt: skip


#: Frames of the clip between one camera's start and the next's.
APART = 97


def _camera(k: int) -> str:
    return "front" if k == 0 else f"c{k}"


def _run(regions: bool) -> tuple[list[Processed], _RecordingLooker | None]:
    looker = _RecordingLooker() if regions else None
    lookers = None if looker is None else {"front": looker}
    return _engine(lookers, _frames(FRAMES), any_size=regions), looker


class _Runs:
    """The model runs of some detectors' sheets: each input's height and width."""

    def __init__(self, dets: tuple[Detector, ...]) -> None:
        self.hw: list[tuple[int, int]] = []
        for d in dets:
            d.detect_exact = self._counting(d.detect_exact)  # type: ignore[method-assign]

    def _counting(self, run):  # type: ignore[no-untyped-def]
        def counted(image, **kw):  # type: ignore[no-untyped-def]
            self.hw.append((int(image.shape[0]), int(image.shape[1])))
            return run(image, **kw)

        return counted


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
    lookers: dict[str, Looker] | None,
    frames: list[Frame],
    *,
    any_size: bool = True,
    backlog: bool = True,
    runs: list[tuple[int, int]] | None = None,
) -> list[Processed]:
    """``frames`` through an engine of two 320 sessions (regions from the cameras'
    ``lookers``, else whole frames; ``backlog``: see ``_Frames``): the results, in the
    order handed on; ``runs``: gets the size of each model input run."""
    dets = _sessions(any_size)
    counter = _Runs(dets)
    done: list[Processed] = []
    finished = threading.Event()

    def on_result(p: Processed) -> None:
        done.append(p)
        if len(done) == len(frames):
            finished.set()

    stop = threading.Event()
    engine = InferenceEngine(
        ModelSet(dets[0].info, dets), _Frames(frames, backlog), on_result, stop, lookers
    )
    _until(engine, stop, finished, done, len(frames))
    assert engine.errors == sum(p.error is not None for p in done)
    if runs is not None:
        runs.extend(counter.hw)
    return done


@pytest.mark.timeout(180)
def test_region_frames_count_the_model_inputs_they_ran():
    """Each frame that ran the model says how many whole model inputs its sheets came to
    (its planned sheets' pixels over 320 x 320; a frame whose regions shared sheets with
    other frames', its regions' part of those); its inference time per input is the time
    over that. Busy and quiet frames of the street differ several times in model work,
    which is why a model's speed is judged per input."""
    for backlog in (False, True):
        # Three cameras: with a backlog, their frames share sheets.
        lookers = {_camera(k): _RecordingLooker() for k in range(3)}
        runs: list[tuple[int, int]] = []
        done = _engine(lookers, _frames(FRAMES // 2, 3), backlog=backlog, runs=runs)  # type: ignore[arg-type]
        for camera in lookers:
            ids = [p.frame.frame_id for p in done if p.frame.camera_id == camera]
            assert ids == list(range(FRAMES // 2)), "frame order"
        ran = [p for p in done if not p.skipped]
        assert len(ran) >= FRAMES // 2
        shares = []
        for p in ran:
            look = lookers[p.frame.camera_id].looks[p.frame.t_capture]
            assert p.times is not None
            assert p.ms_per_input == pytest.approx(p.times.inference_ms / p.inputs)
            assert p.coarse == (look.coarse is not None)  # what the looker's tracks are told
            if not backlog:  # each frame on sheets of its own
                sheets = pack_fewest(look.plan.regions, look.plan.scales, (320, 320),
                                     p.frame.image_wh, stride=32)  # fmt: skip
                sheets += [look.coarse] if look.coarse else []
                assert p.inputs == pytest.approx(sum(s.hw[0] * s.hw[1] for s in sheets) / 320**2)
            shares.append(p.inputs)
        # Every pixel run is some frame's: the frames' inputs add up to the runs'.
        assert sum(shares) == pytest.approx(sum(h * w for h, w in runs) / 320**2)
        assert min(shares) < 0.5 * max(shares), shares
        assert any(p.coarse for p in ran) and not all(p.coarse for p in ran)
        assert any(w > 320 for _, w in runs) == backlog, "sheets of several frames"


def _people(p: Processed, score: float = 0.0) -> np.ndarray:
    """The person boxes of ``p`` scoring ``score`` or more."""
    d = p.detections
    if d is None:
        return np.zeros((0, 4), np.float32)
    return d.xyxy[(d.score >= score) & (d.class_id == 0)]


@pytest.mark.timeout(240)
def test_frames_of_cameras_waiting_share_sheets_and_each_finds_what_it_finds_alone():
    """When several cameras' frames wait (the box is behind), a worker plans several and
    draws their sheets side by side on fewer, wider ones: fewer model runs than frames
    alone take, while each frame gets back the people it finds plainly on sheets of its
    own (the same plans: no tracks feed back here, so each frame's regions are the same
    either way, and each region keeps its place on its frame's own sheet). One camera's
    frames waiting are planned one at a time, as before (each knowing its last tracks)."""
    frames = _frames(12, 4)
    alone_runs: list[tuple[int, int]] = []
    together_runs: list[tuple[int, int]] = []
    lookers = {_camera(k): Looker() for k in range(4)}
    alone = _engine(lookers, frames, backlog=False, runs=alone_runs)
    lookers = {_camera(k): Looker() for k in range(4)}
    together = _engine(lookers, frames, backlog=True, runs=together_runs)
    key = lambda p: (p.frame.camera_id, p.frame.frame_id)  # noqa: E731
    alone, together = sorted(alone, key=key), sorted(together, key=key)
    assert [key(p) for p in together] == [key(p) for p in alone]
    assert [p.regions for p in together] == [p.regions for p in alone], "the same plans"
    assert any(w > 320 for _, w in together_runs), "no sheet held several frames' regions"
    assert len(together_runs) < 0.8 * len(alone_runs), (len(together_runs), len(alone_runs))
    seen = found = 0
    for a, b in zip(alone, together, strict=True):
        want, got = _people(a, 0.5), _people(b)
        seen += len(want)
        if len(want) and len(got):
            found += int((iou_matrix(want, got).max(axis=1) >= 0.5).sum())
    assert seen >= 100, seen
    assert found >= 0.95 * seen, (found, seen)
    # One camera's backlog: its frames are not batched.
    one: list[tuple[int, int]] = []
    _engine({"front": Looker()}, _frames(20), backlog=True, runs=one)
    assert one and all(w <= 320 for _, w in one)


@pytest.mark.timeout(180)
def test_whole_frames_are_one_model_input_each():
    """Full mode: every frame is one whole model input; its time per input is its time."""
    done, _ = _run(regions=False)
    for p in done:
        assert p.inputs == 1.0
        assert p.times is not None
        assert p.ms_per_input == p.times.inference_ms


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
    done = _engine({"front": _FailingLooker()}, _frames(20))
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
