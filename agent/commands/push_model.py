"""`edge-agent push-model`: sign a model, send it to a device or fleet group, await replies.

Publishes the ``model/deploy`` command (QoS 1, MQTT 5 ResponseTopic + CorrelationData);
for ``--via chunks`` it waits for the device's ``accepted`` progress message (signature,
version and size passed) and only then sends the file in chunks on the upload topics, so
a refused or absent device costs one small message. Prints each reply as JSON. Exit
status: 0 all ok, 1 an error reply, 3 no reply (or no acceptance) in time.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.commands.remote import (
    CONNECT_TIMEOUT_S,
    EXIT_ERROR_REPLY,
    EXIT_NO_REPLY,
    Route,
    Session,
    add_target_args,
    collect,
    route,
    wait_acked,
)
from agent.commands.sign import add_model_args, signed_manifest
from agent.errors import ConfigError

DEPLOY = "model/deploy"
INFLIGHT_CHUNKS = 16
ACCEPT_TIMEOUT_S = 15.0

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEPLOY",
    "Session",
    "chunk_source",
    "route",
    "send_chunks",
    "wait_acked",
]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "push-model", help="deploy a signed model to a device or fleet group over MQTT"
    )
    add_target_args(p, timeout=120.0, broker_required=True)
    add_model_args(p)
    p.add_argument(
        "--via",
        nargs="+",
        default=["chunks"],
        metavar="chunks|url URL",
        help="send the file in MQTT chunks (default), or let devices download it from URL",
    )
    p.add_argument("--chunk-size", type=int, default=262144, help="bytes per chunk")
    p.add_argument(
        "--accept-timeout",
        type=float,
        default=ACCEPT_TIMEOUT_S,
        metavar="S",
        help="chunks: seconds to wait for the device's acceptance before sending the file; "
        "0 sends at once (agents older than the progress topic) (default %(default)g)",
    )
    p.set_defaults(handler=run)


def chunk_source(size: int, chunk_size: int) -> dict[str, Any]:
    """A fresh ``source`` of a chunked transfer of ``size`` bytes."""
    if not 256 <= chunk_size <= 16 * 1024 * 1024:
        raise ConfigError("--chunk-size must be 256 .. 16777216 bytes")
    return {
        "transfer_id": f"t-{secrets.token_hex(6)}",
        "chunks": max(1, math.ceil(size / chunk_size)),
        "chunk_size": chunk_size,
    }


def _source(args: argparse.Namespace, size: int) -> dict[str, Any]:
    via = args.via
    if via == ["chunks"]:
        return chunk_source(size, args.chunk_size)
    if len(via) == 2 and via[0] == "url":
        return {"url": via[1]}
    raise ConfigError("--via takes 'chunks' or 'url URL'")


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


def run(args: argparse.Namespace) -> int:
    signed = signed_manifest(args)
    manifest = signed["manifest"]
    source = _source(args, int(manifest["size"]))
    cmd_id = args.id or f"push-{secrets.token_hex(4)}"
    client_id = f"edge-agent-push-{secrets.token_hex(4)}"
    r = route(args.prefix, args.device, args.group, client_id, DEPLOY)
    body = {"id": cmd_id, **signed, "source": source}
    session = Session(args, client_id)
    session.connect(args.broker, [r.reply_filter, r.response_topic, r.progress_filter])

    def show(device: str, reply: dict[str, Any]) -> None:
        print(json.dumps({"device": device, "reply": reply}), flush=True)

    try:
        props = session.response_props(r.response_topic, cmd_id.encode())
        info = session.publish(r.command, json.dumps(body).encode(), props)
        wait_acked([info], time.monotonic() + CONNECT_TIMEOUT_S)
        target = f"group {args.group}" if args.group else f"device {args.device}"
        print(
            f"deploy {cmd_id}: {manifest['name']} v{manifest['version']} "
            f"({manifest['size']} bytes) -> {target}",
            file=sys.stderr,
        )
        wait = args.timeout
        if "transfer_id" in source:
            ok = 1
            if args.accept_timeout > 0:
                ok, refused = await_acceptance(session, r, cmd_id, args.accept_timeout, args.expect)
                if not ok:
                    print(
                        f"no device accepted {cmd_id} ({refused} refused): no chunk sent",
                        file=sys.stderr,
                    )
                    wait = 0.5  # only the refusals already in hand
            if ok:
                send_chunks(session, r, args.model, source)
                print(f"sent {source['chunks']} chunks", file=sys.stderr)
        replies = collect(session, r, cmd_id, wait, args.expect, on_group_reply=show)
    finally:
        session.close()
    if not replies:
        print(f"no reply to {cmd_id} within {args.timeout:g} s", file=sys.stderr)
        return EXIT_NO_REPLY
    if args.group is None:
        print(json.dumps(replies[0][1]))
    return 0 if all(reply.get("ok") is True for _, reply in replies) else EXIT_ERROR_REPLY
