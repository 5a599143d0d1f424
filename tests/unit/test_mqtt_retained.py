"""RetainedStates: last values, republish on connect, expiry, stale resends healed."""

from __future__ import annotations

import paho.mqtt.client as mqtt
import pytest

from agent.mqtt.retained import RetainedStates


class Paho:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str, bytes, int | None]] = []

    def __call__(self, topic, payload, qos, retain, props):
        assert retain
        mid = len(self.sent) + 1
        expiry = getattr(props, "MessageExpiryInterval", None) if props else None
        self.sent.append((mid, topic, payload, expiry))
        return mqtt.MQTTMessageInfo(mid)


class Clock:
    t = 50.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def states():
    paho, clock = Paho(), Clock()
    return RetainedStates(paho, mqtt5=True, monotonic=clock), paho, clock


def test_remembered_while_down_sent_on_connect(states):
    """Values set while disconnected are only remembered, then sent (newest) on connect."""
    st, paho, _ = states
    st.set("a", b"1", 1, None)
    st.set("a", b"2", 1, None)
    st.set("b", b"x", 1, None)
    assert paho.sent == []
    st.connected()
    assert [(t, p) for _, t, p, _ in paho.sent] == [("a", b"2"), ("b", b"x")]
    st.set("a", b"3", 1, None)
    assert paho.sent[-1][1:3] == ("a", b"3")
    st.disconnected()
    st.connected()
    assert [(t, p) for _, t, p, _ in paho.sent[-2:]] == [("a", b"3"), ("b", b"x")]


def test_expiry_counts_down_and_ends(states):
    """The MQTT 5 expiry shrinks with the value's age; an expired value is not republished."""
    st, paho, clock = states
    st.set("health", b"h", 1, 30.0)
    clock.t += 12.5
    st.connected()
    assert paho.sent[-1][3] == 18
    st.disconnected()
    clock.t += 20
    st.connected()
    assert len(paho.sent) == 1


def test_stale_resend_from_older_link_is_overwritten(states):
    """A publish paho resends after the reconnect (older value) is followed by the current."""
    st, paho, _ = states
    st.connected()
    st.set("cam", b"streaming", 1, None)  # mid 1, never acked: the link dropped
    st.disconnected()
    st.set("cam", b"offline", 1, None)
    st.connected()  # mid 2: "offline"; then paho resends mid 1 "streaming"
    st.on_ack(2)
    assert len(paho.sent) == 2
    st.on_ack(1)
    assert paho.sent[-1][1:3] == ("cam", b"offline")
    st.on_ack(3)
    st.on_ack(99)  # not ours: ignored
    assert len(paho.sent) == 3


def test_clear_forgets_and_deletes(states):
    """clear() publishes an empty retained message and stops republishing the topic."""
    st, paho, _ = states
    st.connected()
    st.set("x", b"1", 1, None)
    st.clear("x")
    assert paho.sent[-1][1:3] == ("x", b"")
    st.disconnected()
    st.connected()
    assert len(paho.sent) == 2
