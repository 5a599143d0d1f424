"""`edge-agent run`: the daemon."""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys

from agent.commands.common import add_config_arg, settings_from_args
from agent.errors import AgentError
from agent.log import configure_logging, get_logger, route_native_output, set_native_log_level


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
    json_logs = {"auto": None, "json": True, "console": False}[args.log_format]
    as_json = json_logs is True or (json_logs is None and not sys.stdout.isatty())
    try:
        settings = settings_from_args(args)
    except AgentError as e:
        if not as_json:
            raise  # the CLI prints it
        # Still one line on stderr, but a JSON one: the journal stays parseable.
        configure_logging("info", json=True, stream=sys.stderr)
        return _failed(e)
    configure_logging(settings.log_level, json=json_logs)
    if as_json:
        route_native_output()
    set_native_log_level(settings.native_log_level)
    # `kill -USR1 <pid>`: every thread's stack into the log, the agent running on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        from agent.service.daemon import Agent  # heavy imports only once the config is valid

        return Agent(settings).run()
    except AgentError as e:
        return _failed(e)


def _failed(e: AgentError) -> int:
    """Why the agent stops, at error (a journal filtered on errors shows it), not as a
    native_output line of whatever text reached stderr."""
    lines = str(e).splitlines()
    # A config with several errors names each one (``errors``), not only the first.
    extra = {"errors": lines} if len(lines) > 1 else {}
    get_logger("agent").error(
        "agent_failed", error=str(e), code=e.code, exit_code=e.exit_code, **extra
    )
    return e.exit_code
