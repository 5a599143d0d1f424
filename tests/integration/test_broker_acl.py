"""The shipped Mosquitto configuration (configs/mosquitto/) with TLS, accounts and its ACL.

The broker runs exactly configs/mosquitto/edge-vision.conf and configs/mosquitto/acl, with
files that scripts/broker-accounts.sh made, installed by docs/broker.md's own commands;
only the ports and the /etc/mosquitto/ directory differ.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.agent_proc import ROOT, VIDEO, AgentProc
from tests.brokers import MOSQUITTO, ConfiguredBroker, free_port, wait_until

CONF = ROOT / "configs" / "mosquitto" / "edge-vision.conf"
DOC = ROOT / "docs" / "broker.md"
SCRIPT = ROOT / "scripts" / "broker-accounts.sh"
NOT_AUTHORIZED = 135  # MQTT 5 reason code "Not authorized"
ACCEPTED = (0, 16)  # "Success", "No matching subscribers"


@dataclass
class Site:
    broker: ConfiguredBroker
    pki: Path
    password_port: int
    cert_port: int

    def password(self, account: str) -> str:
        return (self.pki / "accounts" / f"{account}.password").read_text()


def _install_as_documented(pki: Path, etc: Path) -> None:
    """Run docs/broker.md's `sudo install` lines, with ``etc`` for /etc/mosquitto/."""
    lines = [ln for ln in DOC.read_text().splitlines() if ln.startswith("sudo install ")]
    assert len(lines) >= 5, "docs/broker.md lost its install commands"
    for line in lines:
        argv = shlex.split(line)[2:]
        args = [a for i, a in enumerate(argv) if not a.startswith("-") and argv[i - 1] not in
                ("-m", "-g", "-o")]  # fmt: skip
        *sources, dest = [a.replace("/etc/mosquitto/", f"{etc}/") for a in args]
        if "-d" in argv:
            Path(dest).mkdir(parents=True)
            continue
        # The directories that apt-get install mosquitto makes (conf.d/).
        (Path(dest) if dest.endswith("/") else Path(dest).parent).mkdir(exist_ok=True)
        for src in sources:
            head, _, rest = src.partition("/")
            shutil.copy(pki / rest if head == "broker-pki" else ROOT / src, dest)


def _shipped_config(conf: Path, etc: Path, password_port: int, cert_port: int) -> str:
    """The installed edge-vision.conf with test ports and ``etc`` for /etc/mosquitto/."""
    text = conf.read_text()
    assert text == CONF.read_text()
    assert text.count("listener 8883\n") == 1 and text.count("listener 8884\n") == 1
    text = text.replace("listener 8883\n", f"listener {password_port} 127.0.0.1\n")
    text = text.replace("listener 8884\n", f"listener {cert_port} 127.0.0.1\n")
    return text.replace("/etc/mosquitto/", f"{etc}/")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """A CA, server certificate, accounts operator/homeassistant/a/b, a broker with the files."""
    for tool in (MOSQUITTO, "mosquitto_passwd", "openssl"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install mosquitto openssl)")
    pki = tmp_path / "pki"
    argv = [str(SCRIPT), "--out", str(pki), "--host", "localhost", "--host", "127.0.0.1",
            "--client-certs", "operator", "homeassistant", "a", "b"]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
    etc = tmp_path / "etc"
    _install_as_documented(pki, etc)
    ports = free_port(), free_port()
    conf = _shipped_config(etc / "conf.d" / CONF.name, etc, *ports)
    broker = ConfiguredBroker(tmp_path / "broker", conf, ports[0])
    broker.start()
    try:
        yield Site(broker, pki, *ports)
    finally:
        broker.close()


