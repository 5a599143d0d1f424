"""Operator commands find the broker from --config and the environment, log in without a
password on the command line, say why a connection failed, and refuse unknown devices."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest
import yaml

from agent.cli import main
from tests.agent_proc import pick_model
from tests.brokers import free_port, retain_status
from tests.pki import make_pki, tls_listener

pytestmark = pytest.mark.timeout(60)


def _config(tmp_path: Path, **mqtt: object) -> Path:
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump({"mqtt": mqtt}))
    return path


def _status_json(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    out = capsys.readouterr().out.strip().splitlines()[-1]
    return {d["device"]: d for d in json.loads(out)["devices"]}


def test_fleet_status_reads_the_broker_from_the_config(broker, tmp_path, capsys):
    """`fleet status --config my.yaml` with no other flag reads host, port and prefix there."""
    retain_status(broker, "porch-pi", {"state": "online", "groups": ["yard"]})
    cfg = _config(tmp_path, host=broker.host, port=broker.port)
    assert main(["fleet", "status", "--config", str(cfg), "--json"]) == 0
    rows = _status_json(capsys)
    assert rows["porch-pi"]["state"] == "online" and rows["porch-pi"]["groups"] == ["yard"]


def test_environment_overrides_the_config_and_flags_override_both(
    broker, tmp_path, capsys, monkeypatch
):
    """EDGE_AGENT__MQTT__PORT beats the file; --broker beats the environment."""
    retain_status(broker, "env-dev", {"state": "online"})
    cfg = _config(tmp_path, host=broker.host, port=free_port())  # nothing listens there
    monkeypatch.setenv("EDGE_AGENT__MQTT__PORT", str(broker.port))
    assert main(["fleet", "status", "--config", str(cfg), "--json"]) == 0
    assert "env-dev" in _status_json(capsys)
    monkeypatch.setenv("EDGE_AGENT__MQTT__PORT", str(free_port()))
    url = f"{broker.host}:{broker.port}"
    assert main(["fleet", "status", "--config", str(cfg), "--broker", url, "--json"]) == 0
    assert "env-dev" in _status_json(capsys)


@pytest.fixture
def locked(mosquitto):
    """A broker that lets in only user 'op' with password 's3cret'."""
    b = mosquitto(passwords={"op": "s3cret"})
    return b


def test_password_from_environment_or_file(locked, tmp_path, capsys, monkeypatch):
    """The password comes from EDGE_AGENT__MQTT__PASSWORD or --password-file, never argv."""
    cfg = _config(tmp_path, host=locked.host, port=locked.port, username="op")
    monkeypatch.setenv("EDGE_AGENT__MQTT__PASSWORD", "s3cret")
    assert main(["fleet", "status", "--config", str(cfg)]) == 0, capsys.readouterr().err
    assert "no device under vision/" in capsys.readouterr().out
    monkeypatch.delenv("EDGE_AGENT__MQTT__PASSWORD")
    secret = tmp_path / "op.pass"
    secret.write_text("s3cret\n")
    assert main(["fleet", "status", "--config", str(cfg), "--password-file", str(secret)]) == 0
    capsys.readouterr()
    missing = tmp_path / "nope.pass"
    assert main(["fleet", "status", "--config", str(cfg), "--password-file", str(missing)]) == 2
    assert f"--password-file {missing}: cannot read it" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--username", "op", "--password", "wrong"], "refused user 'op': not authorised"),
        ([], "refused an anonymous client: not authorised"),
    ],
    ids=["bad-password", "anonymous"],
)
def test_refused_account_is_named(locked, capsys, extra, says):
    """A bad password or no account: one line naming the broker and 'not authorised'."""
    url = f"{locked.host}:{locked.port}"
    assert main(["fleet", "status", "--broker", url, *extra]) == 6
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert url in line and says in line


def test_refused_port_is_named(capsys):
    """Nothing listening: 'connection refused' with the broker's address, exit 6."""
    url = f"127.0.0.1:{free_port()}"
    assert main(["fleet", "status", "--broker", url]) == 6
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"cannot connect to broker {url}: connection refused" in line


@pytest.fixture
def tls_broker(mosquitto, tmp_path):
    pki = make_pki(tmp_path / "pki")
    return mosquitto(extra_config=tls_listener(pki, require_certificate=True)), pki


