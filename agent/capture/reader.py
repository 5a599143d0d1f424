"""One connection to a source: open it, read until it ends, fails or is cancelled.

A session runs on its own daemon thread so that the camera's supervisor can give up on a
read that never returns (a driver or a GStreamer pipeline without timeouts): it cancels
the session, abandons the thread, and opens a new connection. When the blocked call
finally returns, the session sees it was cancelled and closes its source.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from agent import causes
from agent.capture.base import FrameSource, Image, SourceUnavailableError, log
from agent.capture.exitgate import CaptureClosedError, guarded_call
from agent.capture.freshness import FreezeDetector
from agent.capture.pacing import MediaClock, RateGate, file_gate
from agent.errors import SourceError
from agent.osthread import name_os_thread
from agent.settings import CameraSettings

#: Pace of an image folder with ``realtime: true`` and no ``fps`` cap.
DEFAULT_IMAGE_FPS = 1.0
#: Longest single sleep, so a cancelled session notices within this.
_SLEEP_SLICE_S = 0.25

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """Why a session ended: ``eof`` and ``fatal`` are final, ``error`` means reconnect.

    ``cause``: the one word for the camera status (agent.causes).
    """

    kind: Literal["eof", "error", "fatal", "halted"]
    reason: str
    cause: str = causes.ERROR


class Deliver(Protocol):
    """Hands one image to the camera; returns a buffer the session may decode into next.

    ``wait`` asks for a lossless hand-over (block until the consumer took the last frame).
    """

    def __call__(
        self, session: ReadSession, image: Image, t: float, ts: float, wait: bool
    ) -> Image | None: ...


def recording_fps(source: FrameSource, settings: CameraSettings) -> float:
    """The frame rate a recording (a file, an image folder) plays at: its own, else the
    camera's ``fps``, else ``DEFAULT_IMAGE_FPS``."""
    return source.fps or settings.fps or DEFAULT_IMAGE_FPS


