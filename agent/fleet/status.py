"""``fleet status``: one row per device from its retained status, health and model topics."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from agent.errors import ConfigError

#: A heartbeat older than this (seconds) flags an ``online`` device as stale.
DEFAULT_STALE_AFTER_S = 30.0
KINDS = ("status", "health", "model")


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One device of the fleet table (``fleet status --json`` prints these as objects)."""

    device: str
    state: str  # online | offline | stopped | unknown (no retained status)
    groups: list[str]
    model: str | None
    model_version: int | None
    provider: str | None
    fps: float | None
    spool_depth: int | None
    heartbeat_age_s: float | None
    stale: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_topic(prefix: str, topic: str) -> tuple[str, str] | None:
    """``(device, kind)`` of ``<prefix>/<device>/<kind>`` for the three retained kinds."""
    head = prefix + "/"
    if not topic.startswith(head):
        return None
    rest = topic[len(head) :].split("/")
    if len(rest) != 2 or rest[1] not in KINDS or not rest[0] or rest[0] == "fleet":
        return None
    return rest[0], rest[1]


def _ts(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _fps(health: dict[str, Any]) -> float | None:
    cams = health.get("cameras")
    if not isinstance(cams, dict) or not cams:
        return None
    total = 0.0
    for cam in cams.values():
        value = cam.get("fps_processed") if isinstance(cam, dict) else None
        if isinstance(value, int | float):
            total += float(value)
    return round(total, 2)


def _obj(payload: bytes | None) -> dict[str, Any]:
    if not payload:
        return {}
    try:
        value = json.loads(payload)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def build_rows(
    retained: dict[tuple[str, str], bytes],
    now: float,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
) -> list[DeviceRow]:
    """Rows sorted by device from ``{(device, kind): payload}``; unparsable payloads count
    as absent, so one broken device never hides the others."""
    rows = []
    for device in sorted({d for d, _ in retained}):
        status = _obj(retained.get((device, "status")))
        health = _obj(retained.get((device, "health")))
        model = _obj(retained.get((device, "model")))
        state = status.get("state")
        state = state if state in ("online", "offline", "stopped") else "unknown"
        groups = status.get("groups")
        beat = _ts(health.get("ts"))
        age = None if beat is None else round(max(0.0, now - beat), 1)
        mqtt = health.get("mqtt") if isinstance(health.get("mqtt"), dict) else {}
        inference = health.get("inference") if isinstance(health.get("inference"), dict) else {}
        depth = mqtt.get("spool_depth") if isinstance(mqtt, dict) else None
        version = model.get("version")
        provider = model.get("provider") or (
            inference.get("provider") if isinstance(inference, dict) else None
        )
        rows.append(
            DeviceRow(
                device=device,
                state=state,
                groups=[g for g in groups if isinstance(g, str)]
                if isinstance(groups, list)
                else [],
                model=model.get("name") if isinstance(model.get("name"), str) else None,
                model_version=version if isinstance(version, int) else None,
                provider=provider if isinstance(provider, str) else None,
                fps=_fps(health),
                spool_depth=depth if isinstance(depth, int) else None,
                heartbeat_age_s=age,
                stale=state == "online" and (age is None or age > stale_after_s),
            )
        )
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(value) or "-"
    return str(value)


def format_table(rows: list[DeviceRow]) -> str:
    """The human table; offline/stopped/unknown and stale devices carry a flag column."""
    head = [
        "DEVICE",
        "STATE",
        "GROUPS",
        "MODEL",
        "VER",
        "PROVIDER",
        "FPS",
        "SPOOL",
        "AGE_S",
        "FLAG",
    ]
    body = []
    for r in rows:
        flag = "STALE" if r.stale else ("OFFLINE" if r.state != "online" else "")
        body.append(
            [
                r.device,
                r.state,
                _cell(r.groups),
                _cell(r.model),
                _cell(r.model_version),
                _cell(r.provider),
                _cell(r.fps),
                _cell(r.spool_depth),
                _cell(r.heartbeat_age_s),
                flag,
            ]
        )
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in [head, *body]
    )


def _close(name: str, known: list[str]) -> str:
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def require_known(
    retained: dict[tuple[str, str], bytes],
    prefix: str,
    where: str,
    *,
    devices: Sequence[str] = (),
    group: str | None = None,
) -> None:
    """ConfigError at once for a device (or group) that no retained status announces: a
    command to it would only wait for its timeout. Names the known ones."""
    statuses = {d: _obj(p) for (d, kind), p in retained.items() if kind == "status"}
    if not statuses:
        what = f"device '{devices[0]}'" if devices else f"group '{group}'"
        raise ConfigError(
            f"unknown {what}: no device has a retained status under {prefix}/ on {where} "
            "(is --prefix or mqtt.topic_prefix right? has any agent connected yet?)"
        )
    known = sorted(statuses)
    for device in devices:
        if device not in statuses:
            raise ConfigError(
                f"unknown device '{device}' (known: {', '.join(known)}){_close(device, known)}"
                " (see `edge-agent fleet status`)"
            )
    if group is not None:
        groups = sorted(
            {g for s in statuses.values() for g in (s.get("groups") or []) if isinstance(g, str)}
        )
        if group not in groups:
            raise ConfigError(
                f"unknown group '{group}': no device under {prefix}/ lists it (groups: "
                f"{', '.join(groups) or 'none'}){_close(group, groups)}"
            )
