"""Real mosquitto brokers and recording subscribers for tests (used through conftest.py)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class Broker:
    """One mosquitto process on a fixed 127.0.0.1 port; restartable on the same port/dir."""

    host = "127.0.0.1"

    def __init__(
        self,
        workdir: Path,
        *,
        message_size_limit: int | None = None,
        persistence: bool = True,
        extra_config: tuple[str, ...] = (),
        passwords: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.persistence = persistence
        self.persistence_dir = workdir / "data"
        self.persistence_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "mosquitto.conf"
        self.log_path = workdir / "mosquitto.log"
        lines = [
            f"listener {self.port} {self.host}",
            # With accounts: only they may connect (mosquitto_passwd hashes the file).
            f"allow_anonymous {'false' if passwords else 'true'}",
            # As root mosquitto drops to user "mosquitto", which cannot write this dir, and
            # persistence then fails silently.
            "user root",
            "log_dest stderr",
            "log_type all",
            "connection_messages true",
            # The default (1000) would drop messages queued for a reconnecting subscriber.
            "max_queued_messages 0",
        ]
        if persistence:
            lines += [
                "persistence true",
                f"persistence_location {self.persistence_dir}/",
                "autosave_interval 1",
            ]
        if message_size_limit is not None:
            lines.append(f"message_size_limit {message_size_limit}")
        if passwords:
            password_file = workdir / "passwd"
            password_file.touch()
            for user, password in passwords.items():
                subprocess.run(
                    [MOSQUITTO_PASSWD, "-b", str(password_file), user, password],
                    check=True,
                    capture_output=True,
                )
            lines.append(f"password_file {password_file}")
        lines += list(extra_config)
        self.config_path.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def persistence_file(self) -> Path:
        return self.persistence_dir / "mosquitto.db"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        if self.running:
            return
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.config_path)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        if not wait_until(self._accepts, timeout, 0.02):
            raise RuntimeError(f"mosquitto did not start on {self.port}: {self.log_tail()}")

    def _accepts(self) -> bool:
        if not self.running:
            raise RuntimeError(f"mosquitto exited: {self.log_tail()}")
        try:
            with socket.create_connection((self.host, self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Send ``sig`` and wait for the process to end."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)  # a paused broker cannot act on SIGTERM
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing answers (a half-open link)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop (if running) and start again on the same port and persistence dir."""
        self.stop(sig)
        self.start()

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def connect_count(self, client_id: str) -> int:
        """How many times ``client_id`` connected (from the broker's log)."""
        text = self.log_path.read_text(errors="replace")
        return text.count(f" as {client_id} ")

    def close(self) -> None:
        self.stop(signal.SIGKILL)


class ConfiguredBroker(Broker):
    """mosquitto with a configuration given as text (a shipped one, e.g. configs/mosquitto/).

    Only test lines are added: run as root (the test's files are not the mosquitto user's)
    and log everything to ``mosquitto.log``. ``port`` is a listener of ``config`` that
    start() waits for.
    """

    def __init__(self, workdir: Path, config: str, port: int) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.port = port
        self.persistence = False
        self.persistence_dir = workdir / "data"
        self.config_path = workdir / "mosquitto.conf"
        self.log_path = workdir / "mosquitto.log"
        test_lines = ["user root", "log_dest stderr", "log_type all", "connection_messages true"]
        self.config_path.write_text(config.rstrip("\n") + "\n\n" + "\n".join(test_lines) + "\n")
        self.proc = None


@dataclass(frozen=True)
class Received:
    topic: str
    payload: bytes
    retain: bool
    properties: Any = None

    def json(self) -> Any:
        return json.loads(self.payload)