class ReadSession:
    """Open-to-close life of one source, run on ``self.thread``."""

    def __init__(
        self,
        source: FrameSource,
        settings: CameraSettings,
        stop: threading.Event,
        deliver: Deliver,
    ) -> None:
        self.source = source
        self._settings = settings
        self._stop = stop
        self._deliver = deliver
        self._cancelled = False
        self._retune = False
        self.end: SessionEnd | None = None
        #: (what, since): the source call in progress, read by the supervisor's stall check.
        self.call: tuple[str, float] | None = None
        self.first_frame_at: float | None = None
        self.frames_skipped = 0
        self.thread = threading.Thread(target=self._run, name=f"capture-{settings.id}", daemon=True)

    def cancel(self) -> None:
        self._cancelled = True

    def retune(self, settings: CameraSettings) -> None:
        """Apply a new ``fps`` cap from the next frame on, without reconnecting."""
        self._settings = settings
        self._retune = True

    def is_halted(self) -> bool:
        return self._cancelled or self._stop.is_set()

    def blocked_for(self, now: float) -> tuple[str, float] | None:
        """The source call in progress and for how long, or None between calls."""
        call = self.call
        return None if call is None else (call[0], now - call[1])

    def _call(self, what: str, fn: Callable[..., T], *args: object) -> T:
        self.call = (what, time.monotonic())
        try:
            return guarded_call(fn, *args)
        finally:
            self.call = None

    def _sleep_until(self, deadline: float) -> bool:
        """False when halted before ``deadline``."""
        while not self.is_halted():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            self._stop.wait(min(left, _SLEEP_SLICE_S))
        return False

    def _run(self) -> None:
        name_os_thread(f"cap-{self._settings.id}")
        try:
            self.end = self._loop()
        except SourceUnavailableError as e:
            self.end = SessionEnd("fatal", str(e), causes.UNSUPPORTED)
        except SourceError as e:
            self.end = SessionEnd("error", str(e), getattr(e, "cause", causes.ERROR))
        except CaptureClosedError as e:
            self.end = SessionEnd("halted", str(e), causes.STOPPED)
        except Exception as e:  # outer edge: a crashed session is reported, then retried
            log.exception("capture_session_failed", camera=self._settings.id, error=str(e))
            self.end = SessionEnd("error", f"{type(e).__name__}: {e}"[:200])
        finally:
            try:
                self._call("close", self.source.close)
            except CaptureClosedError:
                pass  # exiting: the OS releases the device
            except Exception as e:  # closing a broken capture must not mask why it broke
                log.warning("capture_close_failed", camera=self._settings.id, error=str(e))

    def _at_end(self, frames_this_pass: int) -> SessionEnd | None:
        """What a failed read means: reconnect (live), stop (file), or rewind (loop)."""
        src = self.source
        if src.is_live:
            reason = f"{src.name}: read failed (stream ended or timed out)"
            return SessionEnd("error", reason, causes.ENDED)
        if not self._settings.loop:
            return SessionEnd("eof", "end of file", causes.ENDED)
        if frames_this_pass == 0:
            # Rewinding a file with no readable frame would spin; back off instead.
            return SessionEnd("error", f"{src.name}: no readable frame", causes.NO_STREAM)
        self._call("open", src.open)
        return None

    def _pacing(self) -> tuple[MediaClock | None, RateGate | None]:
        """The media clock of a file played in real time, and the ``fps`` cap's gate."""
        s, src = self._settings, self.source
        clock: MediaClock | None = None
        clock_fps = src.fps
        if not src.is_live and s.realtime:
            clock_fps = recording_fps(src, s)
            clock = MediaClock(clock_fps, time.monotonic())
        if clock is not None:
            # The same rule `edge-agent track` samples a recording by.
            return clock, file_gate(s.fps, clock.fps)
        if s.fps is None:
            return None, None
        return None, RateGate(s.fps, 0.5 / clock_fps if clock_fps else 0.0)

    def _admit(self, gate: RateGate, due: float, lossless: bool) -> bool:
        """Whether the frame due at ``due`` is read, or skipped undecoded for the cap."""
        if lossless:
            # A lossless reader never skips: it waits until the cap lets the frame through.
            self._sleep_until(time.monotonic() + gate.wait_s(time.monotonic()))
            gate.admit(time.monotonic())
            return True
        if gate.admit(due):
            return True
        self.frames_skipped += 1
        return False

    def _loop(self) -> SessionEnd:
        s, src = self._settings, self.source
        self._call("open", src.open)
        lossless = not src.is_live and not s.realtime
        clock, gate = self._pacing()
        freeze = FreezeDetector() if src.is_live and src.detect_frozen else None
        buf: Image | None = None
        frames_this_pass = 0
        while not self.is_halted():
            if self._retune:
                self._retune = False
                s = self._settings
                clock, gate = self._pacing()
            due = clock.due(time.monotonic()) if clock is not None else time.monotonic()
            img: Image | None = None
            if gate is None or self._admit(gate, due, lossless):
                img = self._call("read", src.read, buf)
            else:
                if clock is not None:
                    clock.advance()
                if self._call("grab", src.skip):
                    continue
            if img is None:
                end = self._at_end(frames_this_pass)
                if end is not None:
                    return end
                frames_this_pass = 0
                continue
            frames_this_pass += 1
            # A paced file frame is decoded ahead and released at its due time, as a
            # camera would deliver it; its capture time is the release time.
            if clock is not None:
                clock.advance()
                if not self._sleep_until(due):
                    break
            t = time.monotonic()
            if freeze is not None:
                frozen = freeze.frozen_for(img, t)
                if frozen >= s.stall_timeout_s:
                    reason = f"frozen: identical frames for {frozen:.0f} s"
                    return SessionEnd("error", reason, causes.FROZEN)
            buf = self._deliver(self, img, t, time.time(), lossless)
        return SessionEnd("halted", "stopped", causes.STOPPED)
