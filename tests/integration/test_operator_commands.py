"""`edge-agent rollback` and `edge-agent config set` against a real agent on a real broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import main
from agent.commands.config_set import parse_assignments
from agent.errors import ConfigError
from tests.agent_proc import VIDEO, AgentProc, pick_model
from tests.brokers import publish_json, retain_status, wait_until
from tests.update.models import variant

RUNNING = pick_model(320)


def _agent(broker, tmp_path: Path, pub: str | None = None) -> AgentProc:
    cams = [{"id": "front", "source": str(VIDEO), "loop": True, "realtime": False}]
    overrides = {
        "detector": {"model": str(RUNNING)},
        "models": {"trusted_keys": [pub] if pub else [], "health_frames": 5},
        "fleet": {"groups": ["yard"]},
    }
    return AgentProc(broker, tmp_path, cameras=cams, overrides=overrides).start()


def _ready(agent: AgentProc, recorder, broker) -> None:
    rec = recorder(broker, ["vision/dev1/model"])
    assert wait_until(lambda: bool(rec.on("vision/dev1/model")), 60), agent.tail()


def _cli(broker, *args: str) -> int:
    return main([*args, "--broker", f"{broker.host}:{broker.port}"])


@pytest.mark.timeout(120)
def test_config_set_applies_a_patch_and_refuses_a_bad_one(broker, recorder, tmp_path, capsys):
    """config set: a valid patch is applied (exit 0, one line), an invalid one refused (exit 1)."""
    agent = _agent(broker, tmp_path)
    try:
        _ready(agent, recorder, broker)
        rc = _cli(broker, "config", "set", "--device", "dev1",
                  "detector.conf_threshold=0.4", "publish.mode=on_change")  # fmt: skip
        out = capsys.readouterr().out.strip().splitlines()
        assert rc == 0, out
        assert len(out) == 1 and out[0].startswith("dev1: applied: ")
        assert '"conf_threshold":0.4' in out[0] and '"mode":"on_change"' in out[0]
        rc = _cli(broker, "config", "set", "--device", "dev1", "detector.conf_threshold=5")
        out = capsys.readouterr().out.strip().splitlines()
        assert rc == 1
        assert len(out) == 1 and "config set failed: bad_patch" in out[0]
        assert "conf_threshold" in out[0]
        assert agent.logged("config_set")[-1]["patch"] == {
            "detector": {"conf_threshold": 0.4},
            "publish": {"mode": "on_change"},
        }
        # A typo sent by another client (the CLI refuses it before sending): the device's
        # reply names the key it resembles.
        rec = recorder(broker, ["vision/dev1/reply/config/set"])
        typo = {"id": "typo-1", "patch": {"detector": {"conf_treshold": 0.4}}}
        publish_json(broker, "vision/dev1/cmd/config/set", typo)
        assert rec.wait_for(lambda r: bool(r.messages), 15), agent.tail()
        error = rec.messages[-1].json()["error"]
        assert error["code"] == "bad_patch"
        assert "did you mean patch.detector.conf_threshold?" in error["message"]
    finally:
        agent.stop()


@pytest.mark.timeout(180)
def test_rollback_by_group_and_by_device(broker, recorder, tmp_path, capsys):
    """rollback --group with nothing to go back to fails (exit 1); after a push, --device works."""
    assert main(["keygen", "--out", str(tmp_path / "keys"), "--name", "op"]) == 0
    pub = capsys.readouterr().out.strip()
    target = variant(RUNNING, tmp_path / "v2.onnx")
    agent = _agent(broker, tmp_path, pub)
    try:
        _ready(agent, recorder, broker)
        assert _cli(broker, "rollback", "--group", "yard", "--expect", "1") == 1
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1, out
        line = out[0]
        assert line.startswith("dev1: rollback failed: no_previous")
        rc = _cli(broker, "push-model", "--device", "dev1", "--model", str(target),
                  "--key", str(tmp_path / "keys" / "op.key"), "--version", "2")  # fmt: skip
        assert rc == 0, capsys.readouterr()
        capsys.readouterr()
        assert _cli(broker, "rollback", "--device", "dev1") == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1, out
        line = out[0]
        assert "dev1: rolled back to " in line and "(was v2)" in line
    finally:
        agent.stop()


@pytest.mark.timeout(30)
def test_rollback_without_a_device_times_out(broker, capsys):
    """A known device not answering: exit 3 after --timeout, and a line on stderr saying so."""
    retain_status(broker, "ghost", {"state": "offline"})
    assert _cli(broker, "rollback", "--device", "ghost", "--timeout", "0.5") == 3
    assert "no reply to model/rollback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("items", "patch"),
    [
        (["detector.conf_threshold=0.4"], {"detector": {"conf_threshold": 0.4}}),
        (["publish.mode=on_change"], {"publish": {"mode": "on_change"}}),
        (["cameras.front.fps=5"], {"cameras": {"front": {"fps": 5}}}),
        (["detector.classes=[person]"], {"detector": {"classes": ["person"]}}),
        (["detector.classes=null"], {"detector": {"classes": None}}),
        (
            ["detector.conf_threshold=0.3", "detector.iou_threshold=0.5"],
            {"detector": {"conf_threshold": 0.3, "iou_threshold": 0.5}},
        ),
    ],
)
def test_assignments_become_a_patch(items, patch):
    """KEY=VALUE arguments become the nested config/set patch, values read as YAML."""
    assert parse_assignments(items) == patch


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        (["detector.conf_threshold"], "expected KEY=VALUE"),
        (["detector..x=1"], "expected KEY=VALUE"),
        (["a.b=1", "a.b=2"], "given twice"),
        (["a.b=1", "a.b.c=2"], "already a value"),
        (["a=[1"], "not valid YAML"),
    ],
)
def test_bad_assignments_are_refused(items, needle):
    """Malformed KEY=VALUE arguments are refused before anything is sent."""
    with pytest.raises(ConfigError, match=needle):
        parse_assignments(items)
