"""``CameraWorker``: puts one camera's frames in its slot, reconnecting as needed.

Two threads per camera. The supervisor (``camera-<id>``) owns the state machine and the
reconnect schedule and never touches OpenCV, so it cannot block; each connection attempt
runs as a ``ReadSession`` on its own thread (``capture-<id>``). A session that sits in one
source call longer than the camera's stall timeout is cancelled and abandoned, and a new
one is opened after the backoff delay: no driver, stream or pipeline can wedge the camera,
another camera, or the consumer, and shutdown waits a bounded time whatever cv2 is doing.

Read buffers: a frame handed to the slot belongs to whoever takes it (inference may hold
several frames in flight), so the reader decodes the next frame into a fresh array. The
exception is a frame the slot *dropped* (the consumer was slower than the camera): nobody
ever saw it, so its array is recycled as the next ``cap.read(image=...)`` buffer. We did
not build a pool with reference counting for consumed frames: on vtest.avi (768x576)
decoding into a fresh array and into a reused one both cost ~0.5 ms per frame, because
glibc hands the block a released frame freed straight back to the next allocation.
Frames skipped for the ``fps`` cap are only grabbed: no colour conversion or copy, and no
decode at all for a V4L2 MJPEG camera (vtest.avi: grab 0.33 ms, read 0.61 ms per frame).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass

from agent import causes
from agent.capture.backoff import Backoff
from agent.capture.base import (
    CameraState,
    CameraStateMachine,
    CameraStatus,
    Image,
    SourceFactory,
    StatusCallback,
    log,
)
from agent.capture.exitgate import open_capture
from agent.capture.factory import make_source
from agent.capture.latest import LatestFrameSlot
from agent.capture.pacing import MediaClock
from agent.capture.reader import ReadSession, SessionEnd, recording_fps
from agent.capture.sources import redact
from agent.frames import Frame
from agent.osthread import name_os_thread
from agent.settings import CameraSettings
from agent.stats import RateMeter

#: How often the supervisor looks at its session (reaction time to a failed open).
SUPERVISOR_TICK_S = 0.1
#: First reconnect delay; doubled per failed attempt up to ``reconnect_max_s``.
BACKOFF_BASE_S = 0.5
#: A connection that streamed this long resets the backoff to its first step.
STABLE_AFTER_S = 5.0
#: Abandoned, still-blocked sessions tolerated before we stop opening new connections.
MAX_BLOCKED_SESSIONS = 2
#: How long the slot may stay full before a lossless reader re-checks for a halt.
_PUT_SLICE_S = 0.25


@dataclass(frozen=True, slots=True)
class CameraStats:
    """Counters for heartbeats and logs (fps_processed is the pipeline's, not ours).

    ``fps_in``: frames put in the slot per second over the last 5 s (after the ``fps``
    cap); ``frames_in``/``frames_dropped``: the slot's counters (dropped = pushed out by
    newer frames before the consumer took them, ``agent.capture.latest``);
    ``frames_skipped``: frames not decoded because of the cap; ``reconnects``: connection
    attempts after the first; ``last_frame_age_s``: seconds since the last frame entered
    the slot (None before the first).
    """

    camera_id: str
    state: CameraState
    reason: str
    fps_in: float
    frames_in: int
    frames_dropped: int
    frames_skipped: int
    reconnects: int
    last_frame_age_s: float | None


class _RecordingTime:
    """The recording's own time of each frame of a file read losslessly (``realtime:
    false``): one frame period of the file after the frame before, however fast the agent
    takes them, so its motion, regions, tracks and events go by the recording's seconds, as
    ``edge-agent track`` goes and as the camera it was recorded from would have. A session
    (the file opened again after an error) starts from its first frame's capture time, and
    never before the frame after the last one. Within a session a frame's time is the
    session's start plus its index times the period (a ``MediaClock`` that never rebases),
    as track reckons it, not a sum of periods: a sum's rounding puts a cadence due exactly
    on a frame on the other side of it now and then, and from there the two drift apart."""

    def __init__(self) -> None:
        self._session: ReadSession | None = None
        self._clock: MediaClock | None = None

    def at(self, session: ReadSession, t_capture: float, settings: CameraSettings) -> float:
        """The recording time of the frame ``session`` read at ``t_capture``; ``settings``:
        the camera's now (an image folder plays at its ``fps``, which config/set changes)."""
        fps = recording_fps(session.source, settings)
        clock = self._clock
        if clock is None or session is not self._session or fps != clock.fps:
            # A finished session's clock, or the old rate's, is due at the frame after its
            # last one: a new session starts there or at its first capture if later, a
            # new rate goes on from there.
            if clock is None:
                start = t_capture
            elif session is not self._session:
                start = max(t_capture, clock.due(t_capture))
            else:
                start = clock.due(t_capture)
            clock = self._clock = MediaClock(fps, start, max_lag_s=math.inf)
            self._session = session
        t = clock.due(t_capture)
        clock.advance()
        return t


