"""`edge-agent run` end to end: real media, real model, real mosquitto."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import pytest

from agent.messages import DetectionMessage, Heartbeat, ModelInfoMessage, StatusMessage
from tests.agent_proc import MEDIA, VIDEO, AgentProc
from tests.brokers import stop_broker_after_the_subscriber, subscribed_and_saved, wait_until


@pytest.fixture
def agent_factory(tmp_path):
    made: list[AgentProc] = []

    def make(broker, **kwargs) -> AgentProc:
        workdir = tmp_path / f"agent{len(made)}"
        workdir.mkdir()
        proc = AgentProc(broker, workdir, **kwargs)
        made.append(proc)
        return proc.start()

    yield make
    for proc in made:
        proc.close()


def _detections(rec, base: str, camera: str = "front"):
    return [
        DetectionMessage.model_validate_json(m.payload)
        for m in rec.on(f"{base}/{camera}/detections")
    ]


@pytest.mark.timeout(90)
def test_run_publishes_contract_messages(broker, recorder, agent_factory):
    """Detections are schema-valid with people, seq has no gaps, status/model/counts retained."""
    rec = recorder(broker, ["vision/#"])
    agent = agent_factory(broker)
    base = agent.topic_base
    assert rec.wait_for(lambda r: len(r.on(f"{base}/front/detections")) >= 30, 60), agent.tail()
    dets = _detections(rec, base)
    seqs = [d.seq for d in dets]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "seq must have no gaps"
    assert seqs[0] == 0
    assert len({d.boot_id for d in dets}) == 1
    assert any(x.label == "person" for d in dets for x in d.detections)
    first = dets[0]
    assert first.image_wh == (768, 576)
    assert first.model.sha256 and first.latency_ms.inference > 0
    for d in dets:
        for x in d.detections:
            assert 0 <= x.xyxy[0] <= x.xyxy[2] <= 768
            assert 0 <= x.xyxy[1] <= x.xyxy[3] <= 576
            assert x.keypoints is not None and len(x.keypoints) == 17
    status = [StatusMessage.model_validate_json(m.payload) for m in rec.on(f"{base}/status")]
    assert status[-1].state == "online"
    assert rec.wait_for(lambda r: bool(r.on(f"{base}/health")), 10)
    Heartbeat.model_validate_json(rec.on(f"{base}/health")[-1].payload)

    # A late subscriber sees the retained state.
    late = recorder(broker, [f"{base}/status", f"{base}/model", f"{base}/front/+"])
    # Each retained topic is its own PUBLISH: wait for every one this test reads, not only
    # the first that comes.
    wanted = [f"{base}/status", f"{base}/model", f"{base}/front/person", f"{base}/front/status"]
    assert late.wait_for(lambda r: all(r.on(t) for t in wanted), 10), [
        m.topic for m in late.messages
    ]
    assert all(m.retain for m in late.on(f"{base}/status"))
    assert StatusMessage.model_validate_json(late.on(f"{base}/status")[0].payload).state == "online"
    model = ModelInfoMessage.model_validate_json(late.on(f"{base}/model")[0].payload)
    assert model.sha256 == first.model.sha256
    assert model.labels == ["person"]
    assert late.on(f"{base}/front/person")[0].payload.decode().isdigit()
    assert late.on(f"{base}/front/status")[0].json()["state"] == "streaming"

    # Its threads carry their names to the OS: top -H, ps -L and bench/threads.py see them.
    if Path("/proc/thread-self/comm").exists():
        assert agent.proc is not None
        tasks = Path(f"/proc/{agent.proc.pid}/task")
        names = set()
        for task in tasks.iterdir():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                names.add((task / "comm").read_text().strip())
        want = {"infer-0", "cap-front", "cam-front", "mqtt-sender", "mqtt-net", "commands"}
        assert want <= names, sorted(names)

    # SIGTERM: graceful, `stopped` retained.
    assert agent.stop(15) == 0
    assert rec.wait_for(lambda r: r.on(f"{base}/status")[-1].json()["state"] == "stopped", 5)
    after = recorder(broker, [f"{base}/status"])
    assert after.wait_for(lambda r: bool(r.on(f"{base}/status")), 5)
    assert after.on(f"{base}/status")[0].json()["state"] == "stopped"


@pytest.mark.timeout(60)
def test_sigkill_publishes_offline_will(broker, recorder, agent_factory):
    """A SIGKILLed agent's Last Will marks it offline (retained)."""
    rec = recorder(broker, ["vision/+/status"])
    agent = agent_factory(broker, device_id="killme")
    base = agent.topic_base
    assert rec.wait_for(
        lambda r: any(m.json()["state"] == "online" for m in r.on(f"{base}/status")), 30
    )
    agent.signal(signal.SIGKILL)
    agent.wait(5)
    assert rec.wait_for(lambda r: r.on(f"{base}/status")[-1].json()["state"] == "offline", 10)