@dataclass
class Client:
    """A TLS MQTT 5 client that records its CONNACK, SUBACK and PUBACK reason codes."""

    site: Site
    account: str | None
    cert: bool = False
    tls: bool = True
    password_of: str | None = None  # another account's password (default: its own)
    connack: Any = None
    closed: threading.Event = field(default_factory=threading.Event)
    messages: list[tuple[str, bytes]] = field(default_factory=list)
    subacks: list[int] = field(default_factory=list)
    pubacks: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.connected = threading.Event()
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"t-{self.account}-{time.monotonic_ns()}",
            protocol=mqtt.MQTTv5,
        )  # fmt: skip
        pki = self.site.pki
        if self.account is not None and not self.cert:
            password = self.site.password(self.password_of or self.account)
            self.client.username_pw_set(self.account, password)
        if self.tls:
            client_cert = pki / "clients" / f"{self.account}.crt" if self.cert else None
            self.client.tls_set(
                ca_certs=str(pki / "ca.crt"),
                certfile=str(client_cert) if client_cert else None,
                keyfile=str(client_cert.with_suffix(".key")) if client_cert else None,
            )
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = lambda *a: self.closed.set()
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.subacks.extend(
            rc.value for rc in rcs
        )
        self.client.on_publish = lambda c, u, mid, rc, p: self.pubacks.__setitem__(mid, rc.value)
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, m.payload))

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self.connack = rc.value
        self.connected.set()

    def start(self, port: int | None = None) -> Client:
        if port is None:
            port = self.site.cert_port if self.cert else self.site.password_port
        self.client.connect_async("127.0.0.1", port, keepalive=10)
        self.client.loop_start()
        return self

    def wait_connack(self, timeout: float = 10) -> int | None:
        """The CONNACK reason code, or None when the connection closed without one."""
        wait_until(lambda: self.connected.is_set() or self.closed.is_set(), timeout)
        return self.connack

    def subscribe(self, *filters: str) -> list[int]:
        before = len(self.subacks)
        self.client.subscribe([(f, 1) for f in filters])
        assert wait_until(lambda: len(self.subacks) >= before + len(filters), 10)
        return self.subacks[before:]

    def publish(self, topic: str, payload: bytes) -> int:
        """The PUBACK reason code of a QoS 1 publish (ACCEPTED or NOT_AUTHORIZED)."""
        mid = self.client.publish(topic, payload, qos=1).mid
        assert wait_until(lambda: mid in self.pubacks, 10), f"no PUBACK for {topic}"
        return self.pubacks[mid]

    def on(self, prefix: str) -> list[tuple[str, bytes]]:
        return [m for m in list(self.messages) if m[0].startswith(prefix)]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


STRANGERS = [
    # (account, password of, TLS, listener, CONNACK reason code; None: no CONNACK at all)
    (None, None, True, "password", NOT_AUTHORIZED),
    ("a", "b", True, "password", NOT_AUTHORIZED),
    ("a", "a", False, "password", None),
    (None, None, True, "cert", None),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("account", "password_of", "tls", "listener", "expected"),
    STRANGERS,
    ids=["anonymous", "wrong-password", "without-tls", "no-client-certificate"],
)
def test_strangers_cannot_connect(site, account, password_of, tls, listener, expected):
    """No account, a wrong password, no TLS, or no client certificate: no session."""
    client = Client(site, account, tls=tls, password_of=password_of)
    client.start(site.cert_port if listener == "cert" else site.password_port)
    try:
        assert wait_until(lambda: client.connected.is_set() or client.closed.is_set(), 10)
        assert client.connack == expected, site.broker.log_tail()
        assert client.closed.wait(5)
    finally:
        client.close()


@pytest.mark.timeout(30)
def test_client_certificate_is_the_account(site):
    """On the certificate listener b's certificate is account b: its own topics only."""
    b = Client(site, "b", cert=True).start()
    try:
        assert b.wait_connack() == 0, site.broker.log_tail()
        assert b.publish("vision/b/status", b"{}") in ACCEPTED
        assert b.publish("vision/a/cmd/pause", b'{"id":"x"}') == NOT_AUTHORIZED
    finally:
        b.close()


@pytest.mark.timeout(30)
def test_operator_and_home_assistant_cannot_forge_device_state(site):
    """Operator and homeassistant cannot write a device's state; homeassistant cannot command."""
    a = Client(site, "a").start()
    ha = Client(site, "homeassistant").start()
    op = Client(site, "operator").start()
    try:
        assert a.wait_connack() == ha.wait_connack() == op.wait_connack() == 0
        ha.subscribe("vision/#")
        assert a.publish("vision/a/status", b'{"state":"online"}') in ACCEPTED
        assert wait_until(lambda: bool(ha.on("vision/a/status")), 5)  # it reads
        for client in (ha, op):
            assert client.publish("vision/a/status", b'{"state":"offline"}') == NOT_AUTHORIZED
            assert client.publish("homeassistant/sensor/a/x/config", b"{}") == NOT_AUTHORIZED
        assert ha.publish("vision/a/cmd/pause", b'{"id":"x"}') == NOT_AUTHORIZED
        assert ha.publish("homeassistant/status", b"online") in ACCEPTED  # its birth message
    finally:
        for client in (a, ha, op):
            client.close()


