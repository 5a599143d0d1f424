"""`edge-agent config set|show|reset`: hot-reloadable settings of a running device or group.

``edge-agent config set --device pi-01 detector.conf_threshold=0.4 publish.mode=on_change``
sends ``config/set`` with the patch ``{"detector": {"conf_threshold": 0.4}, "publish":
{"mode": "on_change"}}``; values are read as YAML scalars (``0.4``, ``[person]``, ``null``).
The device validates the whole patch with the config's rules and applies all or nothing.
Exit status: 0 applied, 1 an error reply, 3 no reply before ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from agent.commands.remote import add_target_args, error_text, send_command
from agent.errors import ConfigError
from agent.service.patchkeys import patch_key_error
from agent.settings import load_settings

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
    add_more_parsers(actions)


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


CONFIG_GET = "config/get"
CONFIG_RESET = "config/reset"


def add_more_parsers(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``config show`` and ``config reset``: the effective config, and dropping overrides."""
    show = actions.add_parser(
        "show",
        help="the effective hot-reloadable config of a device (--device) and where each value "
        "came from (runtime, env, file); without --device/--group, this machine's (--config)",
    )
    add_target_args(show, timeout=15.0)
    for group in show._mutually_exclusive_groups:  # --device is optional here: local view
        group.required = False
    if "--config" not in show._option_string_actions:
        show.add_argument(
            "--config", type=Path, default=None, help="local view: this agent config file"
        )
    show.add_argument("--json", action="store_true", help="print the reply as JSON")
    show.set_defaults(handler=run_show)
    reset = actions.add_parser(
        "reset",
        help="drop the runtime overrides (config set) and apply the file's values live",
    )
    add_target_args(reset, timeout=30.0)
    reset.add_argument("--json", action="store_true", help="print each reply as JSON")
    reset.set_defaults(handler=run_reset)


def show_lines(device: str | None, result: dict[str, Any]) -> list[str]:
    """One line per hot-reloadable value: path, value, source (and when, for runtime)."""
    lines = [f"{device}:"] if device else []
    for path, item in result.get("values", {}).items():
        source = item.get("source", "?")
        if source == "runtime":
            source = f"runtime ({item.get('ts')}; without it: {json.dumps(item.get('base'))})"
        elif source == "env":
            source = f"env ({item.get('env')})"
        value = json.dumps(item.get("value"), separators=(",", ":"))
        lines.append(f"  {path} = {value}  [{source}]")
    return lines


def show_summary(device: str | None, reply: dict[str, Any]) -> str:
    if reply.get("ok") is not True:
        return f"{device}: config show failed: {error_text(reply)}"
    return "\n".join(show_lines(device, reply.get("result") or {}))


def reset_summary(device: str | None, reply: dict[str, Any]) -> str:
    if reply.get("ok") is not True:
        return f"{device}: config reset failed: {error_text(reply)}"
    result = reply.get("result") or {}
    dropped = ", ".join(result.get("dropped") or []) or "none"
    line = f"{device}: overrides dropped: {dropped}"
    if result.get("persisted") is False:
        line += f" (warning: {result.get('warning')})"
    return line


def run_show(args: argparse.Namespace) -> int:
    if args.device is None and args.group is None:
        return show_local(args.config, as_json=args.json)
    return send_command(args, CONFIG_GET, {}, summary=show_summary)


def show_local(path: Path | None, *, as_json: bool) -> int:
    """The effective config an agent started here with ``path`` would run with."""
    from agent.service.overrides import RuntimeOverrides

    settings = load_settings(path)
    result = RuntimeOverrides.view(settings)
    if as_json:
        print(json.dumps(result))
    else:
        print("\n".join(show_lines(None, result)))
    return 0


def run_reset(args: argparse.Namespace) -> int:
    return send_command(args, CONFIG_RESET, {}, summary=reset_summary)
