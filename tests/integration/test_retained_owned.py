"""Retained state is owned, not remembered: set at start, cleared when no longer produced."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.agent_proc import AgentProc
from tests.brokers import Broker, wait_until

STALE = {
    # A count and motion an earlier run left behind.
    "vision/dev1/front/person": b"3",
    "vision/dev1/front/motion": b"ON",
    # A camera, a zone and a Home Assistant entity that the configuration no longer has.
    "vision/dev1/gone/status": b'{"state":"streaming","reason":null,"ts":"x"}',
    "vision/dev1/gone/person": b"2",
    "vision/dev1/front/zones/oldzone/person": b"1",
    "homeassistant/sensor/dev1/gone_person/config": b'{"name":"gone"}',
}
OTHERS = {
    # Another device's retained state is not this agent's to clear.
    "vision/dev2/front/person": b"5",
    "homeassistant/sensor/dev2/front_person/config": b'{"name":"x"}',
}


def _publish_retained(broker: Broker, values: dict[str, bytes]) -> None:
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    c.connect(broker.host, broker.port)
    c.loop_start()
    try:
        for topic, payload in values.items():
            c.publish(topic, payload, qos=1, retain=True).wait_for_publish(5)
    finally:
        c.disconnect()
        c.loop_stop()


def _retained(broker: Broker, filters: list[str], settle_s: float = 1.0) -> dict[str, bytes]:
    """What a new subscriber is given as retained, as any MQTT client would see it."""
    found: dict[str, bytes] = {}
    lock = threading.Lock()
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)

    def on_message(client, userdata, msg) -> None:  # type: ignore[no-untyped-def]
        if msg.retain:
            with lock:
                found[msg.topic] = bytes(msg.payload)

    c.on_message = on_message
    c.on_connect = lambda client, *a: client.subscribe([(f, 1) for f in filters])
    c.connect(broker.host, broker.port)
    c.loop_start()
    time.sleep(settle_s)
    c.disconnect()
    c.loop_stop()
    with lock:
        return dict(found)


FILTERS = ["vision/#", "homeassistant/#"]


@pytest.mark.timeout(120)
def test_start_clears_what_the_configuration_no_longer_produces(broker, tmp_path: Path):
    """Stale counts are set anew, and a removed camera, zone and HA entity are cleared."""
    _publish_retained(broker, {**STALE, **OTHERS})
    agent = AgentProc(broker, tmp_path, overrides={"homeassistant": {"enabled": True}}).start()
    try:

        def swept() -> bool:
            held = _retained(broker, FILTERS, 0.5)
            return not any(t in held for t in STALE if "/front/" not in t or "zones" in t)

        assert wait_until(swept, 60, 0.5), agent.tail()
        held = _retained(broker, FILTERS)
        for topic, payload in OTHERS.items():
            assert held.get(topic) == payload, topic
        assert "vision/dev1/front/status" in held
        assert any(t.startswith("homeassistant/") and "/dev1/" in t for t in held)
        assert agent.logged("retained_swept")
    finally:
        agent.stop()


@pytest.mark.timeout(120)
def test_camera_down_reports_nobody_and_a_clean_stop_clears_counts(broker, tmp_path: Path):
    """A camera that cannot open: count 0 and motion OFF, not the old 3 and ON; a clean
    stop deletes both."""
    _publish_retained(broker, STALE)
    cams = [{"id": "front", "source": str(tmp_path / "missing.mp4")}]
    agent = AgentProc(broker, tmp_path, cameras=cams).start()
    try:

        def reset() -> bool:
            held = _retained(broker, ["vision/dev1/front/#"], 0.5)
            return (
                held.get("vision/dev1/front/person") == b"0"
                and held.get("vision/dev1/front/motion") == b"OFF"
            )

        assert wait_until(reset, 60, 0.5), agent.tail()
        assert agent.stop() == 0
        held = _retained(broker, ["vision/dev1/front/#"])
        assert "vision/dev1/front/person" not in held
        assert "vision/dev1/front/motion" not in held
    finally:
        agent.close()
