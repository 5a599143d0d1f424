"""Model deploys and rollbacks as an explicit state machine, run on the manager's own thread.

No MQTT here: the command router calls ``deploy``/``rollback`` with a reply callback and
feeds upload chunks to ``on_chunk``; the pipeline supplies ``swap`` (load + switch between
two frames) and reports every processed frame to ``observe`` (the health window). Every
public method returns at once; transfers, checks, model loads, disk writes and swaps all
happen on the worker thread.

    idle -> receiving -> verifying -> validating -> persisting -> swapping -> health_window
         -> committed | rolled_back | failed      (any step can go to failed)
    at rest (idle/committed/rolled_back/failed) -> swapping (model/rollback)
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.detect.runtime import SessionSpec
from agent.errors import VerifyError
from agent.log import get_logger
from agent.osthread import name_os_thread
from agent.settings import ModelsSettings
from agent.update import codes
from agent.update.health import HealthWindow, LatencyBaseline, Verdict
from agent.update.keys import TrustedKey, load_trusted_keys
from agent.update.manifest import ChunkSource, DeployCommand, UrlSource
from agent.update.store import ModelRecord, ModelStore, StoreState
from agent.update.transfer import ChunkAssembler, Received, discard, download
from agent.update.verify import (
    Validation,
    check_chunk_layout,
    check_declared_size,
    check_onnx,
    check_sha256,
    check_signature,
    check_size,
    check_version,
    measure_latency,
    validate_candidate,
)

log = get_logger("update")

#: reply(ok, result, error_code, message): one call per deploy/rollback command.
ReplyFn = Callable[[bool, "dict[str, Any] | None", "str | None", str], None]
#: swap(path, record): load the model and make it active between two frames; raise on failure.
SwapFn = Callable[[Path, ModelRecord], None]
FrameFn = Callable[[], "npt.NDArray[np.uint8] | None"]

QUEUE_BYTES = 32 * 1024 * 1024  # chunks waiting for the writer thread
EARLY_BYTES = 16 * 1024 * 1024  # chunks that came before their deploy command
EARLY_TTL_S = 15.0


class State(enum.Enum):
    IDLE = "idle"
    RECEIVING = "receiving"
    VERIFYING = "verifying"
    VALIDATING = "validating"
    PERSISTING = "persisting"
    SWAPPING = "swapping"
    HEALTH_WINDOW = "health_window"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


AT_REST = frozenset({State.IDLE, State.COMMITTED, State.ROLLED_BACK, State.FAILED})
_ALLOWED: dict[State, frozenset[State]] = {
    **{s: frozenset({State.RECEIVING, State.SWAPPING, State.HEALTH_WINDOW}) for s in AT_REST},
    State.RECEIVING: frozenset({State.VERIFYING, State.FAILED}),
    State.VERIFYING: frozenset({State.VALIDATING, State.FAILED}),
    State.VALIDATING: frozenset({State.PERSISTING, State.FAILED}),
    State.PERSISTING: frozenset({State.SWAPPING, State.FAILED}),
    State.SWAPPING: frozenset({State.HEALTH_WINDOW, State.COMMITTED, State.FAILED}),
    State.HEALTH_WINDOW: frozenset({State.COMMITTED, State.ROLLED_BACK, State.FAILED}),
}


@dataclass
class _Window:
    """A running health window and how to undo the change it judges."""

    health: HealthWindow
    record: ModelRecord
    previous: ModelRecord | None
    undo: StoreState | None  # None: a window resumed at start; undo = store.fall_back
    reply: ReplyFn | None
    result: dict[str, Any]


@dataclass
class _Early:
    transfer_id: str
    since: float
    chunks: dict[int, bytes]
    size: int = 0


def _synthetic_frame() -> npt.NDArray[np.uint8]:
    """A deterministic textured 640x480 frame for when no camera frame exists yet."""
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8)


class UpdateManager:
    """One deploy or rollback at a time; results go to the reply callback of its command."""

    def __init__(
        self,
        settings: ModelsSettings,
        store: ModelStore,
        *,
        bundled: ModelRecord,
        swap: SwapFn,
        latest_frame: FrameFn,
        session_spec: SessionSpec,
        keys: tuple[TrustedKey, ...] | None = None,
        health_timeout_s: float = 300.0,
        health_max_errors: int = 0,
        url_timeout_s: float = 30.0,
        ssl_context: Any = None,
        on_state: Callable[[State, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.store = store
        self.keys = keys if keys is not None else load_trusted_keys(settings)
        self._bundled = bundled
        self._swap = swap
        self._latest_frame = latest_frame
        self._spec = session_spec
        self._health_timeout_s = health_timeout_s
        self._health_max_errors = health_max_errors
        self._url_timeout_s = url_timeout_s
        self._ssl_context = ssl_context
        self._on_state = on_state
        self._clock = clock
        self._lock = threading.RLock()  # RLock: on_state listeners may read status()
        self._state = State.IDLE
        self._current = store.active or bundled
        self._baseline = LatencyBaseline()
        self._baseline.reset(self._current.sha256)
        self._window: _Window | None = None
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue()
        self._chunks: queue.Queue[tuple[str, int, bytes]] = queue.Queue()
        self._queued_bytes = 0
        self._transfer_id: str | None = None
        self._early: _Early | None = None
        self._refused: deque[str] = deque(maxlen=8)  # transfers refused or finished
        self.chunks_dropped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker; an uncommitted active model (restart mid-window) is judged again."""
        active = self.store.active
        if active is not None and not active.committed and active.sha256 == self._current.sha256:
            window = self._new_window(active, self.store.previous, undo=None, reply=None, result={})
            with self._lock:
                self._window = window
                self._set_locked(State.HEALTH_WINDOW, "resumed at start")
        self._thread = threading.Thread(target=self._loop, name="model-update", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def state(self) -> State:
        return self._state

    @property
    def current(self) -> ModelRecord:
        """The model the pipeline runs (as far as the manager has switched it)."""
        return self._current

    @property
    def previous(self) -> ModelRecord | None:
        return self.store.previous

    def status(self) -> dict[str, Any]:
        with self._lock:
            w = self._window
            return {
                "state": self._state.value,
                "model": self._current.summary(),
                "committed": self._current.committed,
                "health": w.health.stats() if w is not None else None,
                "chunks_dropped": self.chunks_dropped,
            }

    def _set(self, new: State, detail: str = "") -> None:
        with self._lock:
            self._set_locked(new, detail)

    def _set_locked(self, new: State, detail: str = "") -> None:
        old = self._state
        if new not in _ALLOWED[old]:
            raise RuntimeError(f"model update: transition {old.value} -> {new.value} not allowed")
        self._state = new
        log.info("model_update_state", state=new.value, previous_state=old.value, detail=detail)
        if self._on_state is not None:
            try:
                self._on_state(new, detail)
            except Exception:  # a listener must not break the state machine
                log.exception("model_update_listener_failed")

    # -- inputs (any thread, never block) ----------------------------------------------------
    def deploy(
        self, body: Mapping[str, Any], reply: ReplyFn, accepted: Callable[[], None] | None = None
    ) -> None:
        """Start a ``model/deploy``. Cheap checks (parse, signature, version, size cap) run
        here; a failure replies at once, else ``accepted()`` is called (the operator may now
        send the file) and the worker takes over and replies at the end."""
        try:
            cmd = DeployCommand.parse(body)
        except VerifyError as e:
            _send(reply, False, None, e.code, str(e))
            return
        with self._lock:
            try:
                if self._state not in AT_REST:
                    busy = f"a model update is in progress ({self._state.value})"
                    raise VerifyError(codes.BUSY, busy)
                signer = self._prechecks(cmd)
            except VerifyError as e:
                rejected: VerifyError | None = e
            else:
                rejected = None
            if rejected is None:
                self._accept(cmd)
            elif isinstance(cmd.source, ChunkSource):
                self._refuse_transfer(cmd.source.transfer_id)
        if rejected is not None:
            log.warning("model_deploy_rejected", id=cmd.id, code=rejected.code, why=str(rejected))
            _send(reply, False, None, rejected.code, str(rejected))
            return
        t0 = self._clock()
        log.info(
            "model_deploy_accepted",
            id=cmd.id,
            name=cmd.manifest.name,
            version=cmd.manifest.version,
            sha256=cmd.manifest.sha256[:12],
            signer=signer.key_id if signer else None,
            via="url" if isinstance(cmd.source, UrlSource) else "chunks",
        )
        if accepted is not None:
            try:
                accepted()
            except Exception:  # like replies: MQTT must not break the update state machine
                log.exception("model_deploy_progress_failed", id=cmd.id)
        self._jobs.put(lambda: self._run_deploy(cmd, reply, t0))

    def _accept(self, cmd: DeployCommand) -> None:
        """Under the lock: enter ``receiving`` and route the transfer's chunks to the worker."""
        self._set_locked(State.RECEIVING, f"deploy {cmd.id} v{cmd.manifest.version}")
        if isinstance(cmd.source, ChunkSource):
            self._transfer_id = cmd.source.transfer_id
            self._adopt_early(cmd.source.transfer_id)

    def rollback(self, reply: ReplyFn) -> None:
        """``model/rollback``: switch to the previous model (error ``no_previous`` if none)."""
        with self._lock:
            if self._state not in AT_REST:
                error: tuple[str, str] | None = (
                    codes.BUSY,
                    f"a model update is in progress ({self._state.value})",
                )
            elif self.store.previous is None:
                error = (codes.NO_PREVIOUS, "there is no previous model to roll back to")
            else:
                error = None
                self._set_locked(State.SWAPPING, "rollback")
        if error is not None:
            _send(reply, False, None, *error)
            return
        self._jobs.put(lambda: self._run_rollback(reply))

    def on_chunk(self, transfer_id: str, index: int, data: bytes) -> bool:
        """An upload chunk (MQTT network thread). Queued for the worker; False if dropped.

        Chunks of the announced transfer are accepted; chunks arriving just before their
        deploy command (it is handled on another thread) are held briefly, bounded.
        """
        with self._lock:
            if transfer_id == self._transfer_id:
                if self._queued_bytes + len(data) > QUEUE_BYTES:
                    self.chunks_dropped += 1
                    return False
                self._queued_bytes += len(data)
                self._chunks.put((transfer_id, index, bytes(data)))
                return True
            if self._state in AT_REST and transfer_id not in self._refused:
                return self._hold_early(transfer_id, index, data)
            self.chunks_dropped += 1
            return False

    def observe(self, sha256: str, inference_ms: float | None, error: bool | str | None) -> None:
        """One processed frame (inference thread): the model's sha256, its inference time,
        and whether inference failed. Drives the health window; never blocks."""
        err = (error if isinstance(error, str) else "inference error") if error else None
        with self._lock:
            w = self._window
            if w is None:
                if err is None and inference_ms is not None:
                    self._baseline.add(sha256, inference_ms)
                return
            if sha256 != w.health.sha256:
                return  # a frame that was in flight on the old model
            verdict = w.health.observe(inference_ms, err)
        if verdict is not None:
            self._jobs.put(lambda: self._finish_window(w, verdict))

    # -- early chunks --------------------------------------------------------------------------
    def _hold_early(self, transfer_id: str, index: int, data: bytes) -> bool:
        now = self._clock()
        early = self._early
        if early is not None and now - early.since > EARLY_TTL_S:
            early = self._early = None
        if early is None:
            early = self._early = _Early(transfer_id, now, {})
        if early.transfer_id != transfer_id or early.size + len(data) > EARLY_BYTES:
            self.chunks_dropped += 1
            return False
        if index not in early.chunks:
            early.chunks[index] = bytes(data)
            early.size += len(data)
        return True

    def _refuse_transfer(self, transfer_id: str) -> None:
        """Under the lock: drop a closed transfer's chunks, held or still to come."""
        self._refused.append(transfer_id)
        if self._early is not None and self._early.transfer_id == transfer_id:
            self._early = None

    def _adopt_early(self, transfer_id: str) -> None:
        early, self._early = self._early, None
        if early is None or early.transfer_id != transfer_id:
            return
        if self._clock() - early.since > EARLY_TTL_S:
            return
        for index, data in early.chunks.items():
            self._queued_bytes += len(data)
            self._chunks.put((transfer_id, index, data))

    # -- worker ------------------------------------------------------------------------------
    def _loop(self) -> None:
        name_os_thread("model-update")
        while not self._stop.is_set():
            try:
                job = self._jobs.get(timeout=0.2)
            except queue.Empty:
                job = None
            if job is not None:
                try:
                    job()
                except Exception:  # each job replies itself; this is a last resort
                    log.exception("model_update_job_failed")
            self._check_window_deadline()
            self._expire_early()
        self._shutdown()

    def _expire_early(self) -> None:
        with self._lock:
            if self._early is not None and self._clock() - self._early.since > EARLY_TTL_S:
                log.warning(
                    "model_chunks_unclaimed",
                    transfer=self._early.transfer_id,
                    chunks=len(self._early.chunks),
                )
                self._early = None

    def _shutdown(self) -> None:
        """Stopping: pending verdicts are dropped (an uncommitted model is judged again at
        the next start); the deploy waiting on its health window is told so."""
        with self._lock:
            w, self._window = self._window, None
        if w is not None:
            _send(
                w.reply,
                False,
                None,
                codes.SHUTTING_DOWN,
                f"the agent stopped during the health window of v{w.record.version}; the "
                "window starts again when the agent restarts",
            )

    def _prechecks(self, cmd: DeployCommand) -> TrustedKey | None:
        """Protocol steps before any byte moves: signature, version, size cap."""
        signer = check_signature(
            cmd.manifest_raw, cmd.signature, self.keys, allow_unsigned=self.settings.allow_unsigned
        )
        check_version(cmd.manifest, self._current.version)
        check_declared_size(cmd.manifest, self.settings.max_bytes)
        if isinstance(cmd.source, ChunkSource):
            check_chunk_layout(cmd.manifest, cmd.source)
        return signer

    def _run_deploy(self, cmd: DeployCommand, reply: ReplyFn, t0: float) -> None:
        received: Received | None = None
        # The reference latency is taken now: validation (a second model on the same cores)
        # slows the running model's frames and would inflate it.
        baseline = self._baseline_median()
        try:
            received = self._receive(cmd, t0)
            self._set(State.VERIFYING)
            check_size(received.size, cmd.manifest)
            check_sha256(received.sha256, cmd.manifest)
            check_onnx(received.path, cmd.manifest)
            self._set(State.VALIDATING)
            validation, ratio = self._validate(received.path, cmd, baseline)
            self._set(State.PERSISTING)
            before, previous = self.store.state, self._current
            try:
                record = self.store.stage(
                    received.path, received.sha256, cmd.manifest_raw, previous=previous
                )
            except OSError as e:
                raise VerifyError(codes.PERSIST_FAILED, f"cannot write the model: {e}") from e
            received = None  # the store owns the file now
            self._set(State.SWAPPING, f"v{previous.version} -> v{record.version}")
            result = {
                "model": record.summary(),
                "previous": previous.summary(),
                "validation": validation.summary(),
            }
            window = self._new_window(
                record,
                previous,
                undo=before,
                reply=reply,
                result=result,
                baseline_ms=baseline,
                validation_ratio=ratio,
            )
            self._switch(record, undo=before, window=window)
        except VerifyError as e:
            self._fail(reply, e.code, str(e), cmd.id)
        except Exception as e:  # a bug; the model in service is untouched
            log.exception("model_deploy_crashed", id=cmd.id)
            self._fail(reply, codes.INTERNAL_ERROR, f"{type(e).__name__}: {e}", cmd.id)
        finally:
            if received is not None:
                discard(received.path)

    def _fail(self, reply: ReplyFn | None, code: str, message: str, cmd_id: str = "") -> None:
        log.warning("model_update_failed", id=cmd_id, code=code, why=message)
        with self._lock:
            if self._transfer_id is not None:
                self._refuse_transfer(self._transfer_id)
            self._transfer_id = None
            if self._state not in AT_REST:
                self._set_locked(State.FAILED, code)
        _send(reply, False, None, code, message)

    # -- receiving ---------------------------------------------------------------------------
    def _receive(self, cmd: DeployCommand, t0: float) -> Received:
        deadline = t0 + self.settings.transfer_timeout_s
        if isinstance(cmd.source, UrlSource):
            return download(
                cmd.source.url,
                self.store.tmp_dir,
                max_bytes=self.settings.max_bytes,
                expected_size=cmd.manifest.size,
                timeout_s=self._url_timeout_s,
                deadline=deadline,
                ssl_context=self._ssl_context,
                cancel=self._stop,
            )
        try:
            return self._receive_chunks(cmd.source, cmd.manifest.size, deadline)
        finally:
            with self._lock:  # late or duplicate chunks of a closed transfer are dropped
                self._refuse_transfer(cmd.source.transfer_id)
                self._transfer_id = None
                while True:
                    try:
                        _, _, data = self._chunks.get_nowait()
                    except queue.Empty:
                        break
                    self._queued_bytes -= len(data)

    def _receive_chunks(self, src: ChunkSource, size: int, deadline: float) -> Received:
        asm = ChunkAssembler(
            src.transfer_id,
            src.chunks,
            src.chunk_size,
            self.settings.max_bytes,
            deadline,
            self.store.tmp_dir,
            total_size=size,
        )
        try:
            while not asm.complete:
                if self._stop.is_set():
                    raise VerifyError(codes.SHUTTING_DOWN, "the agent is stopping")
                now = self._clock()
                if asm.expired(now):
                    raise asm.timeout_error()
                try:
                    tid, index, data = self._chunks.get(timeout=min(0.2, deadline - now))
                except queue.Empty:
                    continue
                with self._lock:
                    self._queued_bytes -= len(data)
                if tid == src.transfer_id:
                    asm.add(index, data)
            log.info(
                "model_transfer_complete",
                transfer=src.transfer_id,
                chunks=src.chunks,
                duplicates=asm.duplicates,
                rejected=asm.rejected,
            )
            return asm.finish()
        finally:
            asm.abort()

    # -- validating --------------------------------------------------------------------------
    def _validate(
        self, path: Path, cmd: DeployCommand, baseline: float | None
    ) -> tuple[Validation, float | None]:
        frame = self._latest_frame()
        if frame is None:
            log.warning("model_validation_synthetic_frame", why="no camera frame yet")
            frame = _synthetic_frame()
        validation = validate_candidate(path, cmd.manifest, frame, self._spec)
        ratio = None
        if baseline is None:
            # No pipeline latency for the running model: time it the same way, same frame.
            current = self._current_path()
            try:
                ref_ms = measure_latency(current, frame, self._spec)
                ratio = validation.latency_ms / max(ref_ms, 1e-3)
            except Exception as e:  # no reference: the window judges errors only
                log.warning("model_baseline_unmeasured", why=str(e)[:300])
        log.info("model_validated", **validation.summary(), ratio=ratio)
        return validation, ratio

    def _current_path(self) -> Path:
        return self.store.path_of(self._current)

    def _baseline_median(self) -> float | None:
        with self._lock:
            return self._baseline.median()

    # -- swapping and the health window ------------------------------------------------------
    def _switch(self, record: ModelRecord, *, undo: StoreState, window: _Window | None) -> None:
        """Call the pipeline's swap; on failure put the store back and raise swap_failed.

        The health window is armed before the swap, so it sees the new model's very first
        frame (they can be processed before the swap callback returns).
        """
        with self._lock:
            self._window = window
        try:
            self._swap(self.store.path_of(record), record)
        except Exception as e:  # whatever the pipeline raised, the old model still serves
            with self._lock:
                self._window = None
            self.store.restore(undo)
            raise VerifyError(codes.SWAP_FAILED, f"the pipeline could not switch: {e}") from e
        with self._lock:
            self._current = record
            self._baseline.reset(record.sha256)
            if window is not None:
                frames = self.settings.health_frames
                self._set_locked(State.HEALTH_WINDOW, f"{frames} frames")

    def _new_window(
        self,
        record: ModelRecord,
        previous: ModelRecord | None,
        *,
        undo: StoreState | None,
        reply: ReplyFn | None,
        result: dict[str, Any],
        baseline_ms: float | None = None,
        validation_ratio: float | None = None,
    ) -> _Window:
        health = HealthWindow(
            record.sha256,
            self.settings.health_frames,
            budget=self.settings.latency_budget,
            deadline=self._clock() + self._health_timeout_s,
            baseline_ms=baseline_ms,
            validation_ratio=validation_ratio,
            max_errors=self._health_max_errors,
        )
        return _Window(health, record, previous, undo, reply, result)

    def _check_window_deadline(self) -> None:
        with self._lock:
            w = self._window
            verdict = w.health.check_deadline(self._clock()) if w is not None else None
        if w is not None and verdict is not None:
            self._finish_window(w, verdict)

    def _finish_window(self, w: _Window, verdict: Verdict) -> None:
        with self._lock:
            if self._window is not w:
                return
            self._window = None
        result = {**w.result, "health": verdict.stats}
        if verdict.ok:
            try:
                record = self.store.commit()
            except OSError as e:
                self._set(State.FAILED, "commit failed")
                log.error("model_commit_failed", error=str(e))
                _send(w.reply, False, None, codes.PERSIST_FAILED, f"cannot commit: {e}")
                return
            with self._lock:
                self._current = record
            self._set(State.COMMITTED, f"{record.name} v{record.version}")
            log.info("model_committed", **record.summary(), **verdict.stats)
            _send(w.reply, True, {"state": "committed", **result}, None, verdict.message)
            return
        self._roll_back_window(w, verdict)

    def _roll_back_window(self, w: _Window, verdict: Verdict) -> None:
        log.error("model_health_failed", code=verdict.code, why=verdict.message, **verdict.stats)
        message = verdict.message
        if w.undo is not None:
            target = w.undo.active or self._bundled
            self.store.restore(w.undo)
        else:  # resumed at start: no record of the state before, fall back to last good
            decision = self.store.fall_back(message)
            target = decision.record or self._bundled
        try:
            self._swap(self.store.path_of(target), target)
        except Exception as e:  # the store already points at the good model for a restart
            log.exception("model_rollback_swap_failed")
            message += f"; switching back to v{target.version} failed too: {e}"
            self._set(State.FAILED, "rollback swap failed")
            _send(w.reply, False, None, verdict.code or codes.INTERNAL_ERROR, message)
            return
        with self._lock:
            self._current = target
            self._baseline.reset(target.sha256)
        self._set(State.ROLLED_BACK, verdict.code or "")
        _send(
            w.reply,
            False,
            None,
            verdict.code,
            f"rolled back to {target.name} v{target.version}: {message}",
        )

    def _run_rollback(self, reply: ReplyFn) -> None:
        before = self.store.state
        try:
            target = self.store.rollback(current=self._current)
        except VerifyError as e:
            self._fail(reply, e.code, str(e))
            return
        except OSError as e:
            self._fail(reply, codes.PERSIST_FAILED, f"cannot write the store state: {e}")
            return
        previous = self._current
        result = {"model": target.summary(), "previous": previous.summary()}
        # A never-committed target (e.g. the model a crash loop left) earns its place first.
        window = None
        if not target.committed:
            window = self._new_window(target, previous, undo=before, reply=reply, result=result)
        try:
            self._switch(target, undo=before, window=window)
        except VerifyError as e:
            self._fail(reply, e.code, str(e))
            return
        log.info("model_rolled_back", **target.summary(), previous=previous.version)
        if window is None:
            self._set(State.COMMITTED, "rollback")
            _send(reply, True, {"state": "committed", **result}, None, "rolled back")


def _send(
    reply: ReplyFn | None, ok: bool, result: dict[str, Any] | None, code: str | None, msg: str
) -> None:
    if reply is None:
        return
    try:
        reply(ok, result, code, msg)
    except Exception:  # the reply path (MQTT) must not break the update state machine
        log.exception("model_update_reply_failed", code=code)
