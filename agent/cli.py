"""edge-agent command line. Each subcommand lives in its own module under agent/commands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from agent import __version__
from agent.errors import AgentError

#: subcommand name -> module under agent.commands (imported only when used).
COMMANDS: dict[str, str] = {
    "run": "run",
    "detect": "detect",
    "track": "track",
    "watch": "watch",
    "providers": "providers",
    "doctor": "doctor",
    "keygen": "keygen",
    "sign": "sign",
    "push-model": "push_model",
    "rollback": "rollback",
    "pause": "pause",
    "config": "config_set",
    "fleet": "fleet",
    "export": "export",
    "quantize": "quantize",
    "evaluate": "evaluate",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge-agent",
        description="Edge vision agent: YOLO on ONNX Runtime, detections over MQTT.",
    )
    parser.add_argument("--version", action="version", version=f"edge-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        importlib.import_module(f"agent.commands.{module}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except AgentError as e:
        for line in str(e).splitlines() or [""]:  # a config with several errors: one each
            print(f"edge-agent {args.command}: error: {line}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `edge-agent detect | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code
