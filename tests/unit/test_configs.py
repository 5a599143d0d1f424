"""Every shipped config file is valid, and config errors are one actionable line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


@pytest.mark.parametrize(
    ("env", "var"),
    [
        ({"EDGE_AGENT__DETECTOR__CONF_THRESHOLD": "5"}, "EDGE_AGENT__DETECTOR__CONF_THRESHOLD"),
        ({"edge_agent__mqtt__port": "0"}, "edge_agent__mqtt__port"),
        ({"EDGE_AGENT__MQTT": '{"port": 0}'}, "EDGE_AGENT__MQTT"),
    ],
)
def test_bad_environment_value_names_the_variable(tmp_path, monkeypatch, env, var):
    """A bad EDGE_AGENT__* value is blamed on that environment variable, not the file."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = tmp_path / "my.yaml"
    cfg.write_text("mqtt: {host: broker.lan}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    message = str(err.value)
    assert message.startswith(f"invalid environment variable {var}: ")
    assert "my.yaml" not in message


def test_bad_file_value_still_names_the_file(tmp_path, monkeypatch):
    """With an unrelated valid override set, a bad value in the file names the file."""
    monkeypatch.setenv("EDGE_AGENT__MQTT__PORT", "1884")
    cfg = tmp_path / "my.yaml"
    cfg.write_text("detector: {conf_threshold: 5}\n")
    with pytest.raises(ConfigError, match=r"^invalid config .*my\.yaml: detector\.conf"):
        load_settings(cfg)


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("cameras: [{id: usb, source: 0}]", 'write source: "0" or source: /dev/video0'),
        ("cameras: [{id: usb, source: 2}]", 'source: "2" or source: /dev/video2'),
        ("mqtt: {prot: 5}", "did you mean 'port'?"),
        ("mqtt: {hots: broker.lan}", "did you mean 'host'?"),
        ("detector: {conf_treshold: 0.4}", "did you mean 'conf_threshold'?"),
        ("cameras: [{id: a, source: x, sorce: y}]", "did you mean 'source'?"),
        ("mqtt: {tls: {cafile: a.pem}}", "known keys: ca, cert, key, insecure"),
        ("mqtt: {zzz: 1}", "known keys: host, port,"),
        ("detectr: {conf_threshold: 0.4}", "did you mean 'detector'?"),
        ("mqtt:\n  host: a\n port: 1\n", "line 3, column 2"),
        ("mqtt: {host: [unclosed\n", "line 2, column 1"),
    ],
)
def test_common_mistakes_get_a_hint(tmp_path, yaml_text, needle):
    """An unquoted camera index, a misspelt key and broken YAML each get a one-line hint."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert needle in message


def test_native_log_level_is_a_setting(tmp_path, monkeypatch):
    """native_log_level takes OpenCV/FFmpeg levels and refuses others, from file or env."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("native_log_level: warning\n")
    assert load_settings(cfg).native_log_level == "warning"
    monkeypatch.setenv("EDGE_AGENT__NATIVE_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError, match="EDGE_AGENT__NATIVE_LOG_LEVEL"):
        load_settings(cfg)


@pytest.mark.parametrize(
    ("detector", "whole", "live"),
    [
        ({}, "yolo11n-pose-640-int8.onnx", "yolo11n-pose-320-int8.onnx"),
        ({"regions": "full"}, "yolo11n-pose-640-int8.onnx", "yolo11n-pose-640-int8.onnx"),
        ({"model": "my.onnx"}, "my.onnx", "my.onnx"),
        ({"model": "my.onnx", "regions": "full"}, "my.onnx", "my.onnx"),
    ],
)
def test_each_look_gets_its_model(tmp_path, detector, whole, live):
    """Whole looks get the 640 model, region sheets the 320; a named model is used for all."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml.safe_dump({"detector": detector}))
    ds = load_settings(cfg).detector
    assert ds.model_for("whole").name == whole
    assert ds.live_model.name == live


def test_embedded_config_names_no_model():
    """configs/agent.yaml leaves detector.model to each look (photos get the 640 model)."""
    ds = load_settings(ROOT / "configs" / "agent.yaml").detector
    assert ds.model is None and ds.model_for("whole").name == "yolo11n-pose-640-int8.onnx"


def test_several_errors_are_all_shown_one_line_each(tmp_path, monkeypatch):
    """Every invalid value gets its own line naming source, key, value and rule."""
    monkeypatch.setenv("EDGE_AGENT__DETECTOR__IOU_THRESHOLD", "7")
    cfg = tmp_path / "my.yaml"
    cfg.write_text("mqtt: {port: 0, keepalive_s: 1}\ndetector: {conf_threshold: 2}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    lines = str(err.value).splitlines()
    assert "more)" not in str(err.value)
    assert len(lines) == 4
    origin = f"invalid config {cfg}: "
    assert f"{origin}mqtt.port = 0: Input should be greater than or equal to 1" in lines
    assert any(line.startswith(f"{origin}mqtt.keepalive_s = 1: ") for line in lines)
    assert any(line.startswith(f"{origin}detector.conf_threshold = 2: ") for line in lines)
    env = "invalid environment variable EDGE_AGENT__DETECTOR__IOU_THRESHOLD: "
    assert any(line.startswith(f"{env}detector.iou_threshold = '7': ") for line in lines)


@pytest.mark.parametrize(
    "yaml_text",
    [
        "mqtt: {password: [hunter2-secret], port: 0}",
        "mqtt: {pasword: hunter2-secret, port: 0}",
        "models: {trusted_keys: hunter2-secret, max_bytes: 1}",
    ],
)
def test_secret_values_are_never_echoed(tmp_path, yaml_text):
    """A bad or misspelt password/key field shows *** instead of its value."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    message = str(err.value)
    assert "hunter2" not in message
    assert " = ***: " in message
    assert len(message.splitlines()) == 2


def test_cli_prints_every_config_error(tmp_path):
    """`edge-agent run` names every config error (journald: one JSON line), exit 2."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("mqtt: {port: 0, password: 5}\ndetector: {iou_threshold: -1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    # Not a terminal: one JSON line (journald) that names every error.
    (line,) = proc.stderr.strip().splitlines()
    failed = json.loads(line)
    assert failed["event"] == "agent_failed" and failed["level"] == "error"
    lines = failed["errors"]
    assert len(lines) == 3
    assert all(line.startswith("invalid config ") for line in lines)
    assert any("mqtt.password = ***:" in line for line in lines)
