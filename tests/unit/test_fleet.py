"""Fleet logic: status rows from retained payloads, wave plans, abort rule, state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.fleet.rollout import DeviceEntry, RolloutState, outcome, plan_waves, should_abort
from agent.fleet.status import build_rows, format_table, parse_topic

NOW = 1_764_057_600.0  # 2025-11-25T08:00:00Z


def _ts(offset_s: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(NOW + offset_s, timezone.utc).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("prefix", "topic", "expected"),
    [
        ("vision", "vision/pi-01/status", ("pi-01", "status")),
        ("vision", "vision/pi-01/health", ("pi-01", "health")),
        ("vision", "vision/pi-01/model", ("pi-01", "model")),
        ("site/a", "site/a/pi-01/model", ("pi-01", "model")),
        ("vision", "vision/pi-01/front/status", None),  # a camera's status
        ("vision", "vision/pi-01/reply/model/deploy", None),
        ("vision", "other/pi-01/status", None),
        ("vision", "vision/fleet/status", None),
    ],
)
def test_parse_topic(prefix, topic, expected):
    """Only <prefix>/<device>/{status,health,model} are read as fleet rows."""
    assert parse_topic(prefix, topic) == expected


def _health(age_s: float, fps: tuple[float, ...] = (1.0,), depth: int = 0) -> bytes:
    return json.dumps(
        {
            "ts": _ts(-age_s),
            "cameras": {f"c{i}": {"fps_processed": f} for i, f in enumerate(fps)},
            "inference": {"provider": "CPUExecutionProvider"},
            "mqtt": {"spool_depth": depth},
        }
    ).encode()


def _status(state: str, groups: list[str] | None = None) -> bytes:
    body = {"state": state, "boot_id": "b", "version": "0", "ts": _ts(0)}
    if groups is not None:
        body["groups"] = groups
    return json.dumps(body).encode()


MODEL = json.dumps({"name": "yolo", "version": 3, "sha256": "ab", "provider": "CPU"}).encode()


@pytest.mark.parametrize(
    ("retained", "expected"),
    [
        # online, fresh heartbeat, two cameras' fps summed
        (
            {
                ("a", "status"): _status("online", ["g"]),
                ("a", "health"): _health(2, (1.0, 0.5), 4),
                ("a", "model"): MODEL,
            },
            {
                "state": "online",
                "groups": ["g"],
                "model": "yolo",
                "model_version": 3,
                "provider": "CPU",
                "fps": 1.5,
                "spool_depth": 4,
                "heartbeat_age_s": 2.0,
                "stale": False,
            },
        ),
        # online but the heartbeat is old: stale
        (
            {("a", "status"): _status("online"), ("a", "health"): _health(90)},
            {
                "state": "online",
                "groups": [],
                "stale": True,
                "heartbeat_age_s": 90.0,
                "provider": "CPUExecutionProvider",
                "model": None,
            },
        ),
        # online with no heartbeat at all: stale
        ({("a", "status"): _status("online")}, {"stale": True, "heartbeat_age_s": None}),
        # offline (Last Will): flagged by state, never "stale"
        (
            {("a", "status"): _status("offline"), ("a", "health"): _health(90)},
            {"state": "offline", "stale": False},
        ),
        # only a model topic, garbage status: unknown state
        (
            {("a", "status"): b"not json", ("a", "model"): MODEL},
            {"state": "unknown", "model_version": 3, "fps": None},
        ),
    ],
)
def test_build_rows(retained, expected):
    """Each row field comes from the right retained payload; stale/offline flags are right."""
    (row,) = build_rows(retained, NOW, stale_after_s=30)
    got = row.to_json()
    assert got["device"] == "a"
    for key, value in expected.items():
        assert got[key] == value, key


def test_rows_sorted_and_table_flags():
    """Rows come sorted by device; the table flags offline and stale devices."""
    rows = build_rows(
        {
            ("b", "status"): _status("offline"),
            ("a", "status"): _status("online"),
            ("a", "health"): _health(1),
        },
        NOW,
    )
    assert [r.device for r in rows] == ["a", "b"]
    lines = format_table(rows).splitlines()
    assert lines[0].startswith("DEVICE") and lines[2].endswith("OFFLINE")
    assert not lines[1].endswith(("OFFLINE", "STALE"))


@pytest.mark.parametrize(
    ("n", "canary", "factor", "sizes"),
    [
        (10, 1, 2.0, [1, 2, 4, 3]),
        (24, 2, 2.0, [2, 4, 8, 10]),
        (5, 1, 1.0, [1, 1, 1, 1, 1]),
        (3, 5, 2.0, [3]),
        (7, 1, 1.5, [1, 2, 3, 1]),  # ceil(1.5)=2, ceil(3.0)=3
        (0, 1, 2.0, []),
    ],
)
def test_plan_waves(n, canary, factor, sizes):
    """Canary first, then waves growing by the factor; every device exactly once, in order."""
    devices = [f"d{i}" for i in range(n)]
    waves = plan_waves(devices, canary, factor)
    assert [len(w) for w in waves] == sizes
    assert [d for w in waves for d in w] == devices


@pytest.mark.parametrize(("canary", "factor"), [(0, 2.0), (1, 0.5)])
def test_plan_waves_refuses_bad_args(canary, factor):
    """A canary below 1 or a shrinking factor is a user error naming the flag."""
    with pytest.raises(ConfigError, match="--"):
        plan_waves(["a"], canary, factor)


@pytest.mark.parametrize(
    ("states", "pct", "abort"),
    [
        ({"a": "pending"}, 0, False),
        ({"a": "committed", "b": "pending"}, 0, False),
        ({"a": "failed", "b": "pending"}, 0, True),
        ({"a": "timed_out"}, 0, True),
        ({"a": "rolled_back"}, 50, True),
        ({"a": "failed", "b": "committed"}, 50, False),  # 50 % is not more than 50 %
        ({"a": "failed", "b": "committed", "c": "committed"}, 30, True),
        ({"a": "failed", "b": "committed", "c": "committed", "d": "sending"}, 34, False),
    ],
)
def test_should_abort(states, pct, abort):
    """Abort when failed/timed-out/rolled-back share of attempted devices exceeds the limit."""
    assert should_abort(states, pct) is abort


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (None, ("timed_out", None)),
        ({"ok": True, "result": {"state": "committed"}}, ("committed", None)),
        ({"ok": False, "error": {"code": "health_errors"}}, ("failed", "health_errors")),
        ({"ok": False, "error": None}, ("failed", "unknown")),
        ({"ok": True, "result": {"state": "other"}}, ("failed", "not_committed")),
    ],
)
def test_outcome(reply, expected):
    """A device's final state and code from its deploy reply (or its absence)."""
    assert outcome(reply) == expected