@dataclass
class Recorder:
    """A subscriber with a persistent session (MQTT 5 clean_start=False) that records all."""

    broker: Broker
    filters: list[str]
    client_id: str = field(default_factory=lambda: f"rec-{os.getpid()}-{time.monotonic_ns()}")
    protocol: int = 5
    session_expiry_s: int = 600
    keepalive_s: int = 5
    messages: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        v5 = self.protocol == 5
        self.client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
            clean_session=None if v5 else False,
        )
        self.client.reconnect_delay_set(0.1, 0.5)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = lambda *a: self.connected.clear()
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self._on_message

    def start(self, timeout: float = 10.0) -> Recorder:
        props = None
        if self.protocol == 5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = self.session_expiry_s
        self.client.connect_async(
            self.broker.host,
            self.broker.port,
            keepalive=self.keepalive_s,
            clean_start=False if self.protocol == 5 else mqtt.MQTT_CLEAN_START_FIRST_ONLY,
            properties=props,
        )
        self.client.loop_start()
        if not self.subscribed.wait(timeout):
            raise RuntimeError("recorder did not subscribe")
        return self

    def _on_connect(
        self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any
    ) -> None:
        self.connected.set()
        if not flags.session_present:
            client.subscribe([(f, 1) for f in self.filters])

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append(
                Received(msg.topic, bytes(msg.payload), bool(msg.retain), msg.properties)
            )

    def on(self, topic: str) -> list[Received]:
        with self._lock:
            return [m for m in self.messages if m.topic == topic]

    def seqs(self, topic: str) -> list[int]:
        """The ``seq`` of every message received on ``topic``, in arrival order."""
        return [int(m.json()["seq"]) for m in self.on(topic)]

    def wait_for(self, predicate: Callable[[Recorder], bool], timeout: float) -> bool:
        return wait_until(lambda: predicate(self), timeout, 0.05)

    def wait_quiet(
        self,
        quiet_s: float,
        timeout: float,
        count: Callable[[Recorder], int] | None = None,
        least: int = 0,
    ) -> bool:
        """Until ``count`` (default: the messages received) is at least ``least`` and has
        not changed for ``quiet_s``: a burst, or what was in flight, is all in."""
        counted = count or (lambda r: len(r.messages))
        last, since = -1, time.monotonic()

        def quiet() -> bool:
            nonlocal last, since
            n, now = counted(self), time.monotonic()
            if n != last:
                last, since = n, now
            return n >= least and now - since >= quiet_s

        return wait_until(quiet, timeout, 0.02)

    def stopped(
        self, count: Callable[[Recorder], int], hold_s: float = 1.5, timeout: float = 10.0
    ) -> int | None:
        """``count`` once what was in flight has landed (quiet for a second: frames queued
        for the model, the spool, up to a second on a loaded box) and nothing more came
        for ``hold_s`` after it; None if it kept growing."""
        if not self.wait_quiet(1.0, timeout, count=count):
            return None
        n = count(self)
        time.sleep(hold_s)
        return n if count(self) == n else None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.disconnect()
        self.client.loop_stop()


def subscribed_and_saved(
    broker: Broker, recorder: Callable[..., Recorder], filters: list[str]
) -> Recorder:
    """A recording subscriber whose session the broker has already written to disk.

    Until the first autosave after the SUBSCRIBE, a broker SIGKILL would forget the
    session, and messages drained before the subscriber re-subscribes would not be its.
    """
    rec = recorder(broker, filters)
    t_sub = time.time()
    saved = wait_until(
        lambda: (
            broker.persistence_file.exists() and broker.persistence_file.stat().st_mtime > t_sub
        ),
        5,
    )
    assert saved, "broker persistence is not working (see the Gotchas: user root)"
    return rec


def stop_broker_after_the_subscriber(
    broker: Broker, pub: Any, rec: Recorder, sig: int = signal.SIGKILL
) -> None:
    """Stop the broker (``sig``) mid-stream, once ``rec`` holds all the broker has acked;
    ``pub``: the publisher (a test driver or an agent: anything with a ``proc``).

    The publisher is paused (SIGSTOP) for it, its spool and in-flight messages as they
    are. A broker SIGKILL loses what it acked to the publisher but had not yet handed to a
    subscriber that lags: it saves its in-flight messages only now and then. On a loaded
    machine that was 10-15 messages in a row, the broker's loss, not the publisher's,
    which these tests are about (the broker sends to subscribers before its PUBACK).
    """
    pub.proc.send_signal(signal.SIGSTOP)
    try:
        assert rec.wait_quiet(0.2, 5), "the subscriber kept receiving with the publisher paused"
        broker.stop(sig)
    finally:
        pub.proc.send_signal(signal.SIGCONT)


def publish_json(
    broker: Broker, topic: str, body: dict[str, Any] | None, *, retain: bool = False
) -> None:
    """One QoS 1 publish of ``body`` as JSON (``None``: empty, which clears a retained one)."""
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        payload = b"" if body is None else json.dumps(body).encode()
        client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(5)
    finally:
        client.disconnect()
        client.loop_stop()


def retain_status(broker: Broker, device: str, body: dict[str, Any] | None) -> None:
    """Publish (``None``: clear) ``vision/<device>/status`` retained, as an agent would."""
    publish_json(broker, f"vision/{device}/status", body, retain=True)
