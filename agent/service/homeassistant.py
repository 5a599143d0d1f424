"""Home Assistant MQTT discovery: the retained configs that make the agent's entities appear.

Pure functions: topics and payloads only, publishing is the caller's job (retained,
QoS 1, after the ``online`` status). Entities, per device: agent connectivity; per camera:
its stream state, processed FPS, and one count sensor per label; and the inference latency
p50. Every entity but the connectivity sensor is unavailable while the agent's status is
not ``online`` (``offline`` from the Last Will, or ``stopped``). docs/homeassistant.md.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.mqtt.topics import Topics, label_level

DEFAULT_DISCOVERY_PREFIX = "homeassistant"
_DISCOVERY_PREFIX = re.compile(r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*$")
_MANUFACTURER = "edge-vision-agent"
# The status payload is JSON; only "online" means available ("stopped" must not count).
_ONLINE_TEMPLATE = "{{ 'online' if value_json.state == 'online' else 'offline' }}"
CAMERA_STATES = ("streaming", "reconnecting", "offline")


@dataclass(frozen=True, slots=True)
class DiscoveryMessage:
    """One discovery config: publish ``payload`` to ``topic`` retained, QoS 1."""

    topic: str
    payload: bytes
    component: str
    unique_id: str

    def config(self) -> dict[str, Any]:
        """The payload decoded (for tests and logs)."""
        decoded: dict[str, Any] = json.loads(self.payload)
        return decoded


def _unique_id(device_id: str, object_id: str) -> str:
    return f"{_MANUFACTURER}_{device_id}_{object_id}"


def _device_block(device_id: str, version: str) -> dict[str, Any]:
    return {
        "identifiers": [f"{_MANUFACTURER}_{device_id}"],
        "name": device_id,
        "model": "edge-vision-agent",
        "manufacturer": _MANUFACTURER,
        "sw_version": version,
    }


def _availability(topics: Topics) -> list[dict[str, str]]:
    return [
        {
            "topic": topics.status,
            "value_template": _ONLINE_TEMPLATE,
            "payload_available": "online",
            "payload_not_available": "offline",
        }
    ]


def _message(
    discovery_prefix: str,
    component: str,
    topics: Topics,
    object_id: str,
    config: dict[str, Any],
    *,
    version: str,
    available_when_online: bool = True,
) -> DiscoveryMessage:
    device_id = topics.device_id
    unique_id = _unique_id(device_id, object_id)
    entity_object_id = f"{device_id}_{object_id}".replace("-", "_").lower()
    payload: dict[str, Any] = {
        **config,
        "unique_id": unique_id,
        # object_id: Home Assistant < 2025.10; default_entity_id: 2025.10 and later.
        # Discovery drops keys a version does not know, so both are safe everywhere.
        "object_id": entity_object_id,
        "default_entity_id": f"{component}.{entity_object_id}",
        "device": _device_block(device_id, version),
        "origin": {"name": _MANUFACTURER, "sw_version": version},
        "qos": 1,
    }
    if available_when_online:
        payload["availability"] = _availability(topics)
    topic = f"{discovery_prefix}/{component}/{device_id}/{object_id}/config"
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return DiscoveryMessage(topic, body, component, unique_id)


def discovery_messages(
    topics: Topics,
    *,
    version: str,
    cameras: Mapping[str, Sequence[str]],
    discovery_prefix: str = DEFAULT_DISCOVERY_PREFIX,
    health_interval_s: float | None = None,
    objects: Mapping[str, CameraObjectTopics] | None = None,
    motion: Sequence[str] = (),
) -> list[DiscoveryMessage]:
    """Every discovery config of one agent.

    ``cameras`` maps camera id -> labels to make count sensors for (the class filter if
    one is set, else the model's labels; a COCO model has 80). ``health_interval_s``, if
    given, makes the heartbeat-based sensors unavailable after 3 missed heartbeats.
    Raises ValueError on a discovery prefix or camera id that cannot be a topic level.
    """
    if not _DISCOVERY_PREFIX.match(discovery_prefix):
        raise ValueError(
            f"discovery prefix {discovery_prefix!r} must be topic levels of [A-Za-z0-9_-]"
        )
    expire: dict[str, Any] = {}
    if health_interval_s is not None:
        if health_interval_s <= 0:
            raise ValueError(f"health_interval_s must be > 0, got {health_interval_s}")
        expire = {"expire_after": math.ceil(3 * health_interval_s)}
    msgs = [
        _message(
            discovery_prefix,
            "binary_sensor",
            topics,
            "agent",
            {
                "name": "Agent",
                "device_class": "connectivity",
                "state_topic": topics.status,
                "value_template": _ONLINE_TEMPLATE,
                "payload_on": "online",
                "payload_off": "offline",
                "entity_category": "diagnostic",
            },
            version=version,
            # This entity reports the connection itself: "off", never "unavailable".
            available_when_online=False,
        ),
        _message(
            discovery_prefix,
            "sensor",
            topics,
            "inference_latency_p50",
            {
                "name": "Inference latency p50",
                "state_topic": topics.health,
                # A null p50 (no frame yet) renders "None", which Home Assistant reads as
                # an unknown state rather than a non-numeric error.
                "value_template": "{{ value_json.inference.latency_ms.p50 }}",
                "device_class": "duration",
                "unit_of_measurement": "ms",
                "state_class": "measurement",
                "suggested_display_precision": 1,
                "entity_category": "diagnostic",
                **expire,
            },
            version=version,
        ),
    ]
    for camera, labels in cameras.items():
        msgs += _camera_messages(discovery_prefix, topics, camera, labels, version, expire)
    for camera, spec in (objects or {}).items():
        msgs += _objects_messages(discovery_prefix, topics, camera, spec, version)
    for camera in motion:
        msgs.append(
            _message(
                discovery_prefix,
                "binary_sensor",
                topics,
                f"{camera}_motion",
                {
                    "name": f"{camera} motion",
                    "state_topic": topics.camera_motion(camera),
                    "payload_on": "ON",
                    "payload_off": "OFF",
                    "device_class": "motion",
                },
                version=version,
            )
        )
    return msgs


@dataclass(frozen=True, slots=True)
class CameraObjectTopics:
    """What one camera's objects stage publishes: (zone, label) and (line, label, dir)."""

    zones: Sequence[tuple[str, str]]
    lines: Sequence[tuple[str, str, str]]


#: The event entity's payload: Home Assistant wants an ``event_type`` key.
_EVENT_TEMPLATE = (
    '{"event_type":"{{ value_json.type }}","id":"{{ value_json.id }}",'
    '"label":"{{ value_json.label }}","zones":{{ value_json.zones | tojson }},'
    '"entered_zones":{{ value_json.entered_zones | tojson }},'
    '"end_reason":{{ value_json.end_reason | tojson }}}'
)


def _objects_messages(
    discovery_prefix: str,
    topics: Topics,
    camera: str,
    spec: CameraObjectTopics,
    version: str,
) -> list[DiscoveryMessage]:
    """Zone occupancy (binary sensor and count), line counters, and the events entity."""
    msgs = [
        _message(
            discovery_prefix,
            "event",
            topics,
            f"{camera}_events",
            {
                "name": f"{camera} object events",
                "state_topic": topics.camera_events(camera),
                "value_template": _EVENT_TEMPLATE,
                "event_types": ["new", "update", "end"],
                "icon": "mdi:motion-sensor",
            },
            version=version,
        )
    ]
    for zone, label in spec.zones:
        level = label_level(label)
        topic = topics.zone_count(camera, zone, label)
        msgs.append(
            _message(
                discovery_prefix,
                "binary_sensor",
                topics,
                f"{camera}_{zone}_{level}_occupancy",
                {
                    "name": f"{camera} {zone} {label} occupancy",
                    "state_topic": topic,
                    "value_template": "{{ 'ON' if value | int(0) > 0 else 'OFF' }}",
                    "device_class": "occupancy",
                },
                version=version,
            )
        )
        msgs.append(
            _message(
                discovery_prefix,
                "sensor",
                topics,
                f"{camera}_{zone}_{level}_count",
                {
                    "name": f"{camera} {zone} {label} count",
                    "state_topic": topic,
                    "state_class": "measurement",
                    "suggested_display_precision": 0,
                    "icon": "mdi:counter",
                },
                version=version,
            )
        )
    for line, label, direction in spec.lines:
        level = label_level(label)
        msgs.append(
            _message(
                discovery_prefix,
                "sensor",
                topics,
                f"{camera}_{line}_{level}_{direction}",
                {
                    "name": f"{camera} {line} {label} {direction}",
                    "state_topic": topics.line_count(camera, line, label, direction),
                    "state_class": "total_increasing",
                    "suggested_display_precision": 0,
                    "icon": "mdi:counter",
                },
                version=version,
            )
        )
    return msgs


def _camera_messages(
    discovery_prefix: str,
    topics: Topics,
    camera: str,
    labels: Sequence[str],
    version: str,
    expire: dict[str, Any],
) -> list[DiscoveryMessage]:
    # The contract's id rule makes a camera id a safe object id and a safe key inside the
    # single-quoted template strings below.
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", camera):
        raise ValueError(f"camera id {camera!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
    camera_topic = topics.camera_status(camera)
    msgs = [
        _message(
            discovery_prefix,
            "sensor",
            topics,
            f"{camera}_stream",
            {
                "name": f"{camera} stream",
                "state_topic": camera_topic,
                "value_template": "{{ value_json.state }}",
                "device_class": "enum",
                "options": list(CAMERA_STATES),
                "entity_category": "diagnostic",
            },
            version=version,
        ),
        _message(
            discovery_prefix,
            "sensor",
            topics,
            f"{camera}_fps",
            {
                "name": f"{camera} FPS",
                "state_topic": topics.health,
                "value_template": f"{{{{ value_json.cameras['{camera}'].fps_processed }}}}",
                "unit_of_measurement": "fps",
                "state_class": "measurement",
                "suggested_display_precision": 1,
                "entity_category": "diagnostic",
                **expire,
            },
            version=version,
        ),
    ]
    seen: set[str] = set()
    for label in labels:
        level = label_level(label)
        if level in seen:  # "traffic light" and "traffic_light" share one topic
            continue
        seen.add(level)
        msgs.append(
            _message(
                discovery_prefix,
                "sensor",
                topics,
                f"{camera}_{level}_count",
                {
                    "name": f"{camera} {label} count",
                    "state_topic": topics.camera_label(camera, label),
                    "state_class": "measurement",
                    "suggested_display_precision": 0,
                    "icon": "mdi:counter",
                },
                version=version,
            )
        )
    return msgs


def removal_messages(
    previous: Sequence[DiscoveryMessage], current: Sequence[DiscoveryMessage]
) -> list[DiscoveryMessage]:
    """Empty retained payloads for configs in ``previous`` but not ``current``.

    Publishing them deletes the entities of a removed camera or label in Home Assistant.
    """
    keep = {m.topic for m in current}
    return [
        DiscoveryMessage(m.topic, b"", m.component, m.unique_id)
        for m in previous
        if m.topic not in keep
    ]


def birth_topic(discovery_prefix: str = DEFAULT_DISCOVERY_PREFIX) -> str:
    """Where Home Assistant announces ``online`` after it starts (re-publish on it)."""
    return f"{discovery_prefix}/status"