def test_state_file_round_trip_and_report(tmp_path: Path):
    """The state file survives a reload; the report maps pending/sending to not_attempted."""
    path = tmp_path / "ro.json"
    st = RolloutState.load_or_new(path, ["a", "b", "c"], "ab" * 32, 4)
    st.devices["a"] = DeviceEntry("committed", None, "id-a", {"url": "u"})
    st.devices["b"] = DeviceEntry("sending", None, "id-b", {"url": "u"})
    st.save(path)
    again = RolloutState.load_or_new(path, ["a", "b", "c", "d"], "ab" * 32, 4)
    assert again.devices["b"].cmd_id == "id-b" and again.devices["d"].state == "pending"
    again.state = "aborted"
    assert again.report() == {
        "state": "aborted",
        "devices": {
            "a": {"state": "committed", "code": None},
            "b": {"state": "not_attempted", "code": None},
            "c": {"state": "not_attempted", "code": None},
            "d": {"state": "not_attempted", "code": None},
        },
    }
    assert [p.name for p in tmp_path.iterdir()] == ["ro.json"]  # no temp file left


@pytest.mark.parametrize(("sha", "version"), [("cd" * 32, 4), ("ab" * 32, 5)])
def test_state_file_of_another_rollout_is_refused(tmp_path: Path, sha, version):
    """Resuming with another model or version is refused, naming the --state file."""
    path = tmp_path / "ro.json"
    RolloutState.load_or_new(path, ["a"], "ab" * 32, 4).save(path)
    with pytest.raises(ConfigError, match="--state"):
        RolloutState.load_or_new(path, ["a"], sha, version)


def test_state_file_garbage_is_refused(tmp_path: Path):
    """An unreadable state file is a one-line error, not a traceback."""
    path = tmp_path / "ro.json"
    path.write_text("{nope")
    with pytest.raises(ConfigError, match="unreadable"):
        RolloutState.load_or_new(path, ["a"], "ab" * 32, 4)
