"""A model's way to a device: the chunked transfer and the device's acceptance of a deploy.

``push-model`` and ``fleet rollout`` send the ``model/deploy`` command first and the file's
chunks only once the device accepted it (signature, version and size passed), so a
refusing or absent device costs one small message.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.fleet.session import Route, Session, wait_acked

DEPLOY = "model/deploy"
ROLLBACK = "model/rollback"
#: Chunks published and not yet acknowledged by the broker, at most (docs/fleet.md).
INFLIGHT_CHUNKS = 16


def chunk_source(size: int, chunk_size: int) -> dict[str, Any]:
    """A fresh ``source`` of a chunked transfer of ``size`` bytes."""
    if not 256 <= chunk_size <= 16 * 1024 * 1024:
        raise ConfigError("--chunk-size must be 256 .. 16777216 bytes")
    return {
        "transfer_id": f"t-{secrets.token_hex(6)}",
        "chunks": max(1, math.ceil(size / chunk_size)),
        "chunk_size": chunk_size,
    }


def _chunks(path: Path, chunk_size: int) -> Iterator[bytes]:
    with path.open("rb") as f:
        while block := f.read(chunk_size):
            yield block


def send_chunks(session: Session, r: Route, path: Path, source: dict[str, Any]) -> None:
    """The file's chunks on the upload topics, at most INFLIGHT_CHUNKS unacknowledged."""
    tid, size = source["transfer_id"], source["chunk_size"]
    deadline = time.monotonic() + 600.0
    window: list[Any] = []
    for index, chunk in enumerate(_chunks(path, size)):
        window.append(session.publish(r.upload(tid, index), chunk))
        if len(window) >= INFLIGHT_CHUNKS:  # bounded memory: wait for the oldest acks
            wait_acked(window[: INFLIGHT_CHUNKS // 2], deadline)
            window = window[INFLIGHT_CHUNKS // 2 :]
    wait_acked(window, deadline)


def await_acceptance(
    session: Session, r: Route, cmd_id: str, timeout: float, expect: int | None = None
) -> tuple[int, int]:
    """``(accepted, refused)`` devices of ``cmd_id`` within ``timeout``.

    Returns at the first answer for one device; for a group once ``expect`` devices
    answered, else at the timeout. Final replies seen here go back on the queue for
    ``collect``; progress messages are consumed.
    """
    accepted: set[str] = set()
    refused: set[str] = set()
    kept: list[tuple[str, bytes]] = []
    for topic, payload, body in session.answers(cmd_id, time.monotonic() + timeout, 0.2):
        if topic.endswith(f"/progress/{DEPLOY}"):
            if body.get("stage") == "accepted":
                accepted.add(topic.split("/progress/")[0].rsplit("/", 1)[-1])
        else:
            kept.append((topic, payload))
            if body.get("ok") is False:
                refused.add(r.device_of(topic) or "")
        answered = len(accepted | refused)
        if r.group is None and answered:
            break
        if r.group is not None and expect is not None and answered >= expect:
            break
    for item in kept:
        session.messages.put(item)
    return len(accepted), len(refused)
