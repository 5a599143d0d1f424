"""MqttLink against a real mosquitto: status/LWT, retained state, commands, replies."""

from __future__ import annotations

import json
import socket
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from structlog.testing import capture_logs

from agent.mqtt.client import _PUMP_GAP_S, Inbound, MqttLink
from agent.mqtt.spool import Spool
from agent.mqtt.store import MemoryQueue
from agent.mqtt.topics import Topics
from agent.settings import MqttSettings
from tests.brokers import Broker, wait_until

TOPICS = Topics("vision", "dev-1", ("yard",))


@pytest.fixture
def make_link(tmp_path):
    links: list[MqttLink] = []

    def make(
        broker: Broker, *, protocol=5, memory=False, store=None, write_behind=False, **over
    ) -> MqttLink:
        settings = MqttSettings(
            host=broker.host,
            port=broker.port,
            protocol=protocol,
            keepalive_s=5,
            reconnect_min_s=0.1,
            reconnect_max_s=0.5,
            **over,
        )
        if store is None and memory:
            store = MemoryQueue(1 << 20, 3600)
        elif store is None:
            store = Spool(tmp_path / f"spool-{len(links)}.db", 1 << 20, 3600)
        link = MqttLink(
            settings,
            TOPICS,
            store,
            threading.Event(),
            boot_id="boot-1",
            owns_store=True,
            write_behind=write_behind,
        )
        links.append(link)
        link.start()
        return link

    yield make
    for link in links:
        link.close(timeout=2.0)


def mqtt_client(broker: Broker, protocol=mqtt.MQTTv5) -> mqtt.Client:
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=protocol)
    c.connect(broker.host, broker.port)
    c.loop_start()
    return c


def first_message(broker: Broker, recorder, topic: str):
    """The first message a subscriber arriving now gets on ``topic``."""
    rec = recorder(broker, [topic])
    assert rec.wait_for(lambda r: r.on(topic), 5), f"no message on {topic}"
    return rec.on(topic)[0]


def retained(broker: Broker, recorder, topic: str):
    """What a subscriber arriving now gets as the retained value of ``topic``."""
    msg = first_message(broker, recorder, topic)
    assert msg.retain
    return msg


def eventually_retained(broker: Broker, recorder, topic: str, payload: bytes) -> None:
    """A late subscriber gets ``payload`` as the retained value (after our republish).

    A subscriber that arrives before the republish reaches a restarted broker (no retained
    value yet) gets it live, not retained: that is "not yet", and a later one is asked."""
    seen: list[tuple[bytes, bool]] = []

    def check() -> bool:
        msg = first_message(broker, recorder, topic)
        seen.append((msg.payload, msg.retain))
        return msg.retain and msg.payload == payload

    assert wait_until(check, 5, 0.1), f"retained values seen: {seen[-3:]}"


def test_online_retained_then_stopped_on_close(broker, recorder, make_link):
    """status is "online" (retained) while connected and "stopped" after a clean close."""
    link = make_link(broker)
    assert link.wait_connected(5)
    msg = retained(broker, recorder, TOPICS.status).json()
    assert msg["state"] == "online" and msg["boot_id"] == "boot-1"
    assert msg["ts"].endswith("Z")
    link.close(timeout=3)
    assert retained(broker, recorder, TOPICS.status).json()["state"] == "stopped"


def test_state_republished_after_broker_lost_retained_store(mosquitto, recorder, make_link):
    """A broker restarted without its retained store gets every state topic again."""
    broker = mosquitto(persistence=False)
    link = make_link(broker)
    assert link.wait_connected(5)
    label = TOPICS.camera_label("front", "person")
    link.publish_state(label, b"2")
    link.publish_state(TOPICS.health, b'{"h":1}', expiry_s=30)
    eventually_retained(broker, recorder, label, b"2")  # the publish may trail a subscriber
    broker.restart()
    assert wait_until(lambda: link.stats().connects == 2, 10)
    eventually_retained(broker, recorder, label, b"2")
    assert retained(broker, recorder, TOPICS.status).json()["state"] == "online"
    health = retained(broker, recorder, TOPICS.health)
    assert 0 < health.properties.MessageExpiryInterval <= 30


