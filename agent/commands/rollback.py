"""`edge-agent rollback`: put a device's (or a fleet group's) previous model back.

Sends ``model/rollback`` (the only way back past the anti-rollback check of
``model/deploy``), waits for each reply and prints one line per device. Exit status: 0
rolled back, 1 an error reply (e.g. ``no_previous``), 3 no reply before ``--timeout``.
"""

from __future__ import annotations

import argparse
from typing import Any

from agent.commands.remote import add_target_args, error_text, send_command

ROLLBACK = "model/rollback"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rollback", help="make a device's (or group's) previous model active again")
    add_target_args(p, timeout=60.0)
    p.add_argument("--json", action="store_true", help="print each reply as JSON")
    p.set_defaults(handler=run)


def summary(device: str | None, reply: dict[str, Any]) -> str:
    """One line: what the device runs now, or why it refused."""
    if reply.get("ok") is not True:
        return f"{device}: rollback failed: {error_text(reply)}"
    result = reply.get("result") or {}
    model = result.get("model") or {}
    previous = result.get("previous") or {}
    return (
        f"{device}: rolled back to {model.get('name', '?')} v{model.get('version', '?')}"
        f" (was v{previous.get('version', '?')})"
    )


def run(args: argparse.Namespace) -> int:
    return send_command(args, ROLLBACK, {}, summary=summary)
