"""SpoolSender: window, PUBACK handling and reconnect order, with paho's send recorded.

The broker side is a recorded publish function (real ``MQTTMessageInfo`` objects); the
integration tests run the same code against mosquitto.
"""

from __future__ import annotations

import threading

import paho.mqtt.client as mqtt
import pytest

from agent.mqtt.client import MqttLink
from agent.mqtt.sender import SpoolSender
from agent.mqtt.store import MemoryQueue
from agent.mqtt.topics import Topics
from agent.settings import MqttSettings

TOPIC = "v/d/c/detections"


class Paho:
    """Records publishes; ``rc`` is what paho's publish() reports."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []
        self.rc = mqtt.MQTT_ERR_SUCCESS
        self.raise_value_error = False
        self._mid = 0

    def __call__(self, topic: str, payload: bytes, qos: int, retain: bool):
        if self.raise_value_error:
            raise ValueError("Publish topic cannot contain wildcards.")
        self._mid += 1
        info = mqtt.MQTTMessageInfo(self._mid)
        info.rc = self.rc
        self.sent.append((self._mid, payload))
        return info


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def setup():
    store = MemoryQueue(1 << 20, 3600)
    paho = Paho()
    clock = Clock()
    sender = SpoolSender(store, paho, window=4, max_payload_bytes=1000, monotonic=clock)
    return store, paho, sender, clock


def fill(store, n, qos=1):
    for i in range(n):
        store.append(TOPIC, b"%d" % i, qos)


def test_window_bounds_unacked_sends(setup):
    """At most `window` rows are unacknowledged; each PUBACK lets one more go."""
    store, paho, sender, _ = setup
    fill(store, 10)
    sender.pump(connected=True)
    assert [p for _, p in paho.sent] == [b"0", b"1", b"2", b"3"]
    sender.on_ack(1, 0)
    sender.on_ack(2, 0x10)  # "no matching subscribers" is a success
    sender.pump(connected=True)
    assert [p for _, p in paho.sent][4:] == [b"4", b"5"]
    assert store.depth == 8 and sender.published == 2


def test_nothing_sent_while_disconnected_but_acks_applied(setup):
    """Disconnected: no paho publish at all; late PUBACKs still delete their rows."""
    store, paho, sender, _ = setup
    fill(store, 3)
    sender.pump(connected=True)
    fill(store, 3)
    sender.on_ack(1, 0)
    sender.pump(connected=False)
    assert len(paho.sent) == 3 and store.depth == 5


def test_no_conn_counts_as_in_flight(setup):
    """A QoS 1 publish answered NO_CONN is queued by paho: it is not sent again."""
    store, paho, sender, _ = setup
    fill(store, 2)
    paho.rc = mqtt.MQTT_ERR_NO_CONN
    sender.pump(connected=True)
    paho.rc = mqtt.MQTT_ERR_SUCCESS
    sender.pump(connected=True)
    assert [p for _, p in paho.sent] == [b"0", b"1"]
    assert sender.stats().inflight == 2


@pytest.mark.parametrize("reason", [0x80, 0x87, 0x90, 0x99])
def test_broker_refusal_drops_row(setup, reason):
    """A PUBACK failure code (not quota) deletes the row and counts it."""
    store, _, sender, _ = setup
    fill(store, 1)
    sender.pump(connected=True)
    sender.on_ack(1, reason)
    sender.pump(connected=True)
    assert store.depth == 0 and sender.rejected_by_broker == 1 and sender.published == 0


def test_quota_exceeded_is_retried(setup):
    """PUBACK 0x97 (quota exceeded) keeps the row and sends it again after a pause."""
    store, paho, sender, clock = setup
    fill(store, 1)
    sender.pump(connected=True)
    sender.on_ack(1, 0x97)
    sender.pump(connected=True)
    assert len(paho.sent) == 1
    clock.t += 1.5
    sender.pump(connected=True)
    assert [p for _, p in paho.sent] == [b"0", b"0"]
    sender.on_ack(2, 0)
    sender.pump(connected=True)
    assert store.depth == 0 and sender.published == 1


def test_reconnect_waits_for_paho_resends(setup):
    """After a reconnect new rows wait until paho's resent rows are acked (order kept)."""
    store, paho, sender, _ = setup
    fill(store, 6)
    sender.pump(connected=True)  # rows 0..3 in flight, then the link drops
    sender.on_ack(1, 0)
    sender.notify_connected()
    sender.pump(connected=True)
    assert len(paho.sent) == 4, "nothing new before paho's resends are acknowledged"
    for mid in (2, 3, 4):
        sender.on_ack(mid, 0)
    sender.pump(connected=True)
    assert [p for _, p in paho.sent][4:] == [b"4", b"5"]