def test_state_set_while_down_is_sent_on_connect(broker, recorder, make_link):
    """State changed during an outage reaches the broker as its newest value, once back."""
    link = make_link(broker)
    assert link.wait_connected(5)
    topic = TOPICS.camera_status("front")
    link.publish_state(topic, b"streaming")
    broker.kill()
    assert wait_until(lambda: not link.connected, 5)
    link.publish_state(topic, b"reconnecting")
    link.publish_state(topic, b"offline")
    broker.start()
    assert link.wait_connected(10)
    assert wait_until(lambda: link.stats().connects == 2, 5)
    eventually_retained(broker, recorder, topic, b"offline")


def test_commands_resubscribed_after_reconnect(broker, recorder, make_link):
    """Command subscriptions are made again on reconnect; MQTT 5 reply data is passed on."""
    link = make_link(broker)
    got: list[Inbound] = []
    for f in TOPICS.cmd_subscriptions():
        link.subscribe(f, got.append)
    assert link.wait_connected(5)
    broker.restart()
    assert wait_until(lambda: link.stats().connects == 2, 10)
    time.sleep(0.3)  # the SUBSCRIBE goes out right after CONNACK
    c = mqtt_client(broker)
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = "ops/replies/1"
    props.CorrelationData = b"corr-1"
    c.publish(TOPICS.cmd("pause"), b'{"id":"a"}', qos=1, properties=props).wait_for_publish(5)
    c.publish(TOPICS.fleet_cmd("yard", "resume"), b'{"id":"b"}', qos=1).wait_for_publish(5)
    c.publish(TOPICS.cmd("old"), b'{"id":"c"}', qos=1, retain=True).wait_for_publish(5)
    assert wait_until(lambda: len(got) == 3, 5), got
    by_name = {TOPICS.parse_cmd(m.topic): m for m in got}
    assert by_name["pause"].response_topic == "ops/replies/1"
    assert by_name["pause"].correlation_data == b"corr-1"
    assert not by_name["pause"].retain
    assert by_name["resume"].payload == b'{"id":"b"}'
    c.disconnect()
    # A new subscription delivers the retained command flagged as retained.
    late: list[Inbound] = []
    link.subscribe(TOPICS.cmd("old"), late.append)
    assert wait_until(lambda: len(late) == 1, 5)
    assert late[0].retain


def test_handler_error_does_not_break_link(broker, make_link):
    """A handler that raises is logged; later messages are still delivered."""
    link = make_link(broker)
    got: list[bytes] = []

    def handler(msg: Inbound) -> None:
        got.append(msg.payload)
        if msg.payload == b"boom":
            raise RuntimeError("handler bug")

    link.subscribe(TOPICS.cmd("x"), handler)
    assert link.wait_connected(5)
    time.sleep(0.2)
    c = mqtt_client(broker)
    with capture_logs() as logs:
        c.publish(TOPICS.cmd("x"), b"boom", qos=1).wait_for_publish(5)
        c.publish(TOPICS.cmd("x"), b"fine", qos=1).wait_for_publish(5)
        assert wait_until(lambda: got == [b"boom", b"fine"], 5)
    assert any(e["event"] == "mqtt_handler_failed" for e in logs)
    assert link.connected
    c.disconnect()


def test_reply_on_reply_topic_and_response_topic(broker, recorder, make_link):
    """Replies go to <p>/<d>/reply/<name> and to the MQTT 5 ResponseTopic with its data."""
    rec = recorder(broker, ["vision/dev-1/reply/#", "ops/#"])
    link = make_link(broker)
    assert link.wait_connected(5)
    link.publish_reply("pause", b'{"id":"a","ok":true}', "ops/r/1", b"\x00corr")
    link.publish_reply("pause", b'{"id":"b"}', "bad/#/topic", b"x")  # logged, not raised
    assert rec.wait_for(lambda r: len(r.on("ops/r/1")) == 1, 5)
    assert rec.on("ops/r/1")[0].properties.CorrelationData == b"\x00corr"
    assert rec.wait_for(lambda r: len(r.on(TOPICS.reply("pause"))) == 2, 5)