def test_tls_failures_say_why(tls_broker, tmp_path, capsys):
    """Wrong CA, wrong host name, missing files and a missing client certificate each
    name their cause; the right CA, host and --tls-cert/--tls-key connect."""
    broker, pki = tls_broker
    other = make_pki(tmp_path / "other", "other-ca")
    cert = ["--tls-cert", str(pki / "client.crt"), "--tls-key", str(pki / "client.key")]
    at_localhost = ["fleet", "status", "--broker", f"localhost:{broker.port}"]
    at_ip = ["fleet", "status", "--broker", f"127.0.0.1:{broker.port}"]
    ca = ["--ca", str(pki / "ca.crt")]
    cases = [
        ([*at_localhost, "--ca", str(other / "ca.crt"), *cert], "not trusted by --ca"),
        ([*at_ip, *ca, *cert], "is not for host '127.0.0.1'"),
        ([*at_localhost, "--ca", str(tmp_path / "none.crt")], "--ca "),
        ([*at_localhost, *ca, *cert[:2]], "--tls-cert and --tls-key go together"),
        ([*at_localhost, *ca], "requires a client certificate"),
        (at_localhost, "does it expect TLS?"),
    ]
    for argv, says in cases:
        started = time.monotonic()
        with warnings.catch_warnings():
            # paho drops, unclosed, the socket of a failed TLS handshake
            warnings.simplefilter("ignore", ResourceWarning)
            assert main(argv) != 0, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (argv, err)
        assert time.monotonic() - started < 12
    assert main([*at_localhost, "--ca", str(pki / "ca.crt"), *cert]) == 0
    assert "no device under vision/" in capsys.readouterr().out


def test_tls_files_from_the_config_are_named(tls_broker, tmp_path, capsys):
    """A CA file missing at mqtt.tls.ca is named by its config key and path."""
    broker, _ = tls_broker
    missing = tmp_path / "gone.crt"
    cfg = _config(tmp_path, host="localhost", port=broker.port, tls={"ca": str(missing)})
    assert main(["fleet", "status", "--config", str(cfg)]) == 2
    assert f"mqtt.tls.ca {missing}: cannot read it" in capsys.readouterr().err


def test_unknown_device_fails_at_once_naming_the_known(broker, capsys, tmp_path):
    """rollback, config set, push-model and fleet rollout refuse an unknown device or group
    in well under 10 s, listing the known ones; nothing is sent."""
    url = f"{broker.host}:{broker.port}"
    started = time.monotonic()
    assert main(["rollback", "--broker", url, "--device", "porch-pj"]) == 2
    err = capsys.readouterr().err
    assert "no device has a retained status under vision/" in err
    for d in ("porch-pi", "garage"):
        retain_status(broker, d, {"state": "online", "groups": ["yard"]})
    assert main(["rollback", "--broker", url, "--device", "porch-pj"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "unknown device 'porch-pj' (known: garage, porch-pi); did you mean 'porch-pi'?" in line
    assert main(["config", "set", "--broker", url, "--group", "yrd", "publish.mode=all"]) == 2
    assert "unknown group 'yrd'" in capsys.readouterr().err
    assert time.monotonic() - started < 10
    assert main(["keygen", "--out", str(tmp_path), "--name", "op"]) == 0
    model = ["--key", str(tmp_path / "op.key"), "--model", str(pick_model()), "--version", "9"]
    for argv in (
        ["push-model", "--device", "garag", *model],
        ["fleet", "rollout", "--devices", "garage,porch-pj", *model],
    ):
        capsys.readouterr()
        started = time.monotonic()
        assert main([*argv, "--broker", url]) == 2
        assert "unknown device '" in capsys.readouterr().err
        assert time.monotonic() - started < 10


def test_config_set_typo_suggests_the_key_before_sending(broker, recorder, capsys):
    """A misspelt key is refused locally with 'did you mean'; no command reaches the broker."""
    rec = recorder(broker, ["vision/+/cmd/#"])
    retain_status(broker, "porch-pi", {"state": "online"})
    url = f"{broker.host}:{broker.port}"
    argv = ["config", "set", "--broker", url, "--device", "porch-pi"]
    assert main([*argv, "detector.conf_treshold=0.4"]) == 2
    assert "did you mean detector.conf_threshold?" in capsys.readouterr().err
    assert main([*argv, "detector.model=x.onnx"]) == 2
    assert "detector.model cannot be changed at run time" in capsys.readouterr().err
    time.sleep(0.3)
    assert rec.messages == []
