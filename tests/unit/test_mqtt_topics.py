"""Topic strings of the MQTT contract v1."""

from __future__ import annotations

import pytest

from agent.mqtt.topics import Topics, classify, label_level, watch_filter

T = Topics("vision", "pi-01", ("yard", "all"))


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        (T.status, "vision/pi-01/status"),
        (T.health, "vision/pi-01/health"),
        (T.model, "vision/pi-01/model"),
        (T.camera_detections("front"), "vision/pi-01/front/detections"),
        (T.camera_status("front"), "vision/pi-01/front/status"),
        (T.camera_snapshot("front"), "vision/pi-01/front/snapshot"),
        (T.camera_label("front", "person"), "vision/pi-01/front/person"),
        (T.camera_label("front", "traffic light"), "vision/pi-01/front/traffic_light"),
        (T.cmd("model/deploy"), "vision/pi-01/cmd/model/deploy"),
        (T.fleet_cmd("yard", "pause"), "vision/fleet/yard/cmd/pause"),
        (T.reply("config/set"), "vision/pi-01/reply/config/set"),
        (T.model_upload("t-7f3a", 3), "vision/pi-01/model/upload/t-7f3a/3"),
        (T.fleet_model_upload("yard", "t-1", 0), "vision/fleet/yard/model/upload/t-1/0"),
    ],
)
def test_topic_strings(topic, expected):
    """Each topic is exactly the contract's string."""
    assert topic == expected


@pytest.mark.parametrize(
    ("label", "level"),
    [
        ("person", "person"),
        ("traffic light", "traffic_light"),
        ("a/b+c#d", "a_b_c_d"),
        ("hot-dog_2", "hot-dog_2"),
        ("été", "_t_"),
        ("", "_"),
        ("status", "status_"),
        ("detections", "detections_"),
        ("x" * 100, "x" * 64),
    ],
)
def test_label_level_is_one_safe_level(label, level):
    """Labels become one topic level of [A-Za-z0-9_-] that cannot shadow a camera topic."""
    assert label_level(label) == level


def test_subscriptions_cover_device_and_groups():
    """Commands and uploads are subscribed for the device and every fleet group."""
    assert T.cmd_subscriptions() == [
        "vision/pi-01/cmd/#",
        "vision/fleet/yard/cmd/#",
        "vision/fleet/all/cmd/#",
    ]
    assert T.upload_subscriptions() == [
        "vision/pi-01/model/upload/+/+",
        "vision/fleet/yard/model/upload/+/+",
        "vision/fleet/all/model/upload/+/+",
    ]


@pytest.mark.parametrize(
    ("topic", "name"),
    [
        ("vision/pi-01/cmd/pause", "pause"),
        ("vision/pi-01/cmd/model/deploy", "model/deploy"),
        ("vision/fleet/yard/cmd/config/set", "config/set"),
        ("vision/fleet/other/cmd/pause", None),
        ("vision/pi-02/cmd/pause", None),
        ("vision/pi-01/cmd/", None),
        ("vision/pi-01/cmd//x", None),
        ("vision/pi-01/status", None),
    ],
)
def test_parse_cmd(topic, name):
    """Command names are read back only from this device's and its groups' cmd topics."""
    assert T.parse_cmd(topic) == name


@pytest.mark.parametrize(
    ("topic", "parsed"),
    [
        ("vision/pi-01/model/upload/t-7f3a/0", ("t-7f3a", 0)),
        ("vision/fleet/all/model/upload/t-1/14", ("t-1", 14)),
        ("vision/pi-01/model/upload/t-1/-1", None),
        ("vision/pi-01/model/upload/t-1/x", None),
        ("vision/pi-01/model/upload/t-1/\u0663", None),
        ("vision/pi-01/model/upload/t-1", None),
        ("vision/pi-01/model/upload/t 1/0", None),
        ("vision/pi-01/model/upload/t-1/0/extra", None),
        ("vision/pi-02/model/upload/t-1/0", None),
    ],
)
def test_parse_upload(topic, parsed):
    """Upload chunk topics give (transfer_id, index); anything else gives None."""
    assert T.parse_upload(topic) == parsed


