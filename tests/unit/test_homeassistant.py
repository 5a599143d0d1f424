"""Home Assistant MQTT discovery configs: topics, required keys, templates on real payloads."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agent.messages import Heartbeat
from agent.mqtt.topics import Topics
from agent.service.homeassistant import (
    CAMERA_STATES,
    DiscoveryMessage,
    birth_topic,
    discovery_messages,
    removal_messages,
)

jinja2 = pytest.importorskip("jinja2")

TOPICS = Topics("vision", "pi-01")
CAMERAS = {"front": ["person", "traffic light"], "back-yard": ["person"]}
# What Home Assistant's MQTT discovery accepts in a config topic (homeassistant/components/
# mqtt/discovery.py: TOPIC_MATCHER): <prefix>/<component>/[<node_id>/]<object_id>/config.
TOPIC_RE = re.compile(
    r"^(?P<prefix>[A-Za-z0-9_/-]+?)/(?P<component>\w+)/(?P<node>[a-zA-Z0-9_-]+)/"
    r"(?P<object>[a-zA-Z0-9_-]+)/config$"
)
SENSOR_DEVICE_CLASSES = {None, "duration", "enum"}
REQUIRED = {
    "binary_sensor": {"name", "state_topic", "unique_id", "device"},
    "sensor": {"name", "state_topic", "unique_id", "device"},
}


def _messages(**kwargs: Any) -> list[DiscoveryMessage]:
    return discovery_messages(TOPICS, version="1.2.3", cameras=CAMERAS, **kwargs)


def _by_object(msgs: list[DiscoveryMessage]) -> dict[str, dict[str, Any]]:
    out = {}
    for m in msgs:
        match = TOPIC_RE.match(m.topic)
        assert match, m.topic
        out[match["object"]] = m.config()
    return out


def _render(template: str, payload: str) -> str:
    """Render like Home Assistant: the payload parsed as ``value_json``."""
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    return env.from_string(template).render(value=payload, value_json=json.loads(payload))


def _heartbeat(p50: float | None) -> str:
    camera = {
        "state": "streaming",
        "fps_in": 10.0,
        "fps_processed": 9.5,
        "frames_dropped": 0,
        "reconnects": 0,
        "last_frame_age_s": 0.1,
    }
    hb = Heartbeat.model_validate(
        {
            "schema": "edge-vision/health/1",
            "device": "pi-01",
            "boot_id": "b",
            "ts": "2026-11-22T08:00:00.000000Z",
            "uptime_s": 5.0,
            "version": "1.2.3",
            "state": "running",
            "cameras": {"front": camera, "back-yard": {**camera, "fps_processed": 4.25}},
            "inference": {
                "provider": "CPUExecutionProvider",
                "model_sha256": "ab",
                "latency_ms": {"p50": p50, "p95": None, "p99": None},
            },
            "mqtt": {
                "connected": True,
                "spool_depth": 0,
                "spool_bytes": 0,
                "published": 1,
                "dropped_overflow": 0,
                "dropped_expired": 0,
                "rejected_oversize": 0,
            },
            "system": {"cpu_percent": 1.0, "rss_mb": 100.0, "temp_c": None, "load1": 0.1},
        }
    )
    return hb.model_dump_json(by_alias=True)


def test_entities_of_one_agent():
    """One connectivity sensor, one latency sensor, per camera stream+fps, per label a count."""
    objects = set(_by_object(_messages()))
    assert objects == {
        "agent",
        "inference_latency_p50",
        "front_stream",
        "front_fps",
        "front_person_count",
        "front_traffic_light_count",
        "back-yard_stream",
        "back-yard_fps",
        "back-yard_person_count",
    }


def test_topics_and_required_keys_follow_discovery_rules():
    """Config topics parse as HA discovery topics; each payload has HA's required keys."""
    msgs = _messages(discovery_prefix="ha/disc")
    for m in msgs:
        match = TOPIC_RE.match(m.topic)
        assert match and match["prefix"] == "ha/disc" and match["node"] == "pi-01", m.topic
        assert match["component"] == m.component
        cfg = m.config()
        assert REQUIRED[m.component] <= set(cfg), (m.topic, sorted(cfg))
        assert cfg["unique_id"] == m.unique_id
        assert cfg["default_entity_id"] == f"{m.component}.{cfg['object_id']}"
        assert re.fullmatch(r"[a-z0-9_]+", cfg["object_id"]), cfg["object_id"]
        assert cfg["device"] == {
            "identifiers": ["edge-vision-agent_pi-01"],
            "name": "pi-01",
            "model": "edge-vision-agent",
            "manufacturer": "edge-vision-agent",
            "sw_version": "1.2.3",
        }
        assert cfg["qos"] == 1
        if m.component == "sensor":
            assert cfg.get("device_class") in SENSOR_DEVICE_CLASSES
    unique = [m.unique_id for m in msgs]
    assert len(unique) == len(set(unique)), "unique_id must be unique"


