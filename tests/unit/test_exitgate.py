"""The capture exit gate: a shutdown closes it, a new agent opens it, interpreter exit is final."""

from __future__ import annotations

import threading

import pytest

from agent.capture.exitgate import CaptureClosedError, _ExitGate


def test_a_closed_gate_refuses_calls_until_opened_again():
    gate = _ExitGate()
    assert gate.call(lambda x: x + 1, 1) == 2
    assert gate.close(0.1)
    with pytest.raises(CaptureClosedError):
        gate.call(lambda: None)
    assert gate.open()
    assert gate.call(lambda: "again") == "again"


def test_the_close_at_interpreter_exit_is_final():
    gate = _ExitGate()
    assert gate.close(0.1, final=True)
    assert not gate.open()
    with pytest.raises(CaptureClosedError):
        gate.call(lambda: None)


def test_close_waits_for_the_call_in_flight_and_says_when_it_could_not():
    gate = _ExitGate()
    inside, leave = threading.Event(), threading.Event()

    def slow() -> None:
        inside.set()
        leave.wait(5)

    t = threading.Thread(target=gate.call, args=(slow,))
    t.start()
    assert inside.wait(5)
    assert not gate.close(0.05)  # still in flight
    leave.set()
    t.join(5)
    assert gate.close(0.5)
