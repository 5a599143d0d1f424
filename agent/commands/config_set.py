"""`edge-agent config set`: change hot-reloadable settings of a running device or group.

``edge-agent config set --device pi-01 detector.conf_threshold=0.4 publish.mode=on_change``
sends ``config/set`` with the patch ``{"detector": {"conf_threshold": 0.4}, "publish":
{"mode": "on_change"}}``; values are read as YAML scalars (``0.4``, ``[person]``, ``null``).
The device validates the whole patch with the config's rules and applies all or nothing.
Exit status: 0 applied, 1 an error reply, 3 no reply before ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from agent.commands.remote import add_target_args, error_text, send_command
from agent.errors import ConfigError
from agent.service.patchkeys import patch_key_error

CONFIG_SET = "config/set"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help="change settings of running agents over MQTT")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = actions.add_parser(
        "set",
        help="set hot-reloadable keys: detector thresholds and classes, publish.mode, "
        "cameras.<id>.fps",
    )
    s.add_argument(
        "assignments",
        nargs="+",
        metavar="KEY=VALUE",
        help="e.g. detector.conf_threshold=0.4 cameras.front.fps=5",
    )
    add_target_args(s, timeout=30.0)
    s.add_argument("--json", action="store_true", help="print each reply as JSON")
    s.set_defaults(handler=run)


def parse_assignments(assignments: list[str]) -> dict[str, Any]:
    """``["detector.conf_threshold=0.4"]`` -> ``{"detector": {"conf_threshold": 0.4}}``."""
    patch: dict[str, Any] = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or any(not part for part in path):
            raise ConfigError(f"{item!r}: expected KEY=VALUE, e.g. detector.conf_threshold=0.4")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"{item!r}: the value is not valid YAML") from e
        node = patch
        for depth, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{item!r}: {'.'.join(path[: depth + 1])} is already a value")
            node = child
        if path[-1] in node:
            raise ConfigError(f"{item!r}: {key.strip()} is given twice")
        node[path[-1]] = value
    return patch


def summary(device: str | None, reply: dict[str, Any]) -> str:
    """One line: the values now in force, or why the patch was refused."""
    if reply.get("ok") is not True:
        return f"{device}: config set failed: {error_text(reply)}"
    return f"{device}: applied: {json.dumps(reply.get('result'), separators=(',', ':'))}"


def run(args: argparse.Namespace) -> int:
    patch = parse_assignments(args.assignments)
    error = patch_key_error(patch)
    if error is not None:
        raise ConfigError(f"{error} (nothing was sent)")
    return send_command(args, CONFIG_SET, {"patch": patch}, summary=summary)