def test_state_topics_are_the_contract_topics():
    """Counts read <p>/<d>/<c>/<label>; fps and latency the health topic; stream its status."""
    objs = _by_object(_messages())
    assert objs["front_person_count"]["state_topic"] == "vision/pi-01/front/person"
    assert objs["front_traffic_light_count"]["state_topic"] == "vision/pi-01/front/traffic_light"
    assert objs["front_person_count"]["state_class"] == "measurement"
    assert "unit_of_measurement" not in objs["front_person_count"]
    assert objs["front_fps"]["state_topic"] == "vision/pi-01/health"
    assert objs["inference_latency_p50"]["state_topic"] == "vision/pi-01/health"
    assert objs["inference_latency_p50"]["unit_of_measurement"] == "ms"
    assert objs["back-yard_stream"]["state_topic"] == "vision/pi-01/back-yard/status"
    assert objs["back-yard_stream"]["options"] == list(CAMERA_STATES)
    assert objs["agent"]["state_topic"] == "vision/pi-01/status"


@pytest.mark.parametrize(
    ("state", "available"),
    [("online", "online"), ("offline", "offline"), ("stopped", "offline")],
)
def test_availability_follows_agent_status(state, available):
    """Entities are available only while the status is online (stopped counts as offline)."""
    status = json.dumps({"state": state, "boot_id": "b", "version": "1", "ts": "t"})
    for obj, cfg in _by_object(_messages()).items():
        if obj == "agent":
            assert "availability" not in cfg, "the connectivity sensor must show off, not n/a"
            assert _render(cfg["value_template"], status) == (
                cfg["payload_on"] if state == "online" else cfg["payload_off"]
            )
            assert cfg["device_class"] == "connectivity"
            continue
        (avail,) = cfg["availability"]
        assert avail["topic"] == "vision/pi-01/status"
        assert _render(avail["value_template"], status) == available
        assert avail["payload_available"] == "online"
        assert avail["payload_not_available"] == "offline"


def test_health_templates_read_the_heartbeat():
    """fps and p50 templates extract the right numbers from a contract heartbeat."""
    objs = _by_object(_messages())
    hb = _heartbeat(p50=21.5)
    assert float(_render(objs["front_fps"]["value_template"], hb)) == 9.5
    assert float(_render(objs["back-yard_fps"]["value_template"], hb)) == 4.25
    assert float(_render(objs["inference_latency_p50"]["value_template"], hb)) == 21.5
    # HA reads the literal "None" as an unknown state (mqtt PAYLOAD_NONE).
    assert _render(objs["inference_latency_p50"]["value_template"], _heartbeat(None)) == "None"


def test_stream_template_reads_camera_status():
    """The stream sensor's template gives one of its enum options."""
    cfg = _by_object(_messages())["front_stream"]
    payload = json.dumps({"state": "reconnecting", "reason": "stalled", "ts": "t"})
    assert _render(cfg["value_template"], payload) in cfg["options"]


def test_expire_after_only_on_heartbeat_sensors():
    """health_interval_s sets expire_after = 3 intervals on heartbeat-based sensors only."""
    objs = _by_object(_messages(health_interval_s=10))
    assert objs["front_fps"]["expire_after"] == 30
    assert objs["inference_latency_p50"]["expire_after"] == 30
    assert "expire_after" not in objs["front_person_count"]
    assert "expire_after" not in _by_object(_messages())["front_fps"]


