"""``fleet rollout``: wave plan, abort rule and the resumable state file (no MQTT here).

Device states in the state file: ``pending`` (nothing sent), ``sending`` (the deploy is
about to be, or was, published: written *before* the publish), then one final state of
the contract: ``committed``, ``failed``, ``timed_out``, ``rolled_back``. Devices still
``pending`` when a rollout ends are reported ``not_attempted``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import ConfigError

FINAL = ("committed", "failed", "timed_out", "rolled_back")
FAILED = ("failed", "timed_out", "rolled_back")
STATE_SCHEMA = "edge-vision/rollout-state/1"


def plan_waves(devices: list[str], canary: int, step_factor: float) -> list[list[str]]:
    """Waves in order: ``canary`` devices, then each wave ``step_factor`` times the last
    (rounded up, at least one more device), until every device is in a wave."""
    if canary < 1:
        raise ConfigError(f"--canary must be >= 1, got {canary}")
    if step_factor < 1.0:
        raise ConfigError(f"--step-factor must be >= 1, got {step_factor:g}")
    waves: list[list[str]] = []
    size, start = canary, 0
    while start < len(devices):
        waves.append(devices[start : start + size])
        start += size
        size = max(size + 1, math.ceil(size * step_factor)) if step_factor > 1 else size
    return waves


def should_abort(states: dict[str, str], max_failure_pct: float) -> bool:
    """True when failed devices are more than ``max_failure_pct`` % of attempted ones."""
    attempted = [s for s in states.values() if s in FINAL]
    if not attempted:
        return False
    failed = sum(1 for s in attempted if s in FAILED)
    return 100.0 * failed / len(attempted) > max_failure_pct


def outcome(reply: dict[str, Any] | None) -> tuple[str, str | None]:
    """``(state, code)`` of a device from its final deploy reply (None: no reply in time)."""
    if reply is None:
        return "timed_out", None
    if reply.get("ok") is True:
        result = reply.get("result")
        if isinstance(result, dict) and result.get("state") == "committed":
            return "committed", None
        return "failed", "not_committed"
    error = reply.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return "failed", code if isinstance(code, str) else "unknown"


@dataclass
class DeviceEntry:
    """What the state file keeps per device."""

    state: str = "pending"
    code: str | None = None
    cmd_id: str | None = None
    source: dict[str, Any] | None = None


@dataclass
class RolloutState:
    """The whole resumable rollout; ``save`` replaces the file atomically."""

    model_sha256: str
    version: int
    devices: dict[str, DeviceEntry] = field(default_factory=dict)
    state: str = "running"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": STATE_SCHEMA,
            "model_sha256": self.model_sha256,
            "version": self.version,
            "state": self.state,
            "devices": {
                d: {"state": e.state, "code": e.code, "cmd_id": e.cmd_id, "source": e.source}
                for d, e in self.devices.items()
            },
        }

    def states(self) -> dict[str, str]:
        return {d: e.state for d, e in self.devices.items()}

    def report(self) -> dict[str, Any]:
        """The contract's ``--json`` object."""
        return {
            "state": "aborted" if self.state == "aborted" else "completed",
            "devices": {
                d: {
                    "state": e.state if e.state in FINAL else "not_attempted",
                    "code": e.code,
                }
                for d, e in self.devices.items()
            },
        }

    def save(self, path: Path | None) -> None:
        if path is None:
            return
        data = json.dumps(self.to_json(), indent=1).encode()
        fd, tmp = tempfile.mkstemp(prefix=".rollout-", dir=path.parent or Path("."))
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(path.parent or Path("."), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    @classmethod
    def load_or_new(
        cls, path: Path | None, devices: list[str], model_sha256: str, version: int
    ) -> RolloutState:
        """The saved rollout of this model (resume), or a fresh one; a state file of
        another model or version is refused rather than mixed."""
        if path is None or not path.exists():
            return cls(model_sha256, version, {d: DeviceEntry() for d in devices})
        try:
            raw = json.loads(path.read_text())
            if raw.get("schema") != STATE_SCHEMA:
                raise ValueError("not a rollout state file")
            saved = cls(
                str(raw["model_sha256"]),
                int(raw["version"]),
                {
                    d: DeviceEntry(e["state"], e.get("code"), e.get("cmd_id"), e.get("source"))
                    for d, e in raw["devices"].items()
                },
                str(raw.get("state", "running")),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"--state {path}: unreadable rollout state: {e}") from e
        if saved.model_sha256 != model_sha256 or saved.version != version:
            raise ConfigError(
                f"--state {path} belongs to another rollout (version {saved.version}, "
                f"sha256 {saved.model_sha256[:12]}); pass a new --state file"
            )
        for d in devices:  # devices added to the group since: appended, pending
            saved.devices.setdefault(d, DeviceEntry())
        saved.state = "running"
        return saved
