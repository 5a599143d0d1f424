"""Runtime overrides: what ``config/set`` applied, kept in ``<state_dir>/overrides.json``.

Precedence at start, highest first: runtime overrides, the environment, the YAML file, the
defaults. A ``config set`` is the operator's latest word on a value, given while the process
already ran with its environment; a restart (a crash, a reboot, an upgrade) must not silently
undo it, whatever set the start value. ``config reset`` drops the overrides and goes back to
what the file and the environment give.

Overrides are kept as flat paths (agent/service/hotconfig.py ``entries``), each with the
time it was set; at start each is applied on its own, so one that no longer fits the file
(a camera removed, a value the new file makes invalid) is dropped with a log line naming
it, and the rest still apply.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import CommandError, ConfigError
from agent.log import get_logger
from agent.messages import utc_ts
from agent.service.hotconfig import effective, entries, patch_of, plan
from agent.settings import AgentSettings, DetectorSettings, env_variable

log = get_logger("overrides")

FILE_NAME = "overrides.json"
#: Overrides checked against the loaded model's labels too: applied once it is loaded.
NEEDS_MODEL = frozenset({"detector.classes"})
SCHEMA = "edge-vision/overrides/1"


@dataclass(frozen=True)
class Override:
    """One value set at run time, and when (UTC, ISO 8601)."""

    value: Any
    ts: str


class OverrideStore:
    """``overrides.json``, replaced atomically: temp file, fsync, rename, fsync dir."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME

    def load(self) -> dict[str, Override]:
        """The stored overrides; an unreadable file is logged and treated as empty."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return {
                str(k): Override(v["value"], str(v["ts"])) for k, v in data["overrides"].items()
            }
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("overrides_unreadable", path=str(self.path), error=str(e))
            return {}

    def save(self, overrides: dict[str, Override]) -> None:
        """Write all of ``overrides``; raises OSError (a full or read-only disk)."""
        body = {
            "schema": SCHEMA,
            "overrides": {k: {"value": o.value, "ts": o.ts} for k, o in overrides.items()},
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as f:
                f.write(json.dumps(body, indent=1))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self._sync_dir()

    def clear(self) -> None:
        """Remove the file; raises OSError."""
        self.path.unlink(missing_ok=True)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _camera(path: str) -> str | None:
    parts = path.split(".")
    return parts[1] if parts[0] == "cameras" and len(parts) > 1 else None


def apply_stored(settings: AgentSettings, stored: dict[str, Override]) -> dict[str, Override]:
    """Apply ``stored`` over ``settings`` in place; return those that applied.

    One that does not (its camera is gone, or it is invalid against this file) is logged
    with its path and left out, never a failure to start.
    """
    kept: dict[str, Override] = {}
    ids = {c.id for c in settings.cameras}
    for path, item in stored.items():
        cid = _camera(path)
        if cid is not None and cid not in ids:
            log.info("override_dropped", override=path, reason=f"camera {cid} is not configured")
            continue
        try:
            changes = patch_of({path: item.value})
            plan(settings, changes, objects_enabled=settings.objects.enabled).apply_to(settings)
        except CommandError as e:
            log.warning("override_dropped", override=path, reason=str(e))
            continue
        kept[path] = item
    return kept


class RuntimeOverrides:
    """The overrides in force, the store behind them, and the settings without them."""

    def __init__(self, store: OverrideStore, base: AgentSettings) -> None:
        self.store = store
        self.base = base
        self.current: dict[str, Override] = {}
        self.held: dict[str, Override] = {}

    @classmethod
    def start(cls, settings: AgentSettings) -> RuntimeOverrides:
        """Apply the stored overrides over ``settings`` (in place), at start; those that
        need the loaded model (NEEDS_MODEL) wait for ``apply_held``."""
        self = cls(OverrideStore(settings.state_dir), settings.model_copy(deep=True))
        stored = self.store.load()
        self.held = {k: o for k, o in stored.items() if k in NEEDS_MODEL}
        self.current = apply_stored(
            settings, {k: o for k, o in stored.items() if k not in self.held}
        )
        if len(self.current) + len(self.held) != len(stored):
            self._save("dropping overrides that no longer apply")
        return self

    def apply_held(
        self, settings: AgentSettings, check: Callable[[DetectorSettings], None]
    ) -> None:
        """Apply the held overrides that ``check`` (the loaded model) accepts; drop the rest."""
        held, self.held = self.held, {}
        for path, item in held.items():
            try:
                changes = patch_of({path: item.value})
                planned = plan(settings, changes, objects_enabled=settings.objects.enabled)
                check(planned.detector)
            except (CommandError, ConfigError) as e:
                log.warning("override_dropped", override=path, reason=str(e))
                continue
            planned.apply_to(settings)
            self.current[path] = item
        if set(held) - set(self.current):
            self._save("dropping overrides that no longer apply")
        if self.current:
            log.info("overrides_applied", overrides=sorted(self.current), path=str(self.store.path))

    @classmethod
    def view(cls, settings: AgentSettings) -> dict[str, Any]:
        """``describe`` for an agent that would start with ``settings``; writes nothing."""
        self = cls(OverrideStore(settings.state_dir), settings.model_copy(deep=True))
        applied = settings.model_copy(deep=True)
        self.current = apply_stored(applied, self.store.load())
        return self.describe(applied)

    def record(self, flat: dict[str, Any], now: float | None = None) -> dict[str, Any]:
        """Merge ``flat`` (applied already) into the overrides and write them."""
        ts = utc_ts(time.time() if now is None else now)
        self.current.update({path: Override(value, ts) for path, value in flat.items()})
        return self._save("config set")

    def reset(self) -> dict[str, Any]:
        """Forget every override (the caller re-applies the base values)."""
        dropped = sorted(self.current)
        self.current = {}
        try:
            self.store.clear()
        except OSError as e:
            log.warning("overrides_write_failed", path=str(self.store.path), error=str(e))
            return {"dropped": dropped, **_not_persisted(self.store.path, e)}
        return {"dropped": dropped, "persisted": True}

    def _save(self, what: str) -> dict[str, Any]:
        try:
            self.store.save({**self.current, **self.held})
        except OSError as e:
            log.warning("overrides_write_failed", path=str(self.store.path), error=str(e), on=what)
            return _not_persisted(self.store.path, e)
        return {"persisted": True}

    def describe(self, settings: AgentSettings) -> dict[str, Any]:
        """The effective hot config, and where each value came from (runtime, env, file)."""
        now, was = entries(effective(settings)), entries(effective(self.base))
        values: dict[str, Any] = {}
        for path in sorted({*now, *self.current}):
            item: dict[str, Any] = {"value": now.get(path)}
            runtime = self.current.get(path)
            env = env_variable(tuple(path.split(".")))
            if runtime is not None:
                item.update(source="runtime", ts=runtime.ts, base=was.get(path))
            elif env is not None:
                item.update(source="env", env=env)
            else:
                item["source"] = "file"
            values[path] = item
        return {"config": effective(settings), "values": values}


def _not_persisted(path: Path, e: OSError) -> dict[str, Any]:
    return {
        "persisted": False,
        "warning": f"applied now, but it will not survive a restart: cannot write {path} "
        f"({e.strerror or e})",
    }