def test_tcp_nodelay_is_set(broker, make_link):
    """The broker socket has TCP_NODELAY (no ~40 ms Nagle stalls)."""
    link = make_link(broker)
    assert link.wait_connected(5)
    sock = link._client.socket()
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


def test_network_alive_while_broker_down(mosquitto, make_link):
    """The watchdog input stays true while reconnecting, false once closed."""
    broker = mosquitto(start=False)
    link = make_link(broker)
    time.sleep(0.5)
    assert link.network_alive() and not link.connected
    link.close(timeout=2)
    assert not link.network_alive()


def test_unreachable_broker_logged_once_then_recovers(mosquitto, make_link):
    """start() does not block on a dead broker; one log line down, one when it is back."""
    broker = mosquitto(start=False)
    with capture_logs() as logs:
        t0 = time.monotonic()
        link = make_link(broker)
        assert time.monotonic() - t0 < 0.5
        assert link.publish_spooled(TOPICS.camera_detections("front"), b'{"seq":0}')
        time.sleep(2.0)  # several reconnect attempts at 0.1..0.5 s
        assert not link.connected
        broker.start()
        assert link.wait_connected(5)
        assert link.flush(5)
    events = [e["event"] for e in logs]
    assert events.count("mqtt_unreachable") == 1
    assert events.count("mqtt_reconnected") == 1
    assert link.stats().published == 1  # spooled while down, acknowledged once up


def test_oversize_refused_locally(broker, recorder, make_link):
    """Payloads over max_payload_bytes are refused before paho, counted, logged once."""
    topic = TOPICS.camera_detections("front")
    rec = recorder(broker, [topic])
    link = make_link(broker, max_payload_bytes=2048)
    assert link.wait_connected(5)
    with capture_logs() as logs:
        assert not link.publish_spooled(topic, b"x" * 3000)
        assert not link.publish_spooled(topic, b"x" * 3000)
        link.publish_state(TOPICS.health, b"y" * 3000)
        assert link.publish_spooled(topic, b"small")
    assert rec.wait_for(lambda r: len(r.on(topic)) == 1, 5)
    stats = link.stats()
    assert stats.rejected_oversize == 3
    assert stats.health().rejected_oversize == 3
    assert [e["event"] for e in logs].count("mqtt_oversize_refused") == 2  # per topic


@pytest.mark.parametrize(("protocol", "memory"), [(311, False), (5, True)])
def test_delivers_in_order(broker, recorder, make_link, protocol, memory):
    """MQTT 3.1.1 and the memory queue deliver spooled messages in order and drain."""
    topic = TOPICS.camera_detections("front")
    rec = recorder(broker, [topic])
    link = make_link(broker, protocol=protocol, memory=memory)
    for i in range(300):
        link.publish_spooled(topic, json.dumps({"seq": i}).encode())
    assert link.flush(10)
    assert rec.wait_for(lambda r: len(r.on(topic)) >= 300, 10)
    assert rec.seqs(topic) == list(range(300))
    stats = link.stats()
    assert stats.published == 300 and stats.spool_depth == 0 and stats.spool_bytes == 0
    link.publish_reply("x", b"{}", "ops/r", b"c")  # 3.1.1 has no ResponseTopic: ignored


class GatedSpool(Spool):
    """A spool on a disk whose writes hang until ``gate`` is set (10 s at most)."""

    def __init__(self, path, gate: threading.Event) -> None:
        super().__init__(path, 1 << 20, 3600)
        self.gate = gate

    def append(self, topic, payload, qos, retain=False):
        self.gate.wait(10)
        return super().append(topic, payload, qos, retain)


