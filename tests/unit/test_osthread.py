"""OS thread names: what top -H, ps -L and bench/threads.py show for the agent's threads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agent.osthread import COMM_MAX, comm_name, name_os_thread


def test_comm_name_keeps_15_bytes_and_whole_characters():
    assert comm_name("infer-0") == b"infer-0"
    assert comm_name("cap-front-door-camera") == b"cap-front-door-"
    assert len(comm_name("x" * 40)) == COMM_MAX
    # 'ü' is 2 bytes: a cut through it drops the whole character, not half of it.
    assert comm_name("cap-" + "ü" * 10) == ("cap-" + "ü" * 5).encode()
    assert comm_name("cap-" + "ü" * 10).decode("utf-8")


@pytest.mark.skipif(not Path("/proc/thread-self/comm").exists(), reason="Linux /proc only")
def test_a_thread_names_itself_for_the_os():
    seen: dict[str, str] = {}

    def body(explicit: str | None) -> None:
        name_os_thread(explicit)
        seen[threading.current_thread().name] = Path("/proc/thread-self/comm").read_text()

    for pyname, explicit in (("mqtt-sender", None), ("worker", "infer-3")):
        t = threading.Thread(target=body, args=(explicit,), name=pyname)
        t.start()
        t.join(5)
    assert seen == {"mqtt-sender": "mqtt-sender\n", "worker": "infer-3\n"}
    # The calling thread was not renamed.
    assert Path("/proc/thread-self/comm").read_text().strip() != "infer-3"
