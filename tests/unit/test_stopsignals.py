"""SIGTERM stops the agent whatever its main thread holds (agent.service.stopsignals).

Each case runs in a child process: a signal's disposition and the wakeup fd belong to
the whole process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The main thread spins on the stop event's own lock (Event.wait(0) takes it each turn),
# the worst case for a handler that sets the event itself: that handler deadlocks the
# process on nearly every signal (CPython: no locks in signal handlers).
CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from agent.log import configure_logging
    from agent.service.stopsignals import StopSignals

    configure_logging("info", json=True)

    def previous(signum, frame):  # what the process had before: back after uninstall
        print("previous handler", flush=True)
        os._exit(3)

    signal.signal(signal.SIGTERM, previous)
    stop = threading.Event()
    signals = StopSignals(stop, bound_s=float(sys.argv[1]))
    signals.install()
    print("ready", flush=True)
    mode = sys.argv[2]
    if mode == "spin":
        while not stop.wait(0):
            pass
        print("stopped", flush=True)
    elif mode == "stuck":  # stops, then never finishes its shutdown
        while not stop.wait(0):
            pass
        def shutdown_that_hangs():
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
        shutdown_that_hangs()
    elif mode == "uninstall":
        signals.uninstall()
        print("uninstalled", flush=True)
        time.sleep(30)
    """
)


def _child(bound_s: float, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(bound_s), mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, list[dict[str, Any]]]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the process did not end within {timeout} s; it wrote:\n{out}")
    lines = []
    for line in out.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            lines.append({"text": line})
    return proc.returncode, lines


def _events(lines: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in lines if e.get("event") == event]


@pytest.mark.timeout(120)
def test_sigterm_stops_a_main_thread_that_holds_the_events_lock() -> None:
    """20 tries: every one stops, logs `stopping` once and leaves the main thread free."""
    for attempt in range(20):
        proc = _child(bound_s=30.0, mode="spin")
        time.sleep(0.01 * (attempt % 5))
        proc.send_signal(signal.SIGTERM)
        rc, lines = _finish(proc, timeout=10.0)
        assert rc == 0, (attempt, lines)
        assert {"text": "stopped"} in lines, (attempt, lines)
        stopping = _events(lines, "stopping")
        assert [e["signal"] for e in stopping] == ["SIGTERM"], (attempt, lines)


@pytest.mark.timeout(60)
def test_a_second_deliberate_signal_forces_the_exit() -> None:
    proc = _child(bound_s=30.0, mode="stuck")
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    rc, lines = _finish(proc, timeout=10.0)
    assert rc == 1, lines
    assert [e["signal"] for e in _events(lines, "stopping")] == ["SIGINT"], lines
    assert [e["signal"] for e in _events(lines, "forced_exit")] == ["SIGTERM"], lines


@pytest.mark.timeout(60)
def test_a_signal_sent_twice_at_once_is_one_stop() -> None:
    """`timeout` and some supervisors signal the process and its group together."""
    proc = _child(bound_s=2.0, mode="spin")
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    rc, lines = _finish(proc, timeout=10.0)
    assert rc == 0, lines
    assert len(_events(lines, "stopping")) == 1, lines
    assert not _events(lines, "forced_exit"), lines


@pytest.mark.timeout(60)
def test_a_stop_past_its_bound_ends_with_every_threads_stack() -> None:
    started = time.monotonic()
    proc = _child(bound_s=1.5, mode="stuck")
    proc.send_signal(signal.SIGTERM)
    rc, lines = _finish(proc, timeout=15.0)
    assert rc == 1, lines
    assert time.monotonic() - started >= 1.5
    (overran,) = _events(lines, "stop_overran")
    assert overran["level"] == "error" and overran["bound_s"] == 1.5
    main = [stack for name, stack in overran["threads"].items() if name.startswith("MainThread")]
    assert len(main) == 1 and "in shutdown_that_hangs" in main[0], overran["threads"]


@pytest.mark.timeout(60)
def test_uninstall_gives_the_previous_handler_back() -> None:
    proc = _child(bound_s=30.0, mode="uninstall")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "uninstalled"
    proc.send_signal(signal.SIGTERM)
    rc, lines = _finish(proc, timeout=10.0)
    assert rc == 3 and {"text": "previous handler"} in lines, lines
    assert not _events(lines, "stopping"), lines
