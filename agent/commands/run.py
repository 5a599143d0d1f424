"""`edge-agent run`: the daemon."""

from __future__ import annotations

import argparse

from agent.commands.common import add_config_arg, settings_from_args
from agent.log import configure_logging


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
    from agent.service.daemon import Agent  # heavy imports only once the config is valid

    return Agent(settings).run()
