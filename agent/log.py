"""structlog setup: JSON lines when stdout is not a TTY (journald), readable on a TTY."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(level: str = "info", *, json: bool | None = None) -> None:
    """Configure structlog once for the process.

    ``json=None`` chooses by whether stdout is a terminal.
    """
    use_json = not sys.stdout.isatty() if json is None else json
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if use_json:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A bound logger tagged with the component name.

    Lazy: a module-level logger created before ``configure_logging`` still uses the
    configuration in force when it logs (``.bind()`` here would freeze the defaults).
    """
    return structlog.get_logger(component=name)
