"""Run the real agent (`python -m agent run`) as a subprocess against a test broker."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.brokers import Broker, wait_until

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT.parent / "shared" / "data" / "media"
VIDEO = ROOT / "assets" / "vtest.avi"


def pick_model(size: int = 320) -> Path:
    """The fastest bundled model available (INT8 320 once built, else FP32 640)."""
    for name in (f"yolo11n-pose-{size}-int8.onnx", f"yolo11n-pose-{size}-fp32.onnx"):
        if (ROOT / "models" / name).exists():
            return ROOT / "models" / name
    return ROOT / "models" / "yolo11n-pose-640-fp32.onnx"


class AgentProc:
    """One agent process with its own config, state dir and captured log."""

    def __init__(
        self,
        broker: Broker | None,
        workdir: Path,
        *,
        cameras: list[dict[str, Any]] | None = None,
        device_id: str = "dev1",
        port: int | None = None,
        overrides: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.device_id = device_id
        self.workdir = workdir
        self.state_dir = workdir / "state"
        self.config_path = workdir / "agent.yaml"
        config: dict[str, Any] = {
            "device_id": device_id,
            "state_dir": str(self.state_dir),
            "mqtt": {
                "host": "127.0.0.1",
                "port": port if port is not None else (broker.port if broker else 1),
                "keepalive_s": 5,
                "reconnect_min_s": 0.2,
                "reconnect_max_s": 1.0,
            },
            "cameras": cameras
            or [{"id": "front", "source": str(VIDEO), "loop": True, "realtime": True}],
            "detector": {"model": str(pick_model())},
            "health": {"interval_s": 1.0},
            "publish": {"summary_interval_s": 2.0},
        }
        for section, values in (overrides or {}).items():
            if isinstance(values, dict) and isinstance(config.get(section), dict):
                config[section] = {**config[section], **values}
            else:
                config[section] = values
        self.config = config
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "agent.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProc:
        STARTED.append(self)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent",
                "run",
                "--config",
                str(self.config_path),
                "--log-format",
                "json",
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        return self

    @property
    def topic_base(self) -> str:
        return f"vision/{self.device_id}"

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events

    def logged(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.log_events() if e.get("event") == event]

    def wait_logged(self, event: str, timeout: float) -> bool:
        return wait_until(lambda: bool(self.logged(event)), timeout, 0.1)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        if self.proc is None:
            raise RuntimeError("agent not started")
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, and the exit status. ``timeout`` is the unit's ``TimeoutStopSec``: the
        agent's shutdown takes at most 10 s of its own plus 5 s for a capture call still in
        flight at exit, and a test on a loaded machine went past 15."""
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            # The log goes with pytest's temporary directories: what the agent was doing
            # when it did not stop must be in the failure itself, every thread's stack too.
            self.signal(signal.SIGUSR1)
            time.sleep(1.0)
            raise AssertionError(
                f"the agent did not stop within {timeout:g} s of SIGTERM; its log ends:\n"
                f"{self.tail(6000)}"
            ) from None
        finally:
            self.close()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        with contextlib.suppress(AttributeError):
            self._log.close()

    def tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]


#: Every agent started, in order: the suite's autouse fixture kills what a test started and
#: left running, so an agent that a failed assertion left behind cannot load the tests
#: after it.
STARTED: list[AgentProc] = []


def wait_for_count(predicate: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())
