"""structlog setup: JSON lines when stdout is not a TTY (journald), readable on a TTY."""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
from typing import Any, TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    level: str = "info", *, json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog once for the process.

    ``json=None`` chooses by whether stdout is a terminal. ``stream``: where lines go
    (stdout by default; a command whose stdout is its result logs to stderr).
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
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stdout),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A bound logger tagged with the component name.

    Lazy: a module-level logger created before ``configure_logging`` still uses the
    configuration in force when it logs (``.bind()`` here would freeze the defaults).
    """
    return structlog.get_logger(component=name)


#: native_log_level -> (OpenCV's cv2.utils.logging level, FFmpeg's av_log level).
NATIVE_LEVELS = {
    "silent": (0, -8),
    "error": (2, 16),
    "warning": (3, 24),
    "info": (4, 32),
    "debug": (5, 48),
}
_NATIVE_TAG = re.compile(r"^\[\s*(?P<tag>WARN|ERROR|INFO|DEBUG|FATAL|VERBOSE)[^\]]*\]\s*")
_TAG_LEVEL = {"WARN": "warning", "ERROR": "error", "FATAL": "error", "INFO": "info"}
_native_lock = threading.Lock()
_native_routed = threading.Event()


def set_native_log_level(level: str) -> None:
    """How much OpenCV and FFmpeg (inside OpenCV) print on their own.

    OpenCV takes the level at once; FFmpeg's is read when OpenCV opens its first FFmpeg
    stream, so this runs before any capture thread starts (setenv is not thread-safe).
    """
    cv_level, av_level = NATIVE_LEVELS[level]
    os.environ["OPENCV_FFMPEG_LOGLEVEL"] = str(av_level)
    from agent.cv import cv2

    cv2.utils.logging.setLogLevel(cv_level)


def native_line_event(line: str) -> tuple[str, str]:
    """(level, text) of one line that a native library wrote to stderr."""
    match = _NATIVE_TAG.match(line)
    if match is None:
        return "warning", line
    return _TAG_LEVEL.get(match["tag"], "debug"), line[match.end() :]


def route_native_output() -> None:
    """Send whatever is written to file descriptor 2 through the logger, line by line.

    OpenCV, FFmpeg and onnxruntime print to stderr from C/C++, past Python's logging; in
    journald those lines land between the JSON ones and break `jq`. Here fd 2 becomes a
    pipe that a thread reads, logging each line as ``native_output`` (JSON when JSON is
    configured). At exit fd 2 is given back and the pipe drained, so a last traceback is
    logged too. Idempotent.
    """
    with _native_lock:
        if _native_routed.is_set():
            return
        _native_routed.set()
    read_fd, write_fd = os.pipe()
    saved_fd = os.dup(2)
    sys.stderr.flush()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    log = get_logger("native")

    def pump() -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                text = raw.decode("utf-8", "replace").rstrip()
                if text:
                    level, message = native_line_event(text)
                    getattr(log, level)("native_output", line=message)

    reader = threading.Thread(target=pump, name="native-log", daemon=True)
    reader.start()

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(saved_fd, 2)  # the pipe's last writer closes: the reader sees EOF
        reader.join(2.0)

    atexit.register(restore)
