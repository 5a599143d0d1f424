"""Inference engine: worker threads running detectors over a frame feed, in frame order.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from agent.detect.detections import Detections
from agent.detect.detector import Detector, ModelInfo, StageTimes, Thresholds
from agent.frames import Frame
from agent.log import get_logger
from agent.osthread import name_os_thread

if TYPE_CHECKING:
    from agent.settings import DetectorSettings

log = get_logger("engine")


class FrameFeed(Protocol):
    """Where workers take frames from (fair over cameras)."""

    def get(self, timeout: float) -> Frame | None: ...

    def ready_count(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ModelSet:
    """One model loaded N times: one detector per worker, plus an optional latency session."""

    info: ModelInfo
    workers: tuple[Detector, ...]
    latency: Detector | None = None
    load_ms: float = 0.0

    def detectors(self) -> tuple[Detector, ...]:
        return (*self.workers, *((self.latency,) if self.latency else ()))


@dataclass(frozen=True, slots=True)
class Processed:
    """A frame after inference (or after an inference error)."""

    frame: Frame
    model: ModelInfo
    detections: Detections | None
    times: StageTimes | None
    error: str | None
    t_done: float
    session: str


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
    ) -> None:
        self._models = models
        self._feed = feed
        self._on_result = on_result
        self._stop = stop
        self._lock = threading.Lock()  # guards dispatch, model swap, busy count
        self._latency_lock = threading.Lock()
        self._dispatch_lock = threading.Lock()
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
        return old

    def set_thresholds(self, thresholds: Thresholds) -> None:
        with self._lock:
            for d in self._models.detectors():
                d.thresholds = thresholds

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
    def _take(self, index: int) -> tuple[Frame, int, Detector, ModelSet, str] | None:
        # Taking a frame and numbering it happen under one lock, so tickets follow frame order.
        with self._dispatch_lock:
            t0 = time.monotonic()
            frame = self._feed.get(timeout=0.2)
            self.last_tick = time.monotonic()
            if frame is None:
                return None
            # Load estimate: how often a worker had to wait for a frame. A saturated feed
            # (backlog, realtime: false) never waits and keeps every worker's session busy.
            waited = 1.0 if self.last_tick - t0 > 0.002 else 0.0
            self._idle = 0.9 * self._idle + 0.1 * waited
            return self._ticket(index, frame)

    def _ticket(self, index: int, frame: Frame) -> tuple[Frame, int, Detector, ModelSet, str]:
        with self._lock:
            models = self._models
            order = self._orders.setdefault(frame.camera_id, _Order())
            ticket = order.next_dispatch
            order.next_dispatch += 1
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

    def _run(self, frame: Frame, det: Detector, info: ModelInfo, name: str) -> Processed:
        try:
            r = det.detect(frame.image)
        except Exception as e:  # an inference failure becomes a counted, reported result
            self.errors += 1
            now = time.monotonic()
            self._last_error_at = now
            if now - self._last_error_log > 10.0:
                self._last_error_log = now
                log.error("inference_failed", camera=frame.camera_id, error=str(e)[:300])
            return Processed(frame, info, None, None, f"{type(e).__name__}: {e}"[:300], now, name)
        self.frames_processed += 1
        return Processed(frame, info, r.detections, r.times, None, time.monotonic(), name)

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
    all-cores session used when a single frame is in flight (lowest latency).
    sessions = 1: one session with ``threads`` (default: all cores).
    sessions = N: N sessions with ``threads`` each (default 1).
    """
    if ds.sessions is None:
        if cores == 1:
            return 1, ds.threads or 1, None
        return cores, 1, ds.threads or cores
    if ds.sessions == 1:
        return 1, ds.threads or cores, None
    return ds.sessions, ds.threads or 1, None
