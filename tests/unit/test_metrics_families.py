"""Prometheus families from a heartbeat: what changes is a gauge, info only what never does."""

from __future__ import annotations

import time

import pytest

from agent.messages import Heartbeat, utc_ts
from agent.service.metrics import STATES, heartbeat_families

pytest.importorskip("prometheus_client")


def _heartbeat(state: str) -> Heartbeat:
    return Heartbeat.model_validate(
        {
            "schema": "edge-vision/health/1",
            "device": "pi-01",
            "boot_id": "b",
            "ts": utc_ts(time.time()),
            "uptime_s": 1.0,
            "version": "0.1.0",
            "state": state,
            "cameras": {},
            "inference": {
                "provider": "CPUExecutionProvider",
                "model_sha256": "ab",
                "latency_ms": {"p50": None, "p95": None, "p99": None},
            },
            "mqtt": {
                "connected": True,
                "spool_depth": 0,
                "spool_bytes": 0,
                "published": 5,
                "dropped_overflow": 0,
                "dropped_expired": 0,
                "rejected_oversize": 0,
            },
            "system": {"cpu_percent": 1.0, "rss_mb": 1.0, "temp_c": None, "load1": 0.0},
            "commands": {"received": 4, "rejected": 3, "unsigned_command": 2},
        }
    )


def _samples(hb: Heartbeat) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in heartbeat_families(hb):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


@pytest.mark.parametrize("state", STATES)
def test_state_is_a_gauge_with_one_series_per_state(state):
    """edge_agent_state has a 0/1 series for every state; the 1 is on the current one."""
    series = _samples(_heartbeat(state))["edge_agent_state"]
    assert {labels["state"]: v for labels, v in series} == {s: float(s == state) for s in STATES}


def test_info_carries_nothing_that_changes_in_a_process():
    """edge_agent_info is the same series whatever the state: no state label."""
    running, degraded = (
        _samples(_heartbeat(s))["edge_agent_info"] for s in ("running", "degraded")
    )
    assert running == degraded == [({"version": "0.1.0"}, 1.0)]


def test_published_help_says_what_it_counts_and_commands_are_counted():
    """published_total's help names detections and events; refusals are counted per code."""
    families = {f.name: f for f in heartbeat_families(_heartbeat("running"))}
    assert "detections and events" in families["edge_agent_published"].documentation
    refused = {s.labels["code"]: s.value for s in families["edge_agent_commands_refused"].samples}
    assert refused["unsigned_command"] == 2 and refused["other"] == 1
