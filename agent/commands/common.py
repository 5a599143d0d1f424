"""Helpers shared by subcommands: the --config argument, loading it, setting-typed options."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

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


def setting_type(model: type[BaseModel], field: str, key: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that applies the rules of config key ``key`` to an option.

    ``detect --conf 2`` is refused as ``detector.conf_threshold: 2`` is: the value is
    assigned to a section built from its defaults, with that section's validation.
    """

    def parse(text: str) -> Any:
        section = model.model_construct()
        try:
            setattr(section, field, text)
        except ValidationError as e:
            msg = e.errors()[0]["msg"]
            raise argparse.ArgumentTypeError(f"{text!r}: {msg} (the rule of {key})") from e
        return getattr(section, field)

    parse.__name__ = key  # argparse names the type in some messages
    return parse