def test_duplicate_label_levels_make_one_sensor():
    """Labels that map to the same topic level produce a single entity."""
    msgs = discovery_messages(
        TOPICS, version="1", cameras={"front": ["traffic light", "traffic_light"]}
    )
    assert sum(m.topic.endswith("front_traffic_light_count/config") for m in msgs) == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"discovery_prefix": "home assistant"}, "discovery prefix"),
        ({"discovery_prefix": "ha/"}, "discovery prefix"),
        ({"discovery_prefix": "ha/#"}, "discovery prefix"),
        ({"cameras": {"front door": ["person"]}}, "camera id"),
        ({"cameras": {"x'y": ["person"]}}, "camera id"),
        ({"health_interval_s": 0}, "health_interval_s"),
    ],
)
def test_rejects_what_cannot_be_a_topic_or_template(kwargs, match):
    """Bad prefixes, camera ids that would break topics or templates, bad intervals raise."""
    args: dict[str, Any] = {"version": "1", "cameras": {"front": ["person"]}, **kwargs}
    with pytest.raises(ValueError, match=match):
        discovery_messages(TOPICS, **args)


def test_removal_messages_clear_dropped_entities():
    """Configs no longer produced get an empty retained payload, the rest are untouched."""
    before = discovery_messages(TOPICS, version="1", cameras={"a": ["person"], "b": ["cat"]})
    after = discovery_messages(TOPICS, version="1", cameras={"a": ["person"]})
    removed = removal_messages(before, after)
    assert {m.topic for m in removed} == {m.topic for m in before} - {m.topic for m in after}
    assert removed and all(m.payload == b"" for m in removed)
    assert all("/b_" in m.topic for m in removed)


def test_birth_topic():
    """Home Assistant's birth message topic sits under the discovery prefix."""
    assert birth_topic() == "homeassistant/status"
    assert birth_topic("ha") == "ha/status"


def _object_messages() -> dict[str, dict[str, Any]]:
    from agent.service.homeassistant import CameraObjectTopics

    spec = CameraObjectTopics(
        zones=[("driveway", "person")], lines=[("gate", "person", "in"), ("gate", "person", "out")]
    )
    msgs = discovery_messages(
        Topics("vision", "pi-01"), version="1.2.3", cameras={"front": ["person"]},
        objects={"front": spec},
    )  # fmt: skip
    return _by_object(msgs)


def test_zone_line_and_event_entities():
    """Each zone gets occupancy and count, each line direction a counter, each camera events."""
    objs = _object_messages()
    assert objs["front_driveway_person_occupancy"]["device_class"] == "occupancy"
    assert (
        objs["front_driveway_person_count"]["state_topic"]
        == "vision/pi-01/front/zones/driveway/person"
    )
    assert objs["front_gate_person_in"]["state_topic"] == "vision/pi-01/front/lines/gate/person/in"
    assert objs["front_gate_person_out"]["state_class"] == "total_increasing"
    assert objs["front_events"]["state_topic"] == "vision/pi-01/front/events"
    # The automation in docs/homeassistant.md names this entity id.
    assert objs["front_driveway_person_occupancy"]["default_entity_id"] == (
        "binary_sensor.pi_01_front_driveway_person_occupancy"
    )


@pytest.mark.parametrize(("count", "state"), [("0", "OFF"), ("1", "ON"), ("3", "ON")])
def test_occupancy_template(count, state):
    """The occupancy binary sensor is ON while the zone count is above zero."""
    template = _object_messages()["front_driveway_person_occupancy"]["value_template"]
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    assert env.from_string(template).render(value=count) == state


def test_event_entity_template_makes_an_event_type():
    """The event entity's template turns an EventMessage into {"event_type": ..., ...}."""
    template = _object_messages()["front_events"]["value_template"]
    body = {
        "type": "end",
        "id": "front-20261125T080211Z-3f2a9c1e",
        "label": "person",
        "zones": [],
        "entered_zones": ["driveway"],
        "end_reason": "lost",
    }
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    env.filters["tojson"] = json.dumps
    rendered = json.loads(env.from_string(template).render(value_json=body))
    assert rendered["event_type"] == "end" and rendered["entered_zones"] == ["driveway"]
    assert rendered["end_reason"] == "lost"
    assert rendered["event_type"] in _object_messages()["front_events"]["event_types"]


def test_motion_binary_sensor_per_camera():
    """Region mode: each camera gets a motion binary sensor on its retained motion topic."""
    msgs = discovery_messages(
        Topics("vision", "pi-01"), version="1", cameras={"front": ["person"]}, motion=["front"]
    )
    cfg = _by_object(msgs)["front_motion"]
    assert cfg["state_topic"] == "vision/pi-01/front/motion"
    assert (cfg["payload_on"], cfg["payload_off"], cfg["device_class"]) == ("ON", "OFF", "motion")
