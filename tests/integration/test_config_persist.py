"""Runtime config changes survive a restart; `config show` and `config reset` on a real agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main
from tests.brokers import wait_until
from tests.integration.test_commands import Operator
from tests.integration.test_objects import start_agent
from tests.objects_clip import write_folder

LEFT = {"polygon": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "objects": ["person"]}
LEFT_TOPIC = "vision/dev1/front/zones/left/person"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_folder(tmp_path_factory.mktemp("clip") / "frames")


def _cli(broker, capsys, *args: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = main([*args, "--broker", f"{broker.host}:{broker.port}", "--device", "dev1"])
    return rc, capsys.readouterr().out.splitlines()


@pytest.mark.timeout(90)
def test_config_set_survives_restart_and_reset_restores_file(
    broker,
    recorder,
    tmp_path: Path,
    clip: Path,
    capsys,
) -> None:
    """conf_threshold and a zone set at run time are in force after SIGTERM and a new start;
    config/get names them runtime; config reset brings the file's values back live; an
    unwritable store still applies a change and says it will not survive a restart."""
    rec = recorder(broker, ["vision/dev1/front/zones/#"])
    agent = start_agent(broker, tmp_path, clip)
    op = Operator(broker, agent.topic_base)
    try:
        assert agent.wait_logged("agent_started", 30), agent.tail()
        patch = {
            "detector": {"conf_threshold": 0.6},
            "cameras": {"front": {"zones": {"left": LEFT}}},
        }
        reply = op.call("config/set", {"id": "s1", "patch": patch})
        assert reply["ok"] and reply["result"]["persisted"] is True, reply
    finally:
        op.close()
        assert agent.stop() == 0
    stored = json.loads((agent.state_dir / "overrides.json").read_text())
    assert set(stored["overrides"]) == {"detector.conf_threshold", "cameras.front.zones.left"}

    before = len(rec.on(LEFT_TOPIC))
    agent.start()
    op = Operator(broker, agent.topic_base)
    try:
        assert agent.wait_logged("overrides_applied", 30), agent.tail()
        # The zone added at run time exists again: the new process publishes its count.
        assert wait_until(lambda: len(rec.on(LEFT_TOPIC)) > before, 30), agent.tail()
        values = op.call("config/get", {"id": "g1"})["result"]["values"]
        assert values["detector.conf_threshold"]["value"] == 0.6
        assert values["detector.conf_threshold"]["source"] == "runtime"
        assert values["detector.conf_threshold"]["base"] == 0.25
        assert values["detector.conf_threshold"]["ts"].endswith("Z")
        assert values["cameras.front.zones.left"]["source"] == "runtime"
        assert values["cameras.front.zones.right"]["source"] == "file"
        rc, out = _cli(broker, capsys, "config", "show")
        assert rc == 0 and any("detector.conf_threshold = 0.6  [runtime" in o for o in out), out

        rc, out = _cli(broker, capsys, "config", "reset")
        assert rc == 0, out
        assert "detector.conf_threshold" in out[-1] and "cameras.front.zones.left" in out[-1]
        values = op.call("config/get", {"id": "g2"})["result"]["values"]
        assert values["detector.conf_threshold"] == {"value": 0.25, "source": "file"}
        assert "cameras.front.zones.left" not in values
        # The zone is gone live: its retained count is cleared.
        assert wait_until(lambda: rec.on(LEFT_TOPIC)[-1].payload == b"", 10)
        assert not (agent.state_dir / "overrides.json").exists()
        # A store that cannot be written: the change applies, and the reply says it won't last.
        (agent.state_dir / "overrides.json").mkdir()
        reply = op.call("config/set", {"id": "s2", "conf_threshold": 0.7})
        assert reply["ok"] and reply["result"]["persisted"] is False, reply
        assert "will not survive a restart" in reply["result"]["warning"]
        values = op.call("config/get", {"id": "g3"})["result"]["values"]
        assert values["detector.conf_threshold"]["value"] == 0.7
    finally:
        op.close()
        assert agent.stop() == 0
