"""OS-level thread names, so ``top -H``, ``ps -L`` and ``/proc`` show what each thread does.

Python names its threads for itself only: to the OS every thread of the agent is called
after the interpreter. Each of the agent's threads names itself when it starts
(``infer-0``, ``cap-front``, ``mqtt-sender``...), which is also how ``bench/threads.py``
splits the running agent's CPU time by thread.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

#: Bytes of a thread name the kernel keeps (TASK_COMM_LEN less the terminating NUL).
COMM_MAX = 15
_COMM = Path("/proc/thread-self/comm")


def comm_name(name: str) -> bytes:
    """``name`` as the kernel will keep it: UTF-8, at most 15 bytes, no broken character."""
    return name.encode("utf-8")[:COMM_MAX].decode("utf-8", "ignore").encode("utf-8")


def name_os_thread(name: str | None = None) -> None:
    """Give the calling thread the OS name ``name`` (default: its Python name).

    Linux only (``/proc/thread-self/comm``); elsewhere, or where /proc is read-only, a
    no-op: a name is a convenience, never a reason to fail.
    """
    text = comm_name(name if name is not None else threading.current_thread().name)
    with contextlib.suppress(OSError):
        _COMM.write_bytes(text)
