"""Only the operator steers: signed commands and safe ResponseTopics on a running agent."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from agent.cli import main
from agent.messages import Heartbeat
from agent.update.command_auth import sign_command
from agent.update.keys import public_key_b64
from tests.agent_proc import AgentProc, pick_model
from tests.brokers import free_port, wait_until
from tests.integration.test_commands import Operator

KEY = Ed25519PrivateKey.generate()


def _keypair(tmp_path: Path) -> tuple[Path, str]:
    """A key made as an operator makes one: `edge-agent keygen`."""
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--name", "op"]) == 0
    return tmp_path / "keys" / "op.key", (tmp_path / "keys" / "op.pub").read_text().strip()


def _flowing(rec, agent, seconds: float = 1.5) -> bool:
    """Detections keep arriving: the device was not paused."""
    topic = f"{agent.topic_base}/front/detections"
    n = len(rec.on(topic))
    return rec.wait_for(lambda r: len(r.on(topic)) >= n + 3, seconds + 10)


def _paused(rec, agent) -> bool:
    topic = f"{agent.topic_base}/front/detections"
    return rec.stopped(lambda r: len(r.on(topic))) is not None


def _health(rec, agent) -> Heartbeat:
    return Heartbeat.model_validate_json(rec.on(f"{agent.topic_base}/health")[-1].payload)


@pytest.fixture
def guarded(broker, recorder, tmp_path: Path):
    rec = recorder(broker, ["vision/dev1/#"])
    agent = AgentProc(
        broker,
        tmp_path,
        overrides={
            "commands": {
                "require_signature": True,
                "trusted_keys": [public_key_b64(KEY.public_key())],
            }
        },
    ).start()
    op = Operator(broker, agent.topic_base)
    det = f"{agent.topic_base}/front/detections"
    assert rec.wait_for(lambda r: len(r.on(det)) >= 5, 60), agent.tail()
    yield agent, op, rec
    op.close()
    agent.close()


@pytest.mark.timeout(120)
def test_only_signed_fresh_commands_for_this_device_steer_it(guarded):
    """Unsigned, replayed and other-device pauses change nothing; a signed one pauses."""
    agent, op, rec = guarded
    base = agent.topic_base

    unsigned = op.call("pause", {"id": "u1"})
    assert unsigned["error"]["code"] == "unsigned_command"
    assert _flowing(rec, agent)

    elsewhere = op.call("pause", sign_command(KEY, "vision/dev2/cmd/pause", {"id": "o1"}))
    assert elsewhere["error"]["code"] == "bad_signature"
    assert _flowing(rec, agent)

    pause = sign_command(KEY, f"{base}/cmd/pause", {"id": "p1"})
    assert op.call("pause", pause)["ok"] is True
    assert _paused(rec, agent)
    assert op.call("resume", sign_command(KEY, f"{base}/cmd/resume", {"id": "r1"}))["ok"]
    assert _flowing(rec, agent)

    replay = op.call("pause", pause)
    assert replay["error"]["code"] == "replayed_command"
    assert _flowing(rec, agent)

    def counted() -> bool:
        c = _health(rec, agent).commands
        return c is not None and (c.unsigned_command, c.bad_signature, c.replayed_command) == (
            1,
            1,
            1,
        )

    assert wait_until(counted, 10), _health(rec, agent).commands


@pytest.mark.timeout(120)
def test_resume_whose_response_topic_is_a_command_topic_changes_nothing(broker, recorder, tmp_path):
    """Without signatures too: a reply aimed at cmd/pause is refused, the device runs on."""
    rec = recorder(broker, ["vision/dev1/#"])
    agent = AgentProc(broker, tmp_path).start()
    op = Operator(broker, agent.topic_base)
    try:
        assert _flowing(rec, agent), agent.tail()
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = f"{agent.topic_base}/cmd/pause"
        props.CorrelationData = uuid.uuid4().bytes
        op.client.publish(
            f"{agent.topic_base}/cmd/resume",
            json.dumps({"id": "evil"}).encode(),
            qos=1,
            properties=props,
        )
        assert wait_until(lambda: any(r.get("id") == "evil" for r in op.plain), 15)
        (reply,) = [r for r in op.plain if r.get("id") == "evil"]
        assert reply["error"]["code"] == "bad_response_topic"
        assert _flowing(rec, agent, 3.0)
        assert not [m for m in rec.on(f"{agent.topic_base}/cmd/pause")]
    finally:
        op.close()
        agent.close()


@pytest.mark.timeout(150)
def test_operator_cli_signs_with_key(broker, recorder, tmp_path: Path, capsys):
    """pause, resume, config set and rollback from `edge-agent ... --key` are applied on a
    device that requires signatures; the same without --key is refused."""
    key, pub = _keypair(tmp_path)
    rec = recorder(broker, ["vision/dev1/#"])
    agent = AgentProc(
        broker,
        tmp_path,
        # commands.trusted_keys unset: the model publishers' keys steer too.
        overrides={"commands": {"require_signature": True}, "models": {"trusted_keys": [pub]}},
    ).start()
    where = ["--broker", f"{broker.host}:{broker.port}", "--device", "dev1"]
    try:
        assert _flowing(rec, agent), agent.tail()
        capsys.readouterr()
        assert main(["pause", *where]) == 1
        assert "unsigned_command" in capsys.readouterr().out
        assert _flowing(rec, agent)
        assert main(["pause", *where, "--key", str(key)]) == 0
        assert _paused(rec, agent)
        assert main(["resume", *where, "--key", str(key)]) == 0
        assert _flowing(rec, agent)
        assert (
            main(["config", "set", *where, "--key", str(key), "detector.conf_threshold=0.3"]) == 0
        )
        assert "applied" in capsys.readouterr().out
        # A device with no previous model refuses the rollback itself: the signature passed.
        assert main(["rollback", *where, "--key", str(key)]) == 1
        out = capsys.readouterr().out
        assert "unsigned_command" not in out and "bad_signature" not in out, out
        # A deploy (push-model, fleet rollout) is signed with the model's --key: the device
        # gets as far as fetching the file, from a port where nothing listens.
        model = ["--key", str(key), "--model", str(pick_model()), "--version", "99"]
        url = f"http://127.0.0.1:{free_port()}/m.onnx"
        assert main(["push-model", *where, *model, "--via", "url", url, "--timeout", "30"]) == 1
        out = capsys.readouterr().out
        assert '"ok": false' in out and "unsigned_command" not in out, out
        rollout = ["fleet", "rollout", "--broker", f"{broker.host}:{broker.port}", "--json"]
        rollout += [*model, "--devices", "dev1", "--url", url, "--device-timeout", "30"]
        main(rollout)
        report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        code = report["devices"]["dev1"]["code"]
        assert report["devices"]["dev1"]["state"] == "failed" and code not in (
            "unsigned_command",
            "bad_signature",
            "replayed_command",
        ), report
    finally:
        agent.close()
