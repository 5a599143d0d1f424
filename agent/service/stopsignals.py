"""SIGTERM and SIGINT, handled where no lock can stop them.

Python runs a signal handler in the main thread, between two bytecodes, wherever that
thread is. A handler that sets a ``threading.Event`` takes the Event's lock, and if the
main thread was holding that same lock (inside its own ``Event.wait``), the process
deadlocks: the flag is never set, so the workers go on capturing and detecting, and
every later SIGTERM nests another wait. An agent did this under load in CI: it logged
``stopping`` and then ran for eight minutes. CPython's docs say it plainly:
synchronization primitives must not be used in signal handlers.

So the Python handler here does nothing. The C handler writes each signal's number to a
pipe (``signal.set_wakeup_fd``), and a thread of ours reads that pipe. That thread logs,
sets the stop event, forces the exit on a second, deliberate signal, and ends a stop that
runs past its bound, with every thread's stack in the log. That last step bounds a hang
that the first two steps cannot reach, whatever caused it.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any

from agent.log import get_logger
from agent.osthread import name_os_thread

log = get_logger("daemon")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: ``timeout`` and some supervisors deliver one stop twice (to the process and to its
#: group) within microseconds: only a later, deliberate second signal forces the exit.
REPEAT_S = 0.5


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: it must exist (or the default action kills the process),
    and it must take no lock. The work is done by the thread that reads the wakeup pipe."""


def thread_stacks() -> dict[str, str]:
    """Every thread's current stack, by thread name."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return {
        f"{names.get(ident, 'unknown')}:{ident}": "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    }


class StopSignals:
    """Turns SIGTERM and SIGINT into ``stop.set()`` from a thread of its own.

    ``bound_s``: how long a stop may take, counted from the first signal, before the
    process is ended with exit status 1 and a ``stop_overran`` line that holds every
    thread's stack. ``install`` must be called from the main thread.
    """

    def __init__(self, stop: threading.Event, bound_s: float) -> None:
        self.stop = stop
        self.bound_s = bound_s
        self._read_fd = -1
        self._write_fd = -1
        self._thread: threading.Thread | None = None
        self._old_fd = -1
        self._old: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # set_wakeup_fd's own requirement
        self._old_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        self._old = {sig: signal.signal(sig, _ignore) for sig in STOP_SIGNALS}
        self._thread = threading.Thread(target=self._watch, name="stop-signals", daemon=True)
        self._thread.start()

    def uninstall(self) -> None:
        """The handlers and wakeup fd from before again, and the watching thread ends (for
        a caller that goes on living after its stop, such as a test)."""
        for sig, old in self._old.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._write_fd)  # the reader sees end of file
        if self._thread is not None:
            self._thread.join(2.0)

    def _watch(self) -> None:
        name_os_thread("stop-signals")
        first: float | None = None
        try:
            while True:
                wait = None if first is None else max(0.0, first + self.bound_s - time.monotonic())
                ready, _, _ = select.select([self._read_fd], [], [], wait)
                if not ready:
                    # Should the log itself be held by the stuck thread: out in 2 s anyway.
                    faulthandler.dump_traceback_later(2.0, exit=True)
                    log.error(
                        "stop_overran",
                        bound_s=self.bound_s,
                        hint="a thread did not end in time; its stack is below",
                        threads=thread_stacks(),
                    )
                    os._exit(1)
                data = os.read(self._read_fd, 64)
                if not data:
                    return
                for signum in data:
                    if signum not in STOP_SIGNALS:
                        continue  # another signal with a Python handler also writes here
                    now = time.monotonic()
                    name = signal.Signals(signum).name
                    if first is None:
                        first = now
                        log.info("stopping", signal=name)
                        self.stop.set()
                    elif now - first > REPEAT_S:
                        log.warning("forced_exit", signal=name)
                        os._exit(1)
        finally:
            os.close(self._read_fd)
