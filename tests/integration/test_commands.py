"""Commands and heartbeats against a running agent through a real broker."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from agent.messages import CommandReply, DetectionMessage, Heartbeat
from tests.agent_proc import AgentProc
from tests.brokers import Broker, Recorder, wait_until


class Operator:
    """An MQTT 5 client that sends commands with ResponseTopic/CorrelationData."""

    def __init__(self, broker: Broker, base: str) -> None:
        self.base = base
        self.inbox = f"operator/{uuid.uuid4().hex[:8]}/inbox"
        self.replies: dict[bytes, dict[str, Any]] = {}
        self.plain: list[dict[str, Any]] = []
        self.raw: list[mqtt.MQTTMessage] = []
        self.ready = threading.Event()
        self.client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5
        )
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *a: self.ready.set()
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert self.ready.wait(10)

    def _on_connect(self, client, userdata, flags, rc, props) -> None:
        client.subscribe([(self.inbox, 1), (f"{self.base}/reply/#", 1)])

    def _on_message(self, client, userdata, msg) -> None:
        self.raw.append(msg)
        if msg.topic == self.inbox:
            corr = getattr(msg.properties, "CorrelationData", b"")
            self.replies[corr] = json.loads(msg.payload)
        elif "/reply/" in msg.topic:
            self.plain.append(json.loads(msg.payload))

    def send(self, name: str, payload: bytes | dict[str, Any], retain: bool = False) -> bytes:
        corr = uuid.uuid4().bytes
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = self.inbox
        props.CorrelationData = corr
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.client.publish(f"{self.base}/cmd/{name}", body, qos=1, retain=retain, properties=props)
        return corr

    def call(self, name: str, payload: bytes | dict[str, Any], timeout: float = 15) -> dict:
        corr = self.send(name, payload)
        assert wait_until(lambda: corr in self.replies, timeout), f"no reply to {name}"
        reply = self.replies[corr]
        CommandReply.model_validate(reply)
        return reply

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def running(broker, recorder, tmp_path):
    rec = recorder(broker, ["vision/dev1/#"])
    agent = AgentProc(broker, tmp_path).start()
    op = Operator(broker, agent.topic_base)
    det_topic = f"{agent.topic_base}/front/detections"
    assert rec.wait_for(lambda r: len(r.on(det_topic)) >= 5, 60), agent.tail()
    yield agent, op, rec
    op.close()
    agent.close()


def _det_count(rec, agent) -> int:
    return len(rec.on(f"{agent.topic_base}/front/detections"))


@pytest.mark.timeout(120)
def test_pause_resume_config_snapshot(running):
    """pause stops detections, resume restarts them, config/set applies, snapshot is a JPEG."""
    agent, op, rec = running
    base = agent.topic_base
    reply = op.call("pause", {"id": "p1"})
    assert reply["ok"] is True
    assert reply["id"] == "p1"
    n = rec.stopped(lambda r: _det_count(r, agent))
    assert n is not None, "not paused: detections kept arriving"
    assert op.call("resume", {"id": "r1"})["ok"] is True
    assert rec.wait_for(lambda r: _det_count(r, agent) >= n + 5, 20)

    reply = op.call(
        "config/set",
        {
            "id": "c1",
            "patch": {"detector": {"conf_threshold": 0.9}, "cameras": {"front": {"fps": 2}}},
        },
    )
    assert reply["ok"] is True, reply
    assert reply["result"]["detector"]["conf_threshold"] == 0.9
    time.sleep(1.0)
    start = _det_count(rec, agent)
    t0 = time.monotonic()
    time.sleep(3.0)
    rate = (_det_count(rec, agent) - start) / (time.monotonic() - t0)
    assert rate < 3.5, f"fps cap of 2 not applied: {rate:.1f}/s"
    recent = [
        DetectionMessage.model_validate_json(m.payload)
        for m in rec.on(f"{base}/front/detections")[-4:]
    ]
    assert all(d.score >= 0.9 for m in recent for d in m.detections)

    bad = op.call("config/set", {"id": "c2", "patch": {"detector": {"conf_threshold": 7}}})
    assert bad["ok"] is False
    assert bad["error"]["code"] == "bad_patch"
    assert "conf_threshold" in bad["error"]["message"]
    bad2 = op.call("config/set", {"id": "c3", "patch": {"mqtt": {"port": 1}}})
    assert bad2["error"]["code"] == "bad_patch"
    # The same settings given flat, without a "patch" object.
    flat = op.call("config/set", {"id": "c4", "conf_threshold": 0.85, "fps": 2})
    assert flat["ok"] is True, flat
    assert flat["result"]["detector"]["conf_threshold"] == 0.85
    assert flat["result"]["cameras"] == {"front": {"fps": 2}}

    snap = op.call("snapshot", {"id": "s1", "camera": "front"})
    assert snap["ok"] is True, snap
    assert rec.wait_for(lambda r: bool(r.on(f"{base}/front/snapshot")), 10)
    jpeg = rec.on(f"{base}/front/snapshot")[-1].payload
    assert jpeg[:3] == b"\xff\xd8\xff"
    assert op.call("snapshot", {"id": "s2", "camera": "nope"})["error"]["code"] == "unknown_camera"


@pytest.mark.timeout(120)
def test_duplicate_retained_and_bad_commands(running):
    """Repeated ids are answered not re-run; retained commands ignored; bad ones rejected."""
    agent, op, rec = running
    first = op.call("pause", {"id": "same"})
    op.call("resume", {"id": "go"})
    again = op.call("pause", {"id": "same"})
    assert again == first
    time.sleep(1.0)
    n = _det_count(rec, agent)
    assert rec.wait_for(lambda r: _det_count(r, agent) > n + 3, 10), "repeat must not re-pause"

    op.send("pause", {"id": "retained-1"}, retain=True)
    time.sleep(1.5)
    assert not any(r.get("id") == "retained-1" for r in op.plain)
    n = _det_count(rec, agent)
    assert rec.wait_for(lambda r: _det_count(r, agent) > n + 3, 10), "retained pause ignored"
    op.client.publish(f"{agent.topic_base}/cmd/pause", b"", qos=1, retain=True)  # clear it

    for payload, code in [
        (b"\xff\x00garbage", "bad_json"),
        (b'{"no":"id"}', "bad_request"),
        (b"[]", "bad_request"),
        (b'{"id":"x","a":' + b"[" * 200 + b"]" * 200 + b"}", "bad_request"),
    ]:
        reply = op.call("pause", payload)
        assert reply["ok"] is False
        assert reply["error"]["code"] == code
    assert op.call("launch/missiles", {"id": "u"})["error"]["code"] == "unknown_command"
    big = op.call("pause", {"id": "big", "pad": "x" * 100_000})
    assert big["error"]["code"] == "too_large"


@pytest.mark.timeout(180)
def test_fuzzed_commands_never_stop_detection(running):
    """Random payloads on every command topic get error replies; detection never stops."""
    agent, op, rec = running
    sent: list[bytes] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        name=st.sampled_from(["pause", "resume", "config/set", "snapshot", "model/deploy", "x/y"]),
        payload=st.one_of(
            st.binary(max_size=300),
            st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass")),
            st.recursive(
                st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                lambda inner: (
                    st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4)
                ),
                max_leaves=30,
            ).map(lambda v: json.dumps(v).encode()),
        ),
    )
    def fire(name: str, payload: bytes) -> None:
        if name in ("pause",):  # a valid pause would legitimately stop detections
            payload = payload.replace(b'"id"', b'"xid"')
        sent.append(op.send(name, payload))

    fire()
    op.call("resume", {"id": "after-fuzz"})
    n = _det_count(rec, agent)
    assert rec.wait_for(lambda r: _det_count(r, agent) > n + 5, 20), agent.tail()
    assert agent.proc is not None and agent.proc.poll() is None


@pytest.mark.timeout(120)
def test_heartbeat_figures(broker, recorder, tmp_path):
    """Heartbeats validate; fps of the 10 FPS file is about 10; spool depth moves in an outage."""
    rec = recorder(broker, ["vision/dev1/health"])
    # The whole frame every frame: one inference per frame, as the figures below assume.
    agent = AgentProc(broker, tmp_path, overrides={"detector": {"regions": "full"}}).start()
    try:
        topic = f"{agent.topic_base}/health"
        assert rec.wait_for(lambda r: len(r.on(topic)) >= 8, 40), agent.tail()
        hb = Heartbeat.model_validate_json(rec.on(topic)[-1].payload)
        cam = hb.cameras["front"]
        assert cam.state == "streaming"
        assert 8.5 <= cam.fps_in <= 11.0
        assert 8.5 <= cam.fps_processed <= 11.0
        assert hb.inference.latency_ms.p50 is not None
        assert hb.mqtt.connected is True
        assert hb.system.rss_mb > 50
        expiry = getattr(rec.on(topic)[-1].properties, "MessageExpiryInterval", None)
        assert expiry is not None and expiry <= 3 * 1.0 + 1
        broker.stop()
        time.sleep(4)
        broker.start()
        assert rec.wait_for(
            lambda r: any(
                Heartbeat.model_validate_json(m.payload).mqtt.spool_depth > 5 for m in r.on(topic)
            ),
            20,
        ), "heartbeat sent on reconnect shows the spool that filled during the outage"
        assert rec.wait_for(
            lambda r: Heartbeat.model_validate_json(r.on(topic)[-1].payload).mqtt.spool_depth < 5,
            20,
        )
    finally:
        agent.stop()


@pytest.mark.timeout(90)
def test_home_assistant_discovery(broker, recorder, tmp_path):
    """With discovery on, retained configs appear whose state topics the agent publishes."""
    agent = AgentProc(broker, tmp_path, overrides={"homeassistant": {"enabled": True}}).start()
    try:
        rec = recorder(broker, ["vision/dev1/#", "homeassistant/#"])
        assert rec.wait_for(lambda r: bool(r.on("vision/dev1/front/person")), 60), agent.tail()

        # The configs go out in one burst on connect: a subscriber that comes in the middle
        # of it gets the rest live (not retained). Come in after it.
        def configs_seen(r: Recorder) -> int:
            return sum(m.topic.startswith("homeassistant/") for m in r.messages)

        assert rec.wait_quiet(1.0, 20, configs_seen, least=4), configs_seen(rec)
        late = recorder(broker, ["homeassistant/#"])
        assert late.wait_for(lambda r: len(r.messages) >= 4, 20), len(late.messages)
        configs = {m.topic: m.json() for m in late.messages if m.payload}
        live = [(m.topic, len(m.payload)) for m in late.messages if not m.retain]
        assert not live, (live, agent.tail())  # every config retained, none still in flight
        assert all(t.endswith("/config") for t in configs), sorted(configs)
        state_topics = {c.get("state_topic") for c in configs.values()}
        assert "vision/dev1/front/person" in state_topics
        assert any(c.get("availability") or c.get("availability_topic") for c in configs.values())
        assert len({c["unique_id"] for c in configs.values()}) == len(configs)
    finally:
        agent.stop()