def _cli(site: Site, *args: str) -> subprocess.CompletedProcess[str]:
    """`edge-agent ARGS` as the operator over TLS (a separate process, as an operator runs it)."""
    argv = [
        sys.executable, "-m", "agent", *args,
        "--broker", f"127.0.0.1:{site.password_port}",
        "--username", "operator",
        "--password-file", str(site.pki / "accounts" / "operator.password"),
        "--ca", str(site.pki / "ca.crt"),
    ]  # fmt: skip
    return subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(120)
def test_only_the_operator_commands_a_device(site, tmp_path):
    """Device b can neither command nor overhear device a; the operator's command is applied."""
    cams = [{"id": "front", "source": str(VIDEO), "loop": True, "realtime": True}]
    mqtt_over = {"host": "127.0.0.1", "port": site.password_port, "username": "a",
                 "tls": {"ca": str(site.pki / "ca.crt")}}  # fmt: skip
    (tmp_path / "a").mkdir()
    agent = AgentProc(
        site.broker, tmp_path / "a", cameras=cams, device_id="a",
        overrides={"mqtt": mqtt_over, "fleet": {"groups": ["yard"]}},
        env={"EDGE_AGENT__MQTT__PASSWORD": site.password("a")},
    ).start()  # fmt: skip
    operator = Client(site, "operator").start()
    b = Client(site, "b").start()
    try:
        assert operator.wait_connack() == 0 and b.wait_connack() == 0, site.broker.log_tail()
        assert operator.subscribe("vision/#") == [1]
        # Mosquitto 2.0 grants b these subscriptions but delivers only what b may read.
        b.subscribe("vision/a/cmd/#", "vision/#")
        health = "vision/a/health"
        assert wait_until(lambda: any(
            t == "vision/a/status" and b'"online"' in p for t, p in operator.messages), 60
        ), agent.tail() + site.broker.log_tail()  # fmt: skip
        assert wait_until(lambda: len(operator.on("vision/a/front/detections")) >= 3, 60)

        # b's writes to a's commands, a's group and a's state are refused...
        for topic in ("vision/a/cmd/pause", "vision/fleet/yard/cmd/pause"):
            assert b.publish(topic, b'{"id":"from-b"}') == NOT_AUTHORIZED, topic
        assert b.publish("vision/a/status", b'{"state":"offline"}') == NOT_AUTHORIZED
        assert b.publish("vision/b/status", b'{"state":"online"}') in ACCEPTED  # its own
        # ... and a keeps running: detections flow, health says running, no reply to b.
        t0 = len(operator.messages)

        def since() -> list[tuple[str, bytes]]:
            return operator.messages[t0:]

        def kept_running() -> bool:
            seen = [t for t, _ in since()]
            return seen.count(health) >= 3 and seen.count("vision/a/front/detections") >= 5

        assert wait_until(kept_running, 30), agent.tail()
        states = [p for t, p in since() if t == health]
        assert all(b'"state":"running"' in p for p in states), states[-1]
        assert not operator.on("vision/a/reply/") and not agent.logged("paused")

        result = _cli(site, "config", "set", "--device", "a", "detector.conf_threshold=0.4")
        assert result.returncode == 0, result.stderr + agent.tail()
        assert result.stdout.startswith("a: applied: ") and "0.4" in result.stdout
        assert agent.logged("config_set")[-1]["patch"] == {"detector": {"conf_threshold": 0.4}}
        # The operator's command reached a (a replied), yet b, subscribed to vision/#, saw
        # nothing of a's, while its own retained status came back to it.
        assert operator.on("vision/a/reply/config/set")
        assert wait_until(lambda: bool(b.on("vision/b/status")), 5)
        assert not b.on("vision/a/")
    finally:
        operator.close()
        b.close()
        agent.stop()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("name", "why"), [("fleet", "reserved"), ("pi/01", "must match"), ("a+b", "must match")]
)
def test_accounts_script_refuses_names_the_acl_cannot_confine(tmp_path, name, why):
    """`fleet` (vision/fleet/# is every group's) and non-device-id names: exit 2, nothing made."""
    argv = [str(SCRIPT), "--out", str(tmp_path / "pki"), "--host", "localhost", "a", name]
    result = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"account '{name}'" in result.stderr and why in result.stderr
    assert not (tmp_path / "pki").exists()
