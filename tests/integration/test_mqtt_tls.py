"""MqttLink over TLS to a real mosquitto: server verification and client certificates."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent.errors import ConfigError
from agent.mqtt.client import MqttLink
from agent.mqtt.store import MemoryQueue
from agent.mqtt.topics import Topics
from agent.settings import MqttSettings, TlsSettings
from tests.pki import make_pki, tls_listener


@pytest.fixture
def pki(tmp_path):
    """A CA, a server certificate for localhost and a client certificate."""
    return make_pki(tmp_path)


def _link(port: int, tls: TlsSettings, host: str = "localhost", **kw) -> MqttLink:
    settings = MqttSettings(
        host=host, port=port, tls=tls, reconnect_min_s=0.1, reconnect_max_s=0.5, **kw
    )
    store = MemoryQueue(1 << 20, 3600)
    return MqttLink(settings, Topics("vision", "tls-1"), store, threading.Event(), boot_id="b")


@pytest.mark.parametrize("mutual", [False, True], ids=["server-auth", "mutual"])
def test_tls_connects_and_delivers(mosquitto, pki, mutual):
    """With the CA (and a client cert where required) the link connects and delivers."""
    broker = mosquitto(extra_config=tls_listener(pki, require_certificate=mutual))
    tls = TlsSettings(
        ca=pki / "ca.crt",
        cert=pki / "client.crt" if mutual else None,
        key=pki / "client.key" if mutual else None,
    )
    link = _link(broker.port, tls)
    link.start()
    try:
        assert link.wait_connected(10), broker.log_tail()
        assert link.publish_spooled("vision/tls-1/front/detections", b'{"seq":0}')
        assert link.flush(5)
        assert link.stats().published == 1
    finally:
        link.close(2)


def test_tls_missing_files_is_config_error(tmp_path):
    """A CA path that does not exist is a one-line ConfigError at construction."""
    with pytest.raises(ConfigError, match=r"mqtt\.tls"):
        _link(8883, TlsSettings(ca=tmp_path / "nope.crt"))


@pytest.mark.parametrize("key", ["ca", "cert", "key"])
def test_tls_missing_file_names_its_key_and_path(pki, key):
    """Each missing TLS file is refused at construction with its key and path in one line."""
    files = {"ca": pki / "ca.crt", "cert": pki / "client.crt", "key": pki / "client.key"}
    files[key] = pki / "nope.pem"
    with pytest.raises(ConfigError) as err:
        _link(8883, TlsSettings(**files))
    assert str(err.value) == f"mqtt.tls.{key} = '{pki / 'nope.pem'}': no such file"


def test_tls_directory_is_not_a_pem_file(pki):
    """A directory given as mqtt.tls.ca is called one, not a missing file."""
    with pytest.raises(ConfigError) as err:
        _link(8883, TlsSettings(ca=pki))
    assert str(err.value) == f"mqtt.tls.ca = '{pki}': is a directory, not a PEM file"


def test_run_with_missing_ca_exits_2_naming_it(tmp_path):
    """`edge-agent run` with a missing mqtt.tls.ca exits 2 with the key and path on stderr."""
    cfg = tmp_path / "agent.yaml"
    ca = tmp_path / "ca.pem"
    cfg.write_text(f"mqtt: {{tls: {{ca: {ca}}}}}\ncameras: [{{id: a, source: assets/vtest.avi}}]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 2
    assert f"mqtt.tls.ca = '{ca}': no such file" in proc.stdout + proc.stderr


def _down_reasons(link: MqttLink, seconds: float = 2.0) -> list[dict[str, object]]:
    """The link's failure log lines over a few reconnect attempts."""
    with capture_logs() as logs:
        link.start()
        try:
            time.sleep(seconds)
            assert not link.connected
        finally:
            link.close(1)
    return [e for e in logs if e["event"] in ("mqtt_unreachable", "mqtt_connect_refused")]


@pytest.mark.timeout(30)
def test_tls_wrong_ca_is_logged_as_certificate_verify_failure(mosquitto, pki, tmp_path):
    """A CA that did not sign the broker's certificate: the log says so, at error."""
    other = make_pki(tmp_path / "other", ca_name="other-ca")
    broker = mosquitto(extra_config=tls_listener(pki))
    events = _down_reasons(_link(broker.port, TlsSettings(ca=other / "ca.crt")))
    assert events, "nothing logged"
    assert events[0]["log_level"] == "error"
    assert "certificate verify failed" in str(events[0]["reason"])
    assert "mqtt.tls.ca" in str(events[0]["reason"])


@pytest.mark.timeout(30)
def test_tls_hostname_mismatch_is_logged(mosquitto, pki):
    """The certificate names localhost, the agent dials 127.0.0.1: "hostname mismatch"."""
    broker = mosquitto(extra_config=tls_listener(pki))
    events = _down_reasons(_link(broker.port, TlsSettings(ca=pki / "ca.crt"), host="127.0.0.1"))
    assert events and "hostname mismatch" in str(events[0]["reason"]).lower(), events


@pytest.mark.timeout(30)
def test_refused_credentials_are_logged_as_not_authorised(mosquitto, pki, tmp_path):
    """A wrong password over TLS: "not authorised", naming the settings, never the password."""
    passwd = tmp_path / "passwd"
    subprocess.run(
        ["mosquitto_passwd", "-c", "-b", str(passwd), "agent", "right-pw"],
        check=True,
        capture_output=True,
        timeout=10,
    )
    broker = mosquitto(
        extra_config=(*tls_listener(pki), "allow_anonymous false", f"password_file {passwd}")
    )
    wrong = {"username": "agent", "password": "WRONG-pw"}
    link = _link(broker.port, TlsSettings(ca=pki / "ca.crt"), **wrong)
    events = _down_reasons(link)
    assert events, "nothing logged"
    reasons = " ".join(str(e["reason"]) for e in events)
    assert "not authorised" in reasons and "mqtt.password" in reasons
    assert "Unspecified error" not in reasons and "WRONG-pw" not in str(events)
    assert all(e["log_level"] == "error" for e in events)
