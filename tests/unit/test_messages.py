"""Payload models of the MQTT contract v1."""

from __future__ import annotations

import json
import time

import pytest
from pydantic import ValidationError

from agent.messages import (
    CameraStatusMessage,
    CommandReply,
    DetectionMessage,
    Heartbeat,
    ModelInfoMessage,
    StatusMessage,
    utc_ts,
)

TS = "2026-11-22T08:00:00.123456Z"


def detection_message(**over):
    fields = {
        "device": "pi-01",
        "camera": "front",
        "boot_id": "5d0c",
        "seq": 1234,
        "frame_id": 5678,
        "ts": TS,
        "image_wh": [768, 576],
        "model": {"name": "yolo11n-pose", "version": 3, "sha256": "9f2c"},
        "latency_ms": {"capture_to_publish": 35.2, "inference": 22.1},
        "detections": [
            {
                "label": "person",
                "class_id": 0,
                "score": 0.912,
                "xyxy": [10.0, 20.5, 110.2, 300.0],
                "keypoints": [[1.0, 2.0, 0.9]],
            }
        ],
    }
    fields.update(over)
    return DetectionMessage(**fields)


@pytest.mark.parametrize(
    ("epoch", "text"),
    [
        (0.0, "1970-01-01T00:00:00.000000Z"),
        (1795334400.123456, "2026-11-22T08:00:00.123456Z"),
        (1795334400.5, "2026-11-22T08:00:00.500000Z"),
        (1795334400.0000004, "2026-11-22T08:00:00.000000Z"),
        (1795334399.9999996, "2026-11-22T08:00:00.000000Z"),
    ],
)
def test_utc_ts(epoch, text):
    """Timestamps are UTC ISO 8601 with microseconds and a trailing Z."""
    assert utc_ts(epoch) == text


def test_detection_message_matches_contract_example():
    """The serialised message has exactly the contract's keys, order and values."""
    data = json.loads(detection_message().to_bytes())
    assert list(data) == [
        "schema",
        "device",
        "camera",
        "boot_id",
        "seq",
        "frame_id",
        "ts",
        "image_wh",
        "model",
        "latency_ms",
        "detections",
    ]
    assert data["schema"] == "edge-vision/detections/1"
    assert data["image_wh"] == [768, 576]
    assert data["detections"][0] == {
        "label": "person",
        "class_id": 0,
        "score": 0.912,
        "xyxy": [10.0, 20.5, 110.2, 300.0],
        "keypoints": [[1.0, 2.0, 0.9]],
        "track_id": None,  # objects over time (contract v1, additive): int or null
    }


def test_keypoints_key_absent_when_none():
    """Detections of non-pose models have no keypoints key at all (not null)."""
    dets = [
        {"label": "car", "class_id": 2, "score": 0.5, "xyxy": [0, 0, 1, 1]},
        {"label": "car", "class_id": 2, "score": 0.5, "xyxy": [0, 0, 1, 1], "keypoints": []},
    ]
    data = json.loads(detection_message(detections=dets).to_bytes())
    assert "keypoints" not in data["detections"][0]
    assert data["detections"][1]["keypoints"] == []
    data = json.loads(detection_message(detections=dets[:1]).to_bytes())
    assert "keypoints" not in data["detections"][0]


def test_detection_message_round_trip():
    """A serialised message validates back into an equal model."""
    msg = detection_message()
    assert DetectionMessage.model_validate_json(msg.to_bytes()) == msg


@pytest.mark.parametrize(
    "over",
    [
        {"seq": -1},
        {"ts": "2026-11-22T08:00:00Z"},
        {"ts": "2026-11-22T08:00:00.123456+00:00"},
        {"image_wh": [0, 576]},
        {"image_wh": [768]},
        {"camera": "front door"},
        {"schema": "edge-vision/detections/2"},
        {"extra": 1},
    ],
)
def test_detection_message_rejects_invalid(over):
    """Values outside the contract are refused at construction."""
    with pytest.raises(ValidationError):
        detection_message(**over)


def test_detection_message_is_frozen():
    """Messages are immutable once built."""
    msg = detection_message()
    with pytest.raises(ValidationError):
        msg.seq = 1


@pytest.mark.parametrize(
    ("model", "keys"),
    [
        (
            StatusMessage(state="online", boot_id="b", version="0.1.0", ts=TS),
            ["state", "boot_id", "version", "ts", "groups"],  # groups: additive (fleet)
        ),
        (
            CameraStatusMessage(state="reconnecting", reason="ended", ts=TS),
            ["state", "reason", "ts", "detail"],
        ),
        (
            CommandReply(
                id="r1", ok=False, result=None, error={"code": "x", "message": "y"}, ts=TS
            ),
            ["id", "ok", "result", "error", "ts"],
        ),
        (
            ModelInfoMessage(
                name="m",
                version=2,
                sha256="ab",
                precision="int8",
                provider="CPUExecutionProvider",
                input_hw=[640, 640],
                labels=["person"],
                task="pose",
                activated_at=TS,
                previous=None,
            ),
            [
                "name",
                "version",
                "sha256",
                "precision",
                "provider",
                "input_hw",
                "labels",
                "task",
                "activated_at",
                "previous",
            ],
        ),
    ],
)
def test_state_payload_keys(model, keys):
    """Status, camera status, reply and model payloads have exactly the contract's keys."""
    assert list(json.loads(model.to_bytes())) == keys


def test_reply_keeps_null_error():
    """A successful reply still carries "error": null, as the contract shows."""
    data = json.loads(CommandReply(id="a", ok=True, result={"x": 1}, error=None, ts=TS).to_bytes())
    assert data["error"] is None
    assert data["result"] == {"x": 1}


def test_heartbeat_matches_contract():
    """A heartbeat with every contract field serialises under schema edge-vision/health/1."""
    hb = Heartbeat(
        device="pi-01",
        boot_id="b",
        ts=utc_ts(time.time()),
        uptime_s=3600.0,
        version="0.1.0",
        state="running",
        cameras={
            "front": {
                "state": "streaming",
                "fps_in": 10.0,
                "fps_processed": 10.0,
                "frames_dropped": 0,
                "reconnects": 0,
                "last_frame_age_s": 0.05,
            }
        },
        inference={
            "provider": "CPUExecutionProvider",
            "model_sha256": "ab",
            "latency_ms": {"p50": 21.0, "p95": 25.1, "p99": 30.2},
        },
        mqtt={
            "connected": True,
            "spool_depth": 0,
            "spool_bytes": 0,
            "published": 36000,
            "dropped_overflow": 0,
            "dropped_expired": 0,
            "rejected_oversize": 0,
        },
        system={"cpu_percent": 140.2, "rss_mb": 180.5, "temp_c": None, "load1": 1.9},
    )
    data = json.loads(hb.to_bytes())
    assert data["schema"] == "edge-vision/health/1"
    assert set(data) == {
        "schema",
        "device",
        "boot_id",
        "ts",
        "uptime_s",
        "version",
        "state",
        "cameras",
        "inference",
        "mqtt",
        "system",
        "commands",  # additive: commands received and refused (docs/mqtt.md)
    }
    assert data["system"]["temp_c"] is None
    assert Heartbeat.model_validate_json(hb.to_bytes()) == hb