@pytest.mark.timeout(90)
def test_two_cameras_and_a_dead_one(broker, recorder, agent_factory, tmp_path: Path):
    """Two cameras are both served; a camera that never opens does not stop them."""
    images = tmp_path / "photos"
    images.mkdir()
    for name in ("bus.jpg", "zidane.jpg"):
        (images / name).write_bytes((MEDIA / name).read_bytes())
    cams = [
        {"id": "street", "source": str(VIDEO), "loop": True},
        {"id": "photos", "source": str(images), "loop": True, "fps": 4},
        {"id": "dead", "source": str(tmp_path / "missing.mp4"), "reconnect_max_s": 1.0},
    ]
    rec = recorder(broker, ["vision/#"])
    # A slideshow is no camera for motion regions: the whole frame, every frame.
    agent = agent_factory(broker, cameras=cams, overrides={"detector": {"regions": "full"}})
    base = agent.topic_base
    ok = rec.wait_for(
        lambda r: (
            len(r.on(f"{base}/street/detections")) >= 10
            and len(r.on(f"{base}/photos/detections")) >= 4
        ),
        60,
    )
    assert ok, agent.tail()
    photos = _detections(rec, base, "photos")
    assert {d.image_wh for d in photos} == {(810, 1080), (1280, 720)}
    assert all(len(d.detections) >= 2 for d in photos)
    dead = [m.json()["state"] for m in rec.on(f"{base}/dead/status")]
    assert dead and set(dead) <= {"reconnecting", "offline"}
    assert agent.stop(15) == 0


@pytest.mark.timeout(90)
def test_starts_without_broker_and_delivers_later(mosquitto, recorder, agent_factory):
    """With no broker the agent keeps detecting, logs the outage once, and delivers later."""
    broker = mosquitto()
    rec = subscribed_and_saved(broker, recorder, ["vision/dev1/front/detections"])
    broker.stop()  # the subscriber's session survives on disk
    agent = agent_factory(broker)
    base = agent.topic_base
    assert agent.wait_logged("mqtt_unreachable", 20), agent.tail()
    assert wait_until(lambda: len(agent.logged("summary")) >= 2, 20)
    assert len(agent.logged("mqtt_unreachable")) == 1
    broker.start()
    assert rec.wait_for(lambda r: len(r.on(f"{base}/front/detections")) >= 20, 40), agent.tail()
    seqs = rec.seqs(f"{base}/front/detections")
    assert seqs[0] == 0, "messages from before the broker came up are delivered, in order"
    assert set(range(max(seqs) + 1)) == set(seqs), "no gaps"
    assert agent.stop(15) == 0


