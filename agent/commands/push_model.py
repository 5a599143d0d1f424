"""`edge-agent push-model`: sign a model, send it to a device or fleet group, await replies.

Publishes the ``model/deploy`` command (QoS 1, MQTT 5 ResponseTopic + CorrelationData),
then for ``--via chunks`` the file in chunks on the upload topics, and prints each reply
as JSON. Exit status: 0 all ok, 1 an error reply, 3 no reply before ``--timeout``.
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
    p.set_defaults(handler=run)


def _source(args: argparse.Namespace, size: int) -> dict[str, Any]:
    via = args.via
    if via == ["chunks"]:
        if not 256 <= args.chunk_size <= 16 * 1024 * 1024:
            raise ConfigError("--chunk-size must be 256 .. 16777216 bytes")
        return {
            "transfer_id": f"t-{secrets.token_hex(6)}",
            "chunks": max(1, math.ceil(size / args.chunk_size)),
            "chunk_size": args.chunk_size,
        }
    if len(via) == 2 and via[0] == "url":
        return {"url": via[1]}
    raise ConfigError("--via takes 'chunks' or 'url URL'")


def _chunks(path: Path, chunk_size: int) -> Iterator[bytes]:
    with path.open("rb") as f:
        while block := f.read(chunk_size):
            yield block


def _send_chunks(session: Session, r: Route, path: Path, source: dict[str, Any]) -> None:
    tid, size = source["transfer_id"], source["chunk_size"]
    deadline = time.monotonic() + 600.0
    window: list[Any] = []
    for index, chunk in enumerate(_chunks(path, size)):
        window.append(session.publish(r.upload(tid, index), chunk))
        if len(window) >= INFLIGHT_CHUNKS:  # bounded memory: wait for the oldest acks
            wait_acked(window[: INFLIGHT_CHUNKS // 2], deadline)
            window = window[INFLIGHT_CHUNKS // 2 :]
    wait_acked(window, deadline)


def run(args: argparse.Namespace) -> int:
    signed = signed_manifest(args)
    manifest = signed["manifest"]
    source = _source(args, int(manifest["size"]))
    cmd_id = args.id or f"push-{secrets.token_hex(4)}"
    client_id = f"edge-agent-push-{secrets.token_hex(4)}"
    r = route(args.prefix, args.device, args.group, client_id, DEPLOY)
    body = {"id": cmd_id, **signed, "source": source}
    session = Session(args, client_id)
    session.connect(args.broker, [r.reply_filter, r.response_topic])
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
        if "transfer_id" in source:
            _send_chunks(session, r, args.model, source)
            print(f"sent {source['chunks']} chunks", file=sys.stderr)
        replies = collect(
            session,
            r,
            cmd_id,
            args.timeout,
            args.expect,
            on_group_reply=lambda device, reply: print(
                json.dumps({"device": device, "reply": reply}), flush=True
            ),
        )
    finally:
        session.close()
    if not replies:
        print(f"no reply to {cmd_id} within {args.timeout:g} s", file=sys.stderr)
        return EXIT_NO_REPLY
    if args.group is None:
        print(json.dumps(replies[0][1]))
    return 0 if all(reply.get("ok") is True for _, reply in replies) else EXIT_ERROR_REPLY
