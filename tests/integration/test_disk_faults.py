"""The real agent with state_dir on a small real tmpfs: full, read-only, and freed again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agent_proc import AgentProc
from tests.brokers import Recorder, wait_until
from tests.tmpfs import fill, remount_read_only, tmpfs

DET = "vision/dev1/front/detections"
EVENTS = "vision/dev1/front/events"
HEALTH = "vision/dev1/health"


def last_health(rec: Recorder) -> dict[str, Any]:
    msgs = rec.on(HEALTH)
    return json.loads(msgs[-1].payload) if msgs else {}


def no_traceback(agent: AgentProc) -> None:
    assert "Traceback" not in agent.log_path.read_text(errors="replace"), agent.tail()


def freed_then_running(rec: Recorder, filler: Path, agent: AgentProc) -> None:
    """Free the disk: health goes back to running, with no reason."""
    filler.unlink()
    assert rec.wait_for(lambda r: last_health(r).get("state") == "running", 20), (
        last_health(rec),
        agent.tail(),
    )
    assert last_health(rec).get("reason") is None


@pytest.fixture
def small_state(tmp_path: Path):
    with tmpfs(tmp_path / "state", "4m") as d:
        yield d


@pytest.mark.timeout(90)
def test_start_on_full_disk_publishes_degraded_then_running(
    broker, recorder, small_state, tmp_path
):
    """state_dir full to the last byte: detections flow, degraded with why, running once freed."""
    filler = fill(small_state)
    rec = recorder(broker, [DET, HEALTH])
    agent = AgentProc(broker, tmp_path).start()
    try:
        assert rec.wait_for(lambda r: len(r.on(DET)) >= 5, 40), agent.tail()
        assert rec.wait_for(lambda r: last_health(r).get("state") == "degraded", 10)
        hb = last_health(rec)
        assert hb["reason"] == f"disk_full: state_dir {small_state} has 0 B free", hb
        freed_then_running(rec, filler, agent)
        assert (small_state / "spool.db").exists()
        n = len(rec.on(DET))
        assert rec.wait_for(lambda r: len(r.on(DET)) > n + 5, 10)
        assert agent.stop() == 0
        no_traceback(agent)
    finally:
        agent.close()


@pytest.mark.timeout(90)
def test_objects_state_not_written_is_degraded_with_why_until_space_returns(
    broker, recorder, small_state, tmp_path
):
    """No spool (nothing else tells): a full state_dir leaves objects.json behind the events
    that went out; health says degraded and why, and running once the file has caught up."""
    filler = fill(small_state)
    rec = recorder(broker, [EVENTS, HEALTH])
    agent = AgentProc(broker, tmp_path, overrides={"spool": {"enabled": False}}).start()
    try:
        assert rec.wait_for(lambda r: len(r.on(EVENTS)) >= 1, 40), agent.tail()
        why = f"disk_full: state_dir {small_state} has 0 B free (objects.json not written)"
        assert rec.wait_for(lambda r: last_health(r).get("reason") == why, 10), last_health(rec)
        assert last_health(rec)["state"] == "degraded"
        assert not (small_state / "objects.json").exists()
        freed_then_running(rec, filler, agent)
        assert (small_state / "objects.json").exists()
        assert agent.stop() == 0
        no_traceback(agent)
    finally:
        agent.close()


@pytest.mark.timeout(60)
def test_start_on_read_only_state_dir_is_degraded_not_a_traceback(
    broker, recorder, small_state, tmp_path
):
    """A read-only state_dir: detections flow, health says read_only, no traceback."""
    remount_read_only(small_state)
    rec = recorder(broker, [DET, HEALTH])
    agent = AgentProc(broker, tmp_path).start()
    try:
        assert rec.wait_for(lambda r: len(r.on(DET)) >= 5, 40), agent.tail()
        assert rec.wait_for(lambda r: last_health(r).get("state") == "degraded", 10)
        assert last_health(rec)["reason"] == f"read_only: state_dir {small_state} is read-only"
        assert agent.stop() == 0
        no_traceback(agent)
    finally:
        agent.close()


@pytest.mark.timeout(90)
def test_outage_on_small_disk_counts_every_missing_seq(broker, recorder, small_state, tmp_path):
    """Broker away with ~1.2 MB free: every detection seq missing afterwards is counted."""
    filler = fill(small_state)
    # Leave the reserve, the WAL allowance and room for about 150 KB of rows.
    with open(filler, "r+b") as f:
        f.truncate(max(0, filler.stat().st_size - 1_250_000))
    rec = recorder(broker, [DET, HEALTH])
    agent = AgentProc(broker, tmp_path, overrides={"objects": {"enabled": False}}).start()
    try:
        assert rec.wait_for(lambda r: len(r.on(DET)) >= 5, 40), agent.tail()
        broker.stop()
        assert wait_until(lambda: bool(agent.logged("spool_disk_low")), 30), agent.tail()
        before = len(rec.on(HEALTH))
        broker.start()

        def drained(r: Recorder) -> bool:
            hb = last_health(r)
            m = hb.get("mqtt", {})
            return len(r.on(HEALTH)) > before and m["connected"] and m["spool_depth"] == 0

        assert rec.wait_for(drained, 30), agent.tail()
        seqs = sorted(set(rec.seqs(DET)))
        m = last_health(rec)["mqtt"]
        counted = (
            m["dropped_disk_full"]
            + m["dropped_overflow"]
            + m["dropped_expired"]
            + m["rejected_oversize"]
        )
        missing = (seqs[-1] - seqs[0] + 1) - len(seqs)
        assert m["dropped_disk_full"] > 0, (agent.logged("spool_disk_low"), m)
        assert missing == counted, (missing, m)
        n = len(seqs)
        assert rec.wait_for(lambda r: len(set(r.seqs(DET))) > n + 10, 15)
        assert agent.stop() == 0
        no_traceback(agent)
    finally:
        agent.close()