@pytest.mark.timeout(120)
def test_agent_sigkilled_in_outage_delivers_spool_after_restart(mosquitto, recorder, agent_factory):
    """Messages spooled before a SIGKILL during an outage are delivered after a restart."""
    broker = mosquitto()
    rec = subscribed_and_saved(broker, recorder, ["vision/dev1/front/detections"])
    broker.stop()
    first = agent_factory(broker)
    assert wait_until(lambda: len(first.logged("summary")) >= 2, 30), first.tail()
    first.signal(signal.SIGKILL)
    first.wait(5)
    spool = first.state_dir / "spool.db"
    assert spool.exists()
    broker.start()
    second = AgentProc(broker, first.workdir, device_id="dev1")
    second.config_path.write_text(first.config_path.read_text())
    second.start()
    try:
        topic = "vision/dev1/front/detections"
        boots: dict[str, set[int]] = {}

        def first_boot_complete(r) -> bool:
            boots.clear()
            for m in r.on(topic):
                body = m.json()
                boots.setdefault(body["boot_id"], set()).add(body["seq"])
            return len(boots) >= 2

        assert rec.wait_for(first_boot_complete, 60), second.tail()
        old_boot = next(b for b in boots if b != rec.on(topic)[-1].json()["boot_id"])
        old = boots[old_boot]
        assert min(old) == 0
        assert old == set(range(max(old) + 1)), "every spooled message of the killed agent"
        assert len(old) >= 10
    finally:
        second.stop(15)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_broker_restart_mid_stream_loses_nothing(mosquitto, recorder, agent_factory, sig):
    """The broker dies mid-stream for ~2 s: every seq of the agent's stream still arrives."""
    broker = mosquitto()
    topic = "vision/dev1/front/detections"
    rec = subscribed_and_saved(broker, recorder, [topic])
    agent = agent_factory(broker)
    assert rec.wait_for(lambda r: len(r.on(topic)) >= 10, 60), agent.tail()
    # Once the subscriber holds all the broker acked: a SIGKILL loses what the broker
    # acked but had not handed on, the broker's loss, not the agent's.
    stop_broker_after_the_subscriber(broker, agent, rec, sig)
    assert broker.persistence_file.exists()
    time.sleep(2.0)
    broker.start()
    assert rec.wait_for(lambda r: max(r.seqs(topic), default=0) >= 60, 60), agent.tail()
    assert agent.stop(15) == 0
    seqs = rec.seqs(topic)
    assert set(seqs) == set(range(max(seqs) + 1)), "a seq went missing across the outage"
    assert len(seqs) - len(set(seqs)) <= 70  # duplicates are possible (at-least-once), few


@pytest.mark.timeout(120)
def test_http_stream_killed_and_restarted(broker, recorder, agent_factory):
    """An MJPEG camera that dies and comes back: reconnecting -> streaming, detections resume."""
    from tests.integration._capture_tools import MjpegServer, vtest_jpegs

    server = MjpegServer(vtest_jpegs(40), fps=10).start()
    cams = [
        {"id": "ipcam", "source": server.url, "read_timeout_s": 2, "open_timeout_s": 2,
         "stall_timeout_s": 3, "reconnect_max_s": 1},
    ]  # fmt: skip
    rec = recorder(broker, ["vision/dev1/ipcam/#"])
    agent = agent_factory(broker, cameras=cams)
    det, status = "vision/dev1/ipcam/detections", "vision/dev1/ipcam/status"
    try:
        assert rec.wait_for(lambda r: len(r.on(det)) >= 10, 60), agent.tail()
        server.kill()
        assert rec.wait_for(lambda r: r.on(status)[-1].json()["state"] == "reconnecting", 20)
        n = len(rec.on(det))
        server.start()
        assert rec.wait_for(lambda r: r.on(status)[-1].json()["state"] == "streaming", 30)
        assert rec.wait_for(lambda r: len(r.on(det)) >= n + 10, 30), agent.tail()
        states = [m.json()["state"] for m in rec.on(status)]
        assert states[-2:] == ["reconnecting", "streaming"]
        seqs = rec.seqs(det)
        assert seqs == list(range(len(seqs))), "one agent process throughout: seq continues"
    finally:
        server.kill()
        assert agent.stop(15) == 0