def test_reconnect_resends_rows_paho_lost(setup):
    """Rows paho never acknowledges after a reconnect are sent again from the store."""
    store, paho, sender, clock = setup
    fill(store, 2)
    sender.pump(connected=True)
    sender.notify_connected()
    sender.pump(connected=True)
    clock.t += 11
    sender.pump(connected=True)
    assert [p for _, p in paho.sent] == [b"0", b"1", b"0", b"1"]
    sender.on_ack(3, 0)
    sender.on_ack(4, 0)
    sender.on_ack(1, 0)  # a late PUBACK of the first copy deletes nothing more
    sender.pump(connected=True)
    assert store.depth == 0 and sender.published == 2


def test_oversize_and_invalid_rows_are_dropped(setup):
    """Rows paho can never deliver are removed and counted; the rest keep flowing."""
    store, paho, sender, _ = setup
    store.append(TOPIC, b"x" * 2000, 1)
    store.append(TOPIC, b"ok", 1)
    sender.pump(connected=True)
    assert [p for _, p in paho.sent] == [b"ok"] and sender.rejected_oversize == 1
    paho.raise_value_error = True
    store.append("bad/#", b"y", 1)
    sender.pump(connected=True)
    assert sender.rejected_by_broker == 1 and store.depth == 1


def test_qos0_rows_leave_on_send(setup):
    """QoS 0 rows have no PUBACK: they leave the store once paho took them."""
    store, paho, sender, _ = setup
    fill(store, 3, qos=0)
    sender.pump(connected=True)
    assert store.depth == 0 and sender.published == 3
    fill(store, 1, qos=0)
    paho.rc = mqtt.MQTT_ERR_NO_CONN  # paho drops QoS 0 without a connection: keep it
    sender.pump(connected=True)
    assert store.depth == 1


def test_expiry_runs_from_pump():
    """Old pending rows are expired by the sender about once a second."""
    clock = Clock()
    store = MemoryQueue(1 << 20, 10, clock=clock)
    sender = SpoolSender(store, Paho(), 4, 1000, monotonic=clock)
    fill(store, 3)
    clock.t += 20
    sender.pump(connected=False)
    assert store.depth == 0 and store.dropped_expired == 3


def test_link_sees_a_spool_that_stores_nothing():
    """Messages offered for a while but none stored: a spool stall; a stored one ends it."""
    t = [0.0]
    store = MemoryQueue(1 << 20, 3600)
    link = MqttLink(
        MqttSettings(host="127.0.0.1", port=1),
        Topics("vision", "dev1"),
        store,
        threading.Event(),
        boot_id="b",
        monotonic=lambda: t[0],
    )
    link.sender.pump(False)  # the sender is alive; no broker, so nothing is owed
    assert link.publish_spooled("vision/dev1/front/detections", b"{}")
    store.max_bytes = 1  # from now on every message is refused (and counted)
    for _ in range(30):
        t[0] += 1.0
        link.sender.pump(False)
        assert not link.publish_spooled("vision/dev1/front/detections", b"{}")
    reason = link.stall_reason(20.0)
    assert reason is not None and reason.startswith("spool_stalled: nothing stored for 30 s")
    store.max_bytes = 1 << 20
    assert link.publish_spooled("vision/dev1/front/detections", b"{}")
    assert link.stall_reason(20.0) is None
