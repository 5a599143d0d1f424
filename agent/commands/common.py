"""Helpers shared by subcommands: the --config argument and loading it."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.settings import AgentSettings, load_settings


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML config (default: configs/agent.yaml); env EDGE_AGENT__* overrides it",
    )


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    return load_settings(args.config)
