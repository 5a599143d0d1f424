"""Inference engine: worker threads running detectors over a frame feed, in frame order.

Regions (``detector.regions: motion``): the worker that takes a frame asks the camera's
``Looker`` where to look (motion and region planning run there, in frame order, under the
dispatch lock), and its regions come packed into model inputs ("sheets",
``agent.regions.pack``). A frame with no region skips inference; a frame with several
sheets puts all but the first in a job queue that every worker serves before it takes a new
frame, so one frame's sheets run on different sessions at once. The last sheet to finish
merges the frame's detections and hands the frame on, still in dispatch order per camera.

Session layout (issue: throughput vs latency). Each worker owns a 1-thread session, so
N workers keep N frames in flight (the throughput layout). In ``auto`` a shared
multi-thread "latency" session is used instead whenever a worker would run alone with no
frame waiting, so a single slow camera gets the lowest latency. Results are handed to
``on_result`` strictly in dispatch order per camera, whichever worker finishes first.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from agent.detect.detections import Detections
from agent.detect.detector import Detector, ModelInfo, StageTimes, Thresholds
from agent.frames import Frame
from agent.log import get_logger
from agent.osthread import name_os_thread
from agent.regions.looker import Look, Looker
from agent.regions.merge import Found
from agent.regions.pack import detect_sheet, model_pixels
from agent.regions.planner import XyXy

if TYPE_CHECKING:
    from agent.settings import DetectorSettings

log = get_logger("engine")


class FrameFeed(Protocol):
    """Where workers take frames from (fair over cameras)."""

    def get(self, timeout: float) -> Frame | None: ...

    def ready_count(self) -> int: ...

    def finished(self, camera_id: str) -> None:
        """A frame taken from the feed is done: its result was handed on."""


@dataclass(frozen=True, slots=True)
class ModelSet:
    """One model loaded N times: one detector per worker, plus an optional latency session;
    in region mode, ``coarse``: per worker, the model of coarse looks (the whole frame in
    one input) where it is another file (the bundled one best at whole frames)."""

    info: ModelInfo
    workers: tuple[Detector, ...]
    latency: Detector | None = None
    load_ms: float = 0.0
    coarse: tuple[Detector, ...] = ()

    def detectors(self) -> tuple[Detector, ...]:
        return (*self.workers, *((self.latency,) if self.latency else ()), *self.coarse)

    def coarse_input(self) -> tuple[tuple[int, int], int | None] | None:
        """The coarse model's (input_hw, sheet stride), None: coarse looks use the workers'."""
        if not self.coarse:
            return None
        return self.coarse[0].info.input_hw, self.coarse[0].sheet_stride


@dataclass(frozen=True, slots=True)
class Processed:
    """A frame after inference (or after an inference error, or skipped: no region).

    ``regions``: where inference ran, xyxy in source pixels (the whole frame in full mode;
    () when the frame was skipped, ``detections`` then None and no error, or when only
    still objects' last looks stand in: ``detections`` those, ``inputs`` 0). ``motion``:
    whether the frame moved (None when motion is not computed: full mode). ``inputs``: the
    model-input pixels the frame ran, in whole model inputs (1 in full mode; in region
    mode its sheets', which vary with the scene). ``coarse``: region mode looked at the
    whole frame too (the coarse look).
    """

    frame: Frame
    model: ModelInfo
    detections: Detections | None
    times: StageTimes | None
    error: str | None
    t_done: float
    session: str
    regions: tuple[XyXy, ...] = ()
    motion: bool | None = None
    inputs: float = 1.0
    coarse: bool = False

    @property
    def skipped(self) -> bool:
        return self.detections is None and self.error is None

    @property
    def stood_in(self) -> bool:
        """The model did not run: the detections are still objects' last looks only."""
        return not self.regions and self.detections is not None and self.error is None

    @property
    def ms_per_input(self) -> float | None:
        """Inference time per whole model input's worth of pixels: what the model costs,
        whatever the scene asked of it (a frame's regions may take a sliver of an input or
        three); None without times."""
        if self.times is None or self.inputs <= 0:
            return None
        return self.times.inference_ms / self.inputs


@dataclass
class _FrameWork:
    """One frame's regions in flight: results gathered until the last one is in."""

    frame: Frame
    ticket: int
    models: ModelSet
    look: Look
    looker: Looker  # the camera's, which planned ``look`` and merges what it found
    results: list[Found | None]
    times: list[StageTimes | None]
    errors: list[str]
    remaining: int
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class _Job:
    work: _FrameWork
    index: int


@dataclass
class _Order:
    """Per-camera reorder buffer: results leave in dispatch order."""

    next_dispatch: int = 0
    next_emit: int = 0
    done: dict[int, Processed] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class InferenceEngine:
    """Runs ``ModelSet`` detectors over a ``FrameFeed``; hot-swappable between frames."""

    def __init__(
        self,
        models: ModelSet,
        feed: FrameFeed,
        on_result: Callable[[Processed], None],
        stop: threading.Event,
        lookers: dict[str, Looker] | None = None,
    ) -> None:
        self._models = models
        self._lookers = lookers or {}
        self._jobs: deque[_Job] = deque()
        self._feed = feed
        self._on_result = on_result
        self._stop = stop
        self._lock = threading.Lock()  # guards dispatch, model swap, busy count
        self._latency_lock = threading.Lock()
        self._dispatch_lock = threading.Lock()
        self._plan_locks: dict[str, threading.Lock] = {}  # per camera: its frames' planning
        self._planning = 0  # frames being planned now
        self._orders: dict[str, _Order] = {}
        self._busy = 0
        self._idle = 1.0
        self._threads: list[threading.Thread] = []
        self._paused = threading.Event()
        self.last_tick = time.monotonic()
        self.frames_processed = 0
        self.errors = 0
        self._last_error_log = 0.0
        self._last_error_at: float | None = None

    # -- control ---------------------------------------------------------------------------
    def start(self) -> None:
        for i in range(len(self._models.workers)):
            t = threading.Thread(target=self._worker, args=(i,), name=f"infer-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    @property
    def models(self) -> ModelSet:
        return self._models

    def swap(self, models: ModelSet) -> ModelSet:
        """Make ``models`` active for every frame dispatched from now on; returns the old set.

        A frame already in flight finishes on the model it started with and is reported
        with that model, so no frame is dropped or processed twice by a swap.
        """
        if len(models.workers) != len(self._models.workers):
            raise ValueError("a model set must have one detector per worker")
        with self._lock:
            old, self._models = self._models, models
        self._forget_held()
        return old

    def set_thresholds(self, thresholds: Thresholds) -> None:
        with self._lock:
            for d in self._models.detectors():
                d.thresholds = thresholds
        self._forget_held()

    def _forget_held(self) -> None:
        """A still object's last look no longer stands in for it: the model that made it,
        or its thresholds, are gone (each such object is looked at on its next frame)."""
        for looker in self._lookers.values():
            looker.forget_held()

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def errors_recent(self, window_s: float = 30.0) -> bool:
        """Whether inference failed within the last ``window_s`` seconds."""
        last = self._last_error_at
        return last is not None and time.monotonic() - last < window_s

    @property
    def busy(self) -> int:
        return self._busy

    # -- work ------------------------------------------------------------------------------
    def _take(self, index: int) -> tuple[Frame, int, Detector, ModelSet, str] | _Job | None:
        # Taking a frame and numbering it happen under one lock. A camera's frame is planned
        # under that camera's own lock, taken before the dispatch lock is let go: its
        # motion, plans and tickets follow frame order, while the other workers take the
        # sheets already queued and other cameras' frames.
        with self._dispatch_lock:
            if self._jobs:
                return self._jobs.popleft()
            t0 = time.monotonic()
            # While a frame is being planned, its sheets may be queued any moment: look
            # again soon instead of waiting for the next frame.
            frame = self._feed.get(timeout=0.005 if self._planning else 0.2)
            self.last_tick = time.monotonic()
            if frame is None:
                return None
            # Load estimate: how often a worker had to wait for a frame. A saturated feed
            # (backlog, realtime: false) never waits and keeps every worker's session busy.
            waited = 1.0 if self.last_tick - t0 > 0.002 else 0.0
            self._idle = 0.9 * self._idle + 0.1 * waited
            looker = self._lookers.get(frame.camera_id)
            if looker is None:
                return self._ticket(index, frame)
            planning = self._plan_locks.get(frame.camera_id)
            if planning is None:  # a camera's first frame (no new lock on every frame)
                planning = self._plan_locks[frame.camera_id] = threading.Lock()
            planning.acquire()
            with self._lock:
                self._planning += 1
        try:
            return self._plan(frame, looker)
        finally:
            with self._lock:
                self._planning -= 1
            planning.release()

    def _plan(self, frame: Frame, looker: Looker) -> _Job | None:
        with self._lock:
            models = self._models
        stride = models.workers[0].sheet_stride
        try:
            look = looker.look(
                frame.image,
                frame.t_scene,
                models.info.input_hw,
                stride,
                models.coarse_input(),
                frame.frame_id,
            )
        except Exception as e:  # a planning failure is the frame's error, not the worker's end
            error = f"planning: {type(e).__name__}: {e}"[:300]
            self._failed(frame.camera_id, error)
            failed = Processed(frame, models.info, None, None, error, time.monotonic(), "-")
            self._emit(frame.camera_id, self._next_ticket(frame.camera_id), failed)
            return None
        ticket = self._next_ticket(frame.camera_id)
        n = len(look.sheets) + (look.coarse is not None)
        work = _FrameWork(frame, ticket, models, look, looker, [None] * n, [None] * n, [], n)
        if n == 0:
            # Nothing to run: skipped, or only still objects, whose last looks stand in.
            times = None if look.held is None else StageTimes(0.0, 0.0, 0.0)
            skipped = Processed(
                frame, models.info, look.held, times, None, time.monotonic(), "-", (),
                look.motion.any, 0.0,
            )  # fmt: skip
            self._emit(frame.camera_id, ticket, skipped)
            return None
        for i in range(1, n):
            self._jobs.append(_Job(work, i))
        with self._lock:
            self._busy += 1
        return _Job(work, 0)

    def _next_ticket(self, camera_id: str) -> int:
        """The camera's next dispatch number (results are handed on in this order)."""
        with self._lock:
            return self._take_ticket_locked(camera_id)

    def _take_ticket_locked(self, camera_id: str) -> int:
        order = self._orders.setdefault(camera_id, _Order())
        ticket = order.next_dispatch
        order.next_dispatch += 1
        return ticket

    def _ticket(self, index: int, frame: Frame) -> tuple[Frame, int, Detector, ModelSet, str]:
        with self._lock:
            models = self._models
            ticket = self._take_ticket_locked(frame.camera_id)
            alone = self._busy == 0 and self._idle > 0.5 and self._feed.ready_count() == 0
            self._busy += 1
        det, name = models.workers[index], f"w{index}"
        if alone and models.latency is not None and self._latency_lock.acquire(blocking=False):
            det, name = models.latency, "latency"
        return frame, ticket, det, models, name

    def _worker(self, index: int) -> None:
        name_os_thread(f"infer-{index}")
        while not self._stop.is_set():
            if self._paused.is_set():
                self.last_tick = time.monotonic()
                self._stop.wait(0.1)
                continue
            taken = self._take(index)
            if taken is None:
                continue
            if isinstance(taken, _Job):
                self._run_region(index, taken)
                self.last_tick = time.monotonic()
                continue
            frame, ticket, det, models, name = taken
            try:
                result = self._run(frame, det, models.info, name)
            finally:
                if name == "latency":
                    self._latency_lock.release()
                with self._lock:
                    self._busy -= 1
            self._emit(frame.camera_id, ticket, result)
            self.last_tick = time.monotonic()

    def _run_region(self, index: int, job: _Job) -> None:
        """One sheet of a frame's regions; the frame's last sheet merges and emits it."""
        work = job.work
        sheets, models = work.look.sheets, work.models
        coarse = job.index >= len(sheets)
        det = models.coarse[index] if coarse and models.coarse else models.workers[index]
        sheet = work.look.coarse if coarse else sheets[job.index]
        assert sheet is not None  # a job past the sheets is the coarse look
        found: Found | None
        try:
            found, times = detect_sheet(det, work.frame.image, sheet, coarse=coarse)
            error = None
        except Exception as e:  # an inference failure becomes a counted, reported result
            found, times, error = None, None, f"{type(e).__name__}: {e}"[:300]
            self._failed(work.frame.camera_id, error)
        with work.lock:
            work.results[job.index] = found
            work.times[job.index] = times
            if error:
                work.errors.append(error)
            work.remaining -= 1
            last = work.remaining == 0
        if not last:
            return
        with self._lock:
            self._busy -= 1
        try:
            result = self._merged(work, f"w{index}")
        except Exception as e:  # a merge failure is the frame's error, not the worker's end
            error = f"merge: {type(e).__name__}: {e}"[:300]
            self._failed(work.frame.camera_id, error)
            result = Processed(work.frame, work.models.info, None, None, error,
                               time.monotonic(), f"w{index}", work.look.regions)  # fmt: skip
        self._emit(work.frame.camera_id, work.ticket, result)

    def _merged(self, work: _FrameWork, name: str) -> Processed:
        regions = work.look.regions
        info, motion = work.models.info, work.look.motion.any
        if work.errors:
            return Processed(work.frame, info, None, None, work.errors[0], time.monotonic(),
                             name, regions, motion)  # fmt: skip
        found = [sheet for sheet in work.results if sheet is not None]
        th = work.models.workers[0].thresholds
        dets = work.looker.merge(work.look, found, work.frame.image_wh, th)
        ts = [t for t in work.times if t is not None]
        times = StageTimes(
            sum(t.preprocess_ms for t in ts),
            sum(t.inference_ms for t in ts),
            sum(t.postprocess_ms for t in ts),
        )
        ih, iw = info.input_hw
        sheets = (*work.look.sheets, *((work.look.coarse,) if work.look.coarse else ()))
        inputs = model_pixels(sheets) / (ih * iw)
        self.frames_processed += 1
        return Processed(work.frame, info, dets, times, None, time.monotonic(), name,
                         regions, motion, inputs, work.look.coarse is not None)  # fmt: skip

    def _failed(self, camera_id: str, error: str) -> None:
        self.errors += 1
        now = time.monotonic()
        self._last_error_at = now
        if now - self._last_error_log > 10.0:
            self._last_error_log = now
            log.error("inference_failed", camera=camera_id, error=error)

    def _run(self, frame: Frame, det: Detector, info: ModelInfo, name: str) -> Processed:
        whole = (0.0, 0.0, float(frame.image_wh[0]), float(frame.image_wh[1]))
        try:
            r = det.detect(frame.image)
        except Exception as e:  # an inference failure becomes a counted, reported result
            error = f"{type(e).__name__}: {e}"[:300]
            self._failed(frame.camera_id, error)
            return Processed(frame, info, None, None, error, time.monotonic(), name, (whole,))
        self.frames_processed += 1
        return Processed(frame, info, r.detections, r.times, None, time.monotonic(), name, (whole,))

    def _emit(self, camera_id: str, ticket: int, result: Processed) -> None:
        order = self._orders[camera_id]
        with order.lock:
            order.done[ticket] = result
            while order.next_emit in order.done:
                item = order.done.pop(order.next_emit)
                order.next_emit += 1
                try:
                    self._on_result(item)
                except Exception as e:  # the publisher must never kill a worker
                    log.exception("result_handler_failed", camera=camera_id, error=str(e))
                self._feed.finished(camera_id)


def build_model_set(
    make: Callable[[int], Detector], workers: int, latency_threads: int | None
) -> ModelSet:
    """Load one detector per worker (1 thread each) and, if asked, a latency session."""
    t0 = time.perf_counter()
    dets: Sequence[Detector] = [make(1) for _ in range(workers)]
    latency = make(latency_threads) if latency_threads else None
    for d in (*dets, *((latency,) if latency else ())):
        d.warmup(1)
    return ModelSet(dets[0].info, tuple(dets), latency, (time.perf_counter() - t0) * 1e3)


def cpu_budget() -> int:
    """Cores this process may run on (cgroup/affinity aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def layout(ds: DetectorSettings, cores: int) -> tuple[int, int, int | None]:
    """(workers, threads per worker session, latency-session threads or None).

    sessions unset (auto): one 1-thread session per core for throughput, plus one
    all-cores session used when a single frame is in flight (lowest latency); in region
    mode no latency session: a frame's sheets run on the workers' sessions (a sheet is
    too small for threads to pay, and a frame's several sheets already run in parallel),
    so one would be loaded and never run.
    sessions = 1: one session with ``threads`` (default: all cores).
    sessions = N: N sessions with ``threads`` each (default 1).
    """
    if ds.sessions is None:
        if cores == 1:
            return 1, ds.threads or 1, None
        return cores, 1, None if ds.by_regions else ds.threads or cores
    if ds.sessions == 1:
        return 1, ds.threads or cores, None
    return ds.sessions, ds.threads or 1, None
