"""systemd readiness and watchdog over a fake NOTIFY_SOCKET that the test reads."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from agent.service.daemon import Agent
from agent.settings import AgentSettings
from tests.agent_proc import VIDEO, AgentProc, pick_model
from tests.brokers import wait_until


class NotifySocket:
    """A Unix datagram socket standing in for systemd's notify socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            for line in data.decode().splitlines():
                self.messages.append((time.monotonic(), line))

    def count(self, key: str, since: float = 0.0) -> int:
        return sum(1 for t, m in self.messages if m == key and t >= since)

    def wait(self, key: str, timeout: float, since: float = 0.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.count(key, since):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path):
    ns = NotifySocket(tmp_path / "notify.sock")
    yield ns
    ns.close()


@pytest.mark.timeout(90)
def test_ready_watchdog_stopping_from_the_service(broker, notify_socket, tmp_path):
    """READY after start, WATCHDOG pings while frames flow, STOPPING on SIGTERM."""
    env = {"NOTIFY_SOCKET": str(notify_socket.path), "WATCHDOG_USEC": "2000000"}
    agent = AgentProc(broker, tmp_path, env=env).start()
    try:
        assert notify_socket.wait("READY=1", 40), agent.tail()
        t_ready = time.monotonic()
        time.sleep(4)
        assert notify_socket.count("WATCHDOG=1", since=t_ready) >= 3
        assert any(m.startswith("STATUS=") for _, m in notify_socket.messages)
        agent.signal(signal.SIGTERM)
        assert agent.wait(15) == 0
        assert notify_socket.count("STOPPING=1") == 1
    finally:
        agent.close()


@pytest.mark.timeout(90)
def test_watchdog_continues_while_camera_is_down(broker, notify_socket, tmp_path):
    """An unplugged camera is the camera's problem: the watchdog keeps being fed."""
    env = {"NOTIFY_SOCKET": str(notify_socket.path), "WATCHDOG_USEC": "2000000"}
    cams = [{"id": "gone", "source": str(tmp_path / "unplugged.mp4"), "reconnect_max_s": 1.0}]
    agent = AgentProc(broker, tmp_path, cameras=cams, env=env).start()
    try:
        assert notify_socket.wait("READY=1", 40), agent.tail()
        t_ready = time.monotonic()
        time.sleep(6)
        assert notify_socket.count("WATCHDOG=1", since=t_ready) >= 4
    finally:
        agent.stop()


@pytest.mark.timeout(120)
def test_hung_inference_stops_watchdog(broker, notify_socket, tmp_path, monkeypatch):
    """When inference hangs, WATCHDOG pings stop (so systemd restarts the service)."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify_socket.path))
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    settings = AgentSettings(
        device_id="hang",
        state_dir=tmp_path / "state",
        mqtt={"host": broker.host, "port": broker.port},
        cameras=[{"id": "front", "source": str(VIDEO), "loop": True}],
        detector={"model": str(pick_model())},
    )
    agent = Agent(settings)
    release = threading.Event()
    for det in agent.engine.models.detectors():
        real = det.runtime.run

        def hang_when_told(tensor, _real=real):
            if hang.is_set():
                release.wait(60)  # the fault: a model run that never returns
            return _real(tensor)

        # Every inference (whole frames, region sheets of any size) is a run of the session.
        det.runtime.run = hang_when_told  # type: ignore[method-assign]
    hang = threading.Event()
    agent.start()
    supervisor = threading.Thread(target=agent.supervise, daemon=True)
    supervisor.start()
    try:
        assert notify_socket.wait("READY=1", 20)
        assert notify_socket.wait("WATCHDOG=1", 10)
        hang.set()
        time.sleep(7)  # > the 5 s stale limit
        t_hung = time.monotonic()
        time.sleep(3)
        assert notify_socket.count("WATCHDOG=1", since=t_hung) == 0
        release.set()
        hang.clear()
        assert notify_socket.wait("WATCHDOG=1", 10, since=time.monotonic())
    finally:
        release.set()
        agent.stop.set()
        supervisor.join(5)
        agent.shutdown()


@pytest.mark.timeout(90)
def test_stalled_sender_stops_watchdog(broker, notify_socket, tmp_path, monkeypatch):
    """Connected but no PUBACK while detections wait: WATCHDOG stops, health says why."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify_socket.path))
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    settings = AgentSettings(
        device_id="stall",
        state_dir=tmp_path / "state",
        mqtt={"host": broker.host, "port": broker.port, "keepalive_s": 60},
        cameras=[{"id": "front", "source": str(VIDEO), "loop": True, "realtime": True}],
        # Whole frames: every frame is a message, so something always waits for a PUBACK
        # (region mode may skip frames, and an empty spool is no stall).
        detector={"model": str(pick_model()), "regions": "full"},
        publish={"mode": "every_frame"},
    )
    agent = Agent(settings)
    agent.link.stall_after_s = 3.0  # the default (60 s and more) is too long for a test
    agent.start()
    supervisor = threading.Thread(target=agent.supervise, daemon=True)
    supervisor.start()
    try:
        assert notify_socket.wait("WATCHDOG=1", 20)
        assert agent.link.wait_connected(10)
        assert wait_until(lambda: agent.publisher.camera("front").published >= 3, 20)
        broker.pause()  # the TCP link stays up; nothing is acknowledged any more
        deadline = time.monotonic() + 30
        while agent.link.stall_reason() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # a ping already decided on may still arrive
        t_stalled = time.monotonic()
        time.sleep(2)
        assert notify_socket.count("WATCHDOG=1", since=t_stalled) == 0
        assert agent.link.connected
        hb = agent.heartbeat()
        assert hb.state == "degraded"
        assert (hb.reason or "").startswith("sender_stalled: connected"), hb.reason
        broker.resume()
        assert notify_socket.wait("WATCHDOG=1", 10, since=time.monotonic())
    finally:
        broker.resume()
        agent.stop.set()
        supervisor.join(5)
        agent.shutdown()
