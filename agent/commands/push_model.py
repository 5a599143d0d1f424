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
import secrets
import sys
import time
from typing import Any

from agent.commands.remote import (
    EXIT_ERROR_REPLY,
    EXIT_NO_REPLY,
    add_target_args,
    open_target_session,
    target_from_args,
)
from agent.commands.sign import add_model_args, signed_manifest
from agent.errors import ConfigError
from agent.fleet.session import CONNECT_TIMEOUT_S, collect, route, wait_acked
from agent.fleet.transfer import DEPLOY, await_acceptance, chunk_source, send_chunks

ACCEPT_TIMEOUT_S = 15.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "push-model", help="deploy a signed model to a device or fleet group over MQTT"
    )
    add_target_args(p, timeout=120.0, key=False)
    add_model_args(p)  # its --key signs the manifest and the command
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


def _source(args: argparse.Namespace, size: int) -> dict[str, Any]:
    via = args.via
    if via == ["chunks"]:
        return chunk_source(size, args.chunk_size)
    if len(via) == 2 and via[0] == "url":
        return {"url": via[1]}
    raise ConfigError("--via takes 'chunks' or 'url URL'")


def run(args: argparse.Namespace) -> int:
    signed = signed_manifest(args)
    manifest = signed["manifest"]
    source = _source(args, int(manifest["size"]))
    cmd_id = args.id or f"push-{secrets.token_hex(4)}"
    client_id = f"edge-agent-push-{secrets.token_hex(4)}"
    target = target_from_args(args)
    r = route(target.prefix, args.device, args.group, client_id, DEPLOY)
    body = {"id": cmd_id, **signed, "source": source}
    filters = [r.reply_filter, r.response_topic, r.progress_filter]
    session = open_target_session(args, target, client_id, filters)

    def show(device: str, reply: dict[str, Any]) -> None:
        print(json.dumps({"device": device, "reply": reply}), flush=True)

    try:
        info = session.command(r.command, body, r.response_topic, cmd_id.encode())
        wait_acked([info], time.monotonic() + CONNECT_TIMEOUT_S)
        to = f"group {args.group}" if args.group else f"device {args.device}"
        print(
            f"deploy {cmd_id}: {manifest['name']} v{manifest['version']} "
            f"({manifest['size']} bytes) -> {to}",
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