def test_multi_level_prefix():
    """A prefix may have several levels; topics and parsing follow it."""
    t = Topics("site/a", "cam-box")
    assert t.status == "site/a/cam-box/status"
    assert t.parse_cmd("site/a/cam-box/cmd/pause") == "pause"


@pytest.mark.parametrize(
    ("prefix", "device", "groups"),
    [
        ("vision", "pi 01", ()),
        ("vision", "", ()),
        ("vision", "pi/01", ()),
        ("vis#", "pi", ()),
        ("vision/", "pi", ()),
        ("a//b", "pi", ()),
        ("vision", "pi", ("bad group",)),
    ],
)
def test_invalid_ids_rejected(prefix, device, groups):
    """Device ids, groups and prefixes that are not valid topic levels are refused."""
    with pytest.raises(ValueError, match="must"):
        Topics(prefix, device, groups)


@pytest.mark.parametrize(
    ("topic", "parsed"),
    [
        ("vision/pi-01/status", ("status", "pi-01", None)),
        ("vision/pi-01/health", ("health", "pi-01", None)),
        ("vision/pi-01/model", ("model", "pi-01", None)),
        ("vision/pi-01/model/upload/t-1/0", ("upload", "pi-01", None)),
        ("vision/pi-01/cmd/model/deploy", ("cmd", "pi-01", None)),
        ("vision/pi-01/reply/pause", ("reply", "pi-01", None)),
        ("vision/pi-01/front/detections", ("detections", "pi-01", "front")),
        ("vision/pi-01/front/status", ("camera_status", "pi-01", "front")),
        ("vision/pi-01/front/snapshot", ("snapshot", "pi-01", "front")),
        ("vision/pi-01/front/traffic_light", ("count", "pi-01", "front")),
        ("vision/fleet/yard/cmd/pause", None),
        ("vision/pi-01/unknown", None),
        ("vision/pi-01/front/a/b", None),
        ("other/pi-01/status", None),
        ("vision", None),
    ],
)
def test_classify(topic, parsed):
    """Subscribers can tell every contract topic's kind, device and camera."""
    assert classify("vision", topic) == parsed


def test_classify_round_trips_topics():
    """classify reads back what Topics builds."""
    assert classify("vision", T.camera_label("front", "traffic light")) == (
        "count",
        "pi-01",
        "front",
    )
    assert classify("vision", T.model_upload("t-9", 2)) == ("upload", "pi-01", None)


@pytest.mark.parametrize(("device", "expected"), [(None, "vision/#"), ("pi-01", "vision/pi-01/#")])
def test_watch_filter(device, expected):
    """watch subscribes to one device's topics or everything under the prefix."""
    assert watch_filter("vision", device) == expected


@pytest.mark.parametrize(
    ("topic", "kind"),
    [
        ("vision/d1/front/events", "events"),
        ("vision/d1/front/events/front-20261125T080211Z-3f2a/snapshot", "event_snapshot"),
        ("vision/d1/front/zones/driveway/person", "zone_count"),
        ("vision/d1/front/lines/gate/person/in", "line_count"),
        ("vision/d1/front/motion", "motion"),
    ],
)
def test_classify_objects_topics(topic, kind):
    """The objects-over-time topics are told apart for subscribers like watch."""
    assert classify("vision", topic) == (kind, "d1", "front")


def test_watch_formats_events_and_counters():
    """watch shows an event's type, zones and last crossing, and zone and line counters."""
    from agent.commands.watch import format_message

    body = (
        b'{"type":"update","ts":"2026-11-25T08:02:11.402Z","label":"person","id":"e1",'
        b'"top_score":0.9,"zones":["driveway"],"crossings":[{"line":"gate","direction":"in"}]}'
    )
    line = format_message("events", "d1", "front", body)
    assert "EVENT UPDATE" in line and "driveway" in line and "gate:in" in line
    zone = format_message("zone_count", "d1", "front", b"2", "vision/d1/front/zones/drive/person")
    assert "ZONE drive/person = 2" in zone
    ln = format_message("line_count", "d1", "front", b"7", "vision/d1/front/lines/gate/person/in")
    assert "LINE gate/person/in = 7" in ln
