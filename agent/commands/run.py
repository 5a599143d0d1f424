"""`edge-agent run`: the daemon."""

from __future__ import annotations

import argparse
import sys

from agent.commands.common import add_config_arg, settings_from_args
from agent.log import configure_logging, route_native_output, set_native_log_level


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run", help="capture, detect and publish over MQTT until stopped (the service)"
    )
    add_config_arg(p)
    p.add_argument(
        "--log-format",
        choices=["auto", "json", "console"],
        default="auto",
        help="auto: JSON when stdout is not a terminal (journald), readable on a terminal",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    json_logs = {"auto": None, "json": True, "console": False}[args.log_format]
    configure_logging(settings.log_level, json=json_logs)
    set_native_log_level(settings.native_log_level)
    if json_logs is True or (json_logs is None and not sys.stdout.isatty()):
        route_native_output()
    from agent.service.daemon import Agent  # heavy imports only once the config is valid

    return Agent(settings).run()
