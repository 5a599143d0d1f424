"""`edge-agent pause|resume`: stop or restart a device's (or group's) inference.

Cameras stay connected while paused; the heartbeat says ``paused``. Exit status: 0 done,
1 an error reply (e.g. ``unsigned_command``), 3 no reply before ``--timeout``.
"""

from __future__ import annotations

import argparse
from typing import Any

from agent.commands.remote import add_target_args, error_text, send_command


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, text in (("pause", "stop inference (cameras stay open)"), ("resume", "restart it")):
        p = sub.add_parser(name, help=f"{text} on a device or group")
        add_target_args(p, timeout=30.0)
        p.add_argument("--json", action="store_true", help="print each reply as JSON")
        p.set_defaults(handler=run, remote_command=name)


def summary(device: str | None, reply: dict[str, Any]) -> str:
    if reply.get("ok") is not True:
        return f"{device}: failed: {error_text(reply)}"
    return f"{device}: {(reply.get('result') or {}).get('state', 'done')}"


def run(args: argparse.Namespace) -> int:
    return send_command(args, args.remote_command, {}, summary=summary)