def test_a_slow_disk_holds_up_no_publisher(broker, recorder, make_link, tmp_path):
    """Write-behind (the daemon's spool): a store whose writes hang (an SD card's sync, an
    ext4 journal commit: 0.2-1.4 s seen) does not hold up ``publish_spooled`` (an inference
    worker); what waits is counted in ``spool_depth`` and goes out in order once the disk
    takes it; ``close`` writes what is left before the store closes."""
    topic = TOPICS.camera_detections("front")
    rec = recorder(broker, [topic])
    gate = threading.Event()
    link = make_link(broker, store=GatedSpool(tmp_path / "slow.db", gate), write_behind=True)
    done = threading.Event()

    def publish(first: int, n: int) -> None:
        for i in range(first, first + n):
            assert link.publish_spooled(topic, json.dumps({"seq": i}).encode())
        done.set()

    threading.Thread(target=publish, args=(0, 50), daemon=True).start()
    try:
        assert done.wait(5), "a publisher waited for the disk"
        # Counted whether waiting in the queue or in the writer's hands (taken, not stored).
        assert link.stats().spool_depth == 50
        assert not link.flush(0.3), "flush returned with messages not yet in the store"
        assert rec.on(topic) == []
    finally:
        gate.set()  # a failed check must not leave the writer hung into later tests
    assert link.flush(10)
    assert rec.wait_for(lambda r: len(r.on(topic)) >= 50, 10)
    publish(50, 30)
    link.close(timeout=5.0)
    store = Spool(tmp_path / "slow.db", 1 << 20, 3600)
    left = {json.loads(r.payload)["seq"] for r in store.take(100)}
    store.close()
    # Each is delivered or still spooled: one the broker acked on close may reach the
    # subscriber a moment later.
    assert rec.wait_for(lambda r: set(r.seqs(topic)) | left >= set(range(80)), 10)
    assert sorted(set(rec.seqs(topic)) | left) == list(range(80))
    assert rec.seqs(topic)[:50] == list(range(50))


def test_a_hung_disk_holds_at_most_the_bound_in_memory(broker, make_link, tmp_path, monkeypatch):
    """What waits for a hung disk, queued or in the writer's hands, stays within
    ``WRITE_BEHIND_MAX_BYTES``; past it the publisher waits (and goes on once the disk
    does): memory stays bounded however long the disk hangs."""
    from agent.mqtt import client

    monkeypatch.setattr(client, "WRITE_BEHIND_MAX_BYTES", 1000)
    topic = TOPICS.camera_detections("front")
    gate = threading.Event()
    link = make_link(broker, store=GatedSpool(tmp_path / "hung.db", gate), write_behind=True)
    offered = []

    def publish() -> None:
        for i in range(40):
            assert link.publish_spooled(topic, b"x" * 100)
            offered.append(i)

    t = threading.Thread(target=publish, daemon=True)
    try:
        t.start()
        time.sleep(1.0)
        # 1000 bytes of 100-byte messages: 10 waiting, the 11th offered over the bound.
        assert 10 <= len(offered) <= 11, len(offered)
        assert link.stats().spool_depth == len(offered)
    finally:
        gate.set()
    t.join(10)
    assert len(offered) == 40
    assert link.flush(10)


def test_busy_stream_is_sent_in_few_pumps(broker, recorder, make_link):
    """A message every 5 ms: the sender pumps at most every ``_PUMP_GAP_S`` (each pump takes
    every row stored and every PUBACK since the last), not once per message and once per
    PUBACK; every message arrives, in order, and the spool drains."""
    topic = TOPICS.camera_detections("front")
    rec = recorder(broker, [topic])
    link = make_link(broker)
    assert link.wait_connected(5)
    pumps: list[float] = []
    pump = link.sender.pump

    def counted(connected: bool) -> None:
        pumps.append(time.monotonic())
        pump(connected)

    link.sender.pump = counted  # type: ignore[method-assign]
    n, t0 = 200, time.monotonic()
    for i in range(n):
        link.publish_spooled(topic, json.dumps({"seq": i}).encode())
        time.sleep(0.005)
    elapsed = time.monotonic() - t0
    busy = sum(t0 <= t <= t0 + elapsed for t in pumps)
    assert link.flush(10)
    assert rec.wait_for(lambda r: len(r.on(topic)) >= n, 10)
    assert rec.seqs(topic) == list(range(n))
    assert link.stats().spool_depth == 0
    # (Before: 401 pumps in about 1 s, one per message and one per PUBACK.) A bound by the
    # elapsed time, not by the count: on a slow machine the messages come further apart.
    assert busy <= elapsed / _PUMP_GAP_S + 5, (busy, elapsed)
