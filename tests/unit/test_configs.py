"""Every shipped config file is valid, and config errors are one actionable line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    """configs/*.yaml load without errors."""
    settings = load_settings(path)
    assert settings.cameras


@pytest.mark.parametrize(
    ("yaml_text", "env", "needle"),
    [
        ("detector: {conf_threshold: 2}", {}, "detector.conf_threshold = 2"),
        ("mqtt: {port: 0}", {}, "mqtt.port = 0"),
        ("mqtt: {prot: 5}", {}, "mqtt.prot"),
        ("cameras: [{id: 'bad id', source: x}]", {}, "cameras.0.id"),
        ("cameras: [{id: a, source: x}, {id: a, source: y}]", {}, "repeated: a"),
        ("", {"EDGE_AGENT__MQTT__PORT": "notaport"}, "mqtt.port"),
        ("detector: {providers: [auto, cuda]}", {}, "'auto' cannot be combined"),
        ("- just\n- a list", {}, "top level must be a mapping"),
        ("mqtt: {tls: {cert: a.pem}}", {}, "tls.cert and tls.key"),
    ],
)
def test_bad_config_is_one_line_naming_field(tmp_path, monkeypatch, yaml_text, env, needle):
    """A bad value raises ConfigError with one line naming the field and the rule."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert needle in message


def test_env_overrides_yaml(tmp_path, monkeypatch):
    """EDGE_AGENT__SECTION__KEY overrides the file and merges with its other keys."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("mqtt: {host: broker.lan, port: 1883}\n")
    monkeypatch.setenv("EDGE_AGENT__MQTT__PORT", "1884")
    monkeypatch.setenv("EDGE_AGENT__DETECTOR__CONF_THRESHOLD", "0.4")
    s = load_settings(cfg)
    assert (s.mqtt.host, s.mqtt.port, s.detector.conf_threshold) == ("broker.lan", 1884, 0.4)


def test_cli_bad_config_exits_nonzero_with_one_line(tmp_path):
    """`edge-agent run` with a bad config exits 2 with one line on stderr."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("detector: {iou_threshold: -1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "detector.iou_threshold" in lines[0]


def test_missing_config_file_is_clear(tmp_path):
    """An explicit --config that does not exist says so."""
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.yaml")