class CameraWorker:
    """Capture for one camera; frames go to ``slot``, status changes to ``on_status``.

    ``stop`` is the daemon's stop event; ``stop()`` halts just this camera (e.g. when it is
    removed from the configuration). To shut down many cameras, set ``stop`` first so they
    all wind down at once, then call ``stop(timeout)`` on each. ``on_status`` runs on a
    capture thread, in order, and must return quickly (queue the MQTT publish).
    ``source_factory`` exists for sources we cannot have in tests (a V4L2 device that
    freezes).
    """

    def __init__(
        self,
        settings: CameraSettings,
        slot: LatestFrameSlot,
        stop: threading.Event,
        on_status: StatusCallback | None = None,
        *,
        source_factory: SourceFactory = make_source,
        backoff: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self.slot = slot
        self._stop = stop
        self._halt = threading.Event()
        self._factory = source_factory
        self._machine = CameraStateMachine(settings.id, on_status)
        self._backoff = backoff or Backoff(BACKOFF_BASE_S, settings.reconnect_max_s)
        self._frame_ids = itertools.count()
        self._fps_in = RateMeter(window_s=5.0)
        self._session: ReadSession | None = None
        self._abandoned: list[ReadSession] = []
        self._last_frame_t: float | None = None
        self._media = _RecordingTime()
        self._skipped_closed = 0
        self._opened_once = False
        self.reconnects = 0
        self._log = log.bind(camera=settings.id, source=redact(settings.source))
        self._thread = threading.Thread(
            target=self._supervise, name=f"camera-{settings.id}", daemon=True
        )

    # -- owner's API -----------------------------------------------------------------------
    def start(self) -> None:
        # An earlier agent of this process may have shut capture down (capture.exitgate);
        # starting a camera lets it in again (never after the interpreter began to exit).
        open_capture()
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """Halt this camera; False if a thread was still blocked after ``timeout``."""
        self._halt.set()
        deadline = time.monotonic() + timeout
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._machine.transition(CameraState.STOPPED, "stopped", causes.STOPPED)
        session = self._session
        if session is not None and session.thread.is_alive():
            session.thread.join(max(0.0, deadline - time.monotonic()))
            return not session.thread.is_alive() and not self._thread.is_alive()
        return not self._thread.is_alive()

    def set_fps(self, fps: float | None) -> None:
        """Change the camera's ``fps`` cap at run time (config/set), keeping the connection."""
        self.settings = self.settings.model_copy(update={"fps": fps})
        session = self._session
        if session is not None:
            session.retune(self.settings)
        self._log.info("camera_fps_cap", fps=fps)

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def status(self) -> CameraStatus:
        return self._machine.status

    @property
    def last_frame_age_s(self) -> float | None:
        t = self._last_frame_t
        return None if t is None else time.monotonic() - t

    def stats(self) -> CameraStats:
        st = self._machine.status
        session = self._session
        skipped = self._skipped_closed + (session.frames_skipped if session else 0)
        age = self.last_frame_age_s
        return CameraStats(
            camera_id=self.settings.id,
            state=st.state,
            reason=st.reason,
            fps_in=self._fps_in.rate(),
            frames_in=self.slot.frames_in,
            frames_dropped=self.slot.frames_dropped,
            frames_skipped=skipped,
            reconnects=self.reconnects,
            last_frame_age_s=None if age is None else round(age, 3),
        )

    # -- frames (session threads) ----------------------------------------------------------
    def _deliver(
        self, session: ReadSession, image: Image, t: float, ts: float, wait: bool
    ) -> Image | None:
        with self._machine.lock:
            if session is not self._session or session.is_halted():
                return None  # an abandoned session's late frame
            if session.first_frame_at is None:
                session.first_frame_at = t
                if self._machine.transition(CameraState.STREAMING, ""):
                    self._log.info("camera_state", state="streaming", fps=session.source.fps)
        if wait:
            # A lossless reader (a file with realtime: false) runs ahead of the pipeline and
            # waits here for room. Its frame is captured, as far as capture-to-publish goes,
            # when the pipeline can take it: counting the wait would report the reader's
            # head start, not the agent's latency.
            while not self.slot.wait_space(_PUT_SLICE_S):
                if session.is_halted():
                    return None
            t, ts = time.monotonic(), time.time()
        t_media = self._media.at(session, t, self.settings) if wait else None
        frame = Frame(image, self.settings.id, next(self._frame_ids), t, ts, t_media)
        self._last_frame_t = t
        self._fps_in.tick(t)
        if wait:
            while not self.slot.put_wait(frame, _PUT_SLICE_S):
                if session.is_halted():
                    return None
            return None
        dropped = self.slot.put(frame)
        return None if dropped is None else dropped.image

    # -- supervisor ------------------------------------------------------------------------
    def _halted(self) -> bool:
        return self._halt.is_set() or self._stop.is_set()

    def _supervise(self) -> None:
        name_os_thread(f"cam-{self.settings.id}")
        next_open = time.monotonic()
        try:
            while not self._halted():
                now = time.monotonic()
                session = self._session
                if session is None:
                    if now >= next_open:
                        next_open = self._open_or_defer(now)
                elif not session.thread.is_alive():
                    end = session.end or SessionEnd("error", "capture thread died")
                    if end.kind in ("eof", "fatal"):
                        self._finish(session, CameraState.OFFLINE, end.reason, end.cause)
                        return  # offline is final: nothing left to supervise
                    if end.kind == "halted":
                        break
                    next_open = now + self._retry(session, end.reason, now, end.cause)
                else:
                    next_open = self._check_stall(session, now, next_open)
                self._stop.wait(SUPERVISOR_TICK_S)
        except Exception as e:  # outer edge: report, never die silently
            self._log.exception("camera_supervisor_failed", error=str(e))
            reason = f"internal error: {e}"[:200]
            self._machine.transition(CameraState.OFFLINE, reason, causes.ERROR)
        finally:
            self._shutdown_session()
        if self._halted():
            self._machine.transition(CameraState.STOPPED, "stopped", causes.STOPPED)

    def _open_or_defer(self, now: float) -> float:
        """Start a session, or return when to try again."""
        self._abandoned = [s for s in self._abandoned if s.thread.is_alive()]
        if len(self._abandoned) >= MAX_BLOCKED_SESSIONS:
            reason = "previous connections still blocked in the driver"
            self._to_reconnecting(reason, causes.TIMEOUT)
            return now + self._backoff.next_delay()
        try:
            source = self._factory(self.settings)
        except Exception as e:  # a factory failure is a failed open, retried like one
            reason = f"cannot create source: {e}".splitlines()[0][:200]
            self._to_reconnecting(redact(reason), causes.ERROR)
            return now + self._backoff.next_delay()
        session = ReadSession(source, self.settings, self._stop, self._deliver)
        with self._machine.lock:
            self._session = session
        if self._opened_once:
            self.reconnects += 1
        self._opened_once = True
        session.thread.start()
        return now

    def _retry(self, session: ReadSession, reason: str, now: float, cause: str) -> float:
        """Account for an ended session and return the delay before the next attempt."""
        self._finish(session, CameraState.RECONNECTING, reason, cause)
        first = session.first_frame_at
        if first is not None and now - first >= STABLE_AFTER_S:
            self._backoff.reset()
        delay = self._backoff.next_delay()
        self._log.debug("camera_reconnect_scheduled", reason=reason, delay_s=round(delay, 2))
        return delay

    def _check_stall(self, session: ReadSession, now: float, next_open: float) -> float:
        blocked = session.blocked_for(now)
        if blocked is None:
            return next_open
        what, seconds = blocked
        s = self.settings
        # FFmpeg enforces open_timeout_s itself; the margin only catches backends that don't.
        limit = s.open_timeout_s + s.stall_timeout_s if what == "open" else s.stall_timeout_s
        if seconds <= limit:
            return next_open
        session.cancel()
        self._abandoned.append(session)
        reason = f"stalled: {what} blocked for {seconds:.0f} s"
        return now + self._retry(session, reason, now, causes.TIMEOUT)

    def _finish(self, session: ReadSession, state: CameraState, reason: str, cause: str) -> None:
        with self._machine.lock:
            if self._session is session:
                self._session = None
            self._skipped_closed += session.frames_skipped
            changed = self._machine.transition(state, reason, cause)
        if changed:
            self._log_state(state, reason, cause)

    def _to_reconnecting(self, reason: str, cause: str) -> None:
        if self._machine.transition(CameraState.RECONNECTING, reason, cause):
            self._log_state(CameraState.RECONNECTING, reason, cause)

    def _log_state(self, state: CameraState, reason: str, cause: str) -> None:
        # End of a file is the expected end of its work; a camera that cannot stream is an
        # error of that camera (a journal filtered on errors shows why it is dark).
        level = "warning" if cause in (causes.ENDED, causes.STOPPED) else "error"
        if state is CameraState.RECONNECTING and cause in (causes.ENDED, causes.TIMEOUT):
            level = "warning"
        getattr(self._log, level)("camera_state", state=state.value, reason=cause, detail=reason)

    def _shutdown_session(self) -> None:
        session = self._session
        if session is None:
            return
        session.cancel()
        # Bounded: a session blocked inside cv2 is a daemon thread and is left behind.
        session.thread.join(1.0)
