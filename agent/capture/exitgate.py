"""Keep capture threads out of OpenCV while the interpreter exits.

Capture threads are daemon threads (a hung driver must not block shutdown). On Python
3.10-3.13 a daemon thread that comes back from a GIL-releasing C++ call while the
interpreter is finalizing is ended with ``pthread_exit``; the forced unwind runs through
OpenCV's ``noexcept`` GIL guard and the process aborts ("terminate called without an
active exception", exit status 134) instead of exiting cleanly. Measured here: a camera
whose FFmpeg open was in flight at exit aborted the process every time.

So every source call passes this gate. ``close()`` (run at exit, or by the daemon at the
end of its shutdown) refuses new calls and waits, bounded, for those in flight. A call
that never returns (a wedged driver) cannot cause the abort either: only a return can.
A camera started after a shutdown (a new agent in the same process) opens the gate again
(``open_capture``); the close at interpreter exit is final.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Bound of the wait at interpreter exit; FFmpeg opens and reads time out well before.
EXIT_WAIT_S = 5.0


class CaptureClosedError(RuntimeError):
    """The process is exiting: no new OpenCV call may start."""


class _ExitGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        self._final = False  # closed at interpreter exit: never opened again

    def call(self, fn: Callable[..., T], *args: object) -> T:
        with self._cond:
            if self._closed:
                raise CaptureClosedError("capture is shut down: the process is exiting")
            self._inflight += 1
        try:
            return fn(*args)
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def close(self, timeout: float, *, final: bool = False) -> bool:
        """Refuse new calls; True once none is in flight, False after ``timeout``."""
        with self._cond:
            self._closed = True
            self._final = self._final or final
            return self._cond.wait_for(lambda: self._inflight == 0, timeout)

    def open(self) -> bool:
        """Take calls again after a shutdown's close (False once the interpreter exits)."""
        with self._cond:
            self._closed = self._final
            return not self._closed


_gate = _ExitGate()
guarded_call = _gate.call


def close_capture(timeout: float = EXIT_WAIT_S) -> bool:
    """End all capture I/O (the last step of a shutdown); see the module doc."""
    return _gate.close(timeout)


def open_capture() -> bool:
    """Let capture calls in again: an agent started in a process whose earlier agent shut
    down (the tests, an embedding program). Never after the interpreter began to exit."""
    return _gate.open()


def _close_at_exit() -> None:
    _gate.close(EXIT_WAIT_S, final=True)


atexit.register(_close_at_exit)
