"""structlog setup: JSON lines when stdout is not a TTY (journald), readable on a TTY."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import re
import sys
import threading
from collections import deque
from typing import Any, TextIO

import structlog

from agent.causes import cause_of_line
from agent.redact import redact


class _Routing:
    """Where lines go: the stream configure_logging was given, and the saved fd 1 and 2."""

    stream: TextIO | None = None
    #: (stdout, stderr) the process had before route_native_output made fd 1 and 2 pipes.
    saved: tuple[TextIO, TextIO] | None = None


_routing = _Routing()

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
            _redact_values,
            structlog.processors.JSONRenderer(),
        ]
    else:
        processors += [
            _redact_values,
            structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty()),
        ]
    _routing.stream = stream
    if _routing.saved is not None:  # fd 1 and 2 are pipes now: write where they went
        stream = _routing.saved[1] if stream is sys.stderr else _routing.saved[0]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stdout),
        cache_logger_on_first_use=False,
    )


def _redact_values(logger: object, name: str, event: dict[str, Any]) -> dict[str, Any]:
    """No log line carries a URL's credentials or a secret parameter (agent.redact)."""
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value)
        elif isinstance(value, (dict, list, tuple)):
            event[key] = _redact_nested(value)
    return event


def _redact_nested(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_nested(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_nested(v) for v in value]
    return value


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
# OpenCV's FFmpeg log callback printf()s to *stdout*: "[OPENCV:FFMPEG:16] ..." (av_log level).
_FFMPEG_TAG = re.compile(r"^\[OPENCV:FFMPEG:(?P<level>-?\d+)\]\s?")
# Where one FFmpeg message starts on a line that holds several (see NativeLines.feed_all).
_FFMPEG_START = re.compile(r"(?=\[OPENCV:FFMPEG:-?\d+\])")
# onnxruntime's default sink: "2026-11-26 22:50:15.08 [W:onnxruntime:, graph.cc:3 f] text".
_ORT_TAG = re.compile(r"^(?:\S+ \S+ )?\[(?P<tag>[VIWEF]):onnxruntime:[^\]]*\]\s*")
_ORT_LEVEL = {"V": "debug", "I": "info", "W": "warning", "E": "error", "F": "error"}
_TRACEBACK = re.compile(
    r"^(Traceback \(most recent call last\):|Exception in thread |During handling of the above"
    r"|The above exception was the direct cause)"
)
_native_lock = threading.Lock()


def set_native_log_level(level: str) -> None:
    """How much OpenCV and FFmpeg (inside OpenCV) print on their own.

    OpenCV takes the level at once; FFmpeg's is read when OpenCV opens its first FFmpeg
    stream, so this runs before any capture thread starts (setenv is not thread-safe).
    """
    cv_level, av_level = NATIVE_LEVELS[level]
    os.environ["OPENCV_FFMPEG_LOGLEVEL"] = str(av_level)
    from agent.cv import cv2

    cv2.utils.logging.setLogLevel(cv_level)


def _ffmpeg_level(av_level: int) -> str:
    if av_level <= 16:  # AV_LOG_PANIC, FATAL, ERROR
        return "error"
    return "warning" if av_level <= 24 else ("info" if av_level <= 32 else "debug")


def native_line_event(line: str) -> tuple[str, str]:
    """(level, text) of one line a native library wrote: OpenCV, FFmpeg and ORT tags."""
    match = _NATIVE_TAG.match(line)
    if match is not None:
        return _TAG_LEVEL.get(match["tag"], "debug"), line[match.end() :]
    match = _FFMPEG_TAG.match(line)
    if match is not None:
        return _ffmpeg_level(int(match["level"])), line[match.end() :]
    match = _ORT_TAG.match(line)
    if match is not None:
        return _ORT_LEVEL[match["tag"]], line[match.end() :]
    return "warning", line


class NativeLines:
    """Turns one pipe's lines into (level, text, cause); keeps what spans lines.

    FFmpeg continues a message over several lines with the tag on the first only (an SDP
    dump), and a Python traceback (an uncaught exception: the process is dying) is error
    from its first line to the exception's own line.
    """

    def __init__(self) -> None:
        self._ffmpeg_level: str | None = None
        self._in_traceback = False
        # Levels of FFmpeg tags whose text another thread's message took the place of.
        self._untexted: deque[str] = deque(maxlen=8)

    def feed_all(self, line: str) -> list[tuple[str, str, str | None]]:
        """``feed`` for each FFmpeg message on ``line``. OpenCV's FFmpeg callback prints a
        message's tag and its text in two calls, and with several cameras opening at once
        another thread prints between them: a line can hold one message's tag, then
        another's tag and text (``[OPENCV:FFMPEG:48] [OPENCV:FFMPEG:16] method DESCRIBE
        failed: 404``: an error, not debug), or one message and then the next. Each tag
        starts a message; a tag with no text gives its level to the next untagged line,
        which is its text."""
        out = []
        for piece in _FFMPEG_START.split(line):
            tag = _FFMPEG_TAG.match(piece)
            if tag is not None and not piece[tag.end() :].strip():
                self._untexted.append(_ffmpeg_level(int(tag["level"])))
            elif piece.strip():
                out.append(self.feed(piece.rstrip()))
        return out

    def feed(self, line: str) -> tuple[str, str, str | None]:
        text = redact(line)
        if _TRACEBACK.match(line):
            self._in_traceback = True
            return "error", text, None
        if self._in_traceback:
            if not line[:1].isspace():
                self._in_traceback = False  # the exception's line: the last of the block
            return "error", text, cause_of_line(text)
        level, body = native_line_event(text)
        if _FFMPEG_TAG.match(line):
            self._ffmpeg_level = level
        elif (self._untexted or self._ffmpeg_level is not None) and not _tagged(line):
            # Untagged: the text of a tag printed on its own, else the rest of FFmpeg's
            # last message.
            level = self._untexted.popleft() if self._untexted else self._ffmpeg_level or level
        else:
            self._ffmpeg_level = None
        return level, body, cause_of_line(body)


def _tagged(line: str) -> bool:
    return any(p.match(line) for p in (_NATIVE_TAG, _FFMPEG_TAG, _ORT_TAG))


def _line_buffer_c_stdout() -> None:
    """C's stdout is block-buffered on a pipe: FFmpeg's lines would come out 4 KiB late."""
    try:
        libc = ctypes.CDLL(None)
        c_stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.fflush(c_stdout)
        libc.setvbuf(c_stdout, None, 1, 0)  # _IOLBF
    except (OSError, ValueError, AttributeError):
        pass  # not glibc: lines still arrive, in blocks


def _flush_c_stdio() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def route_native_output(*, python_streams: bool = False) -> None:
    """Send whatever is written to file descriptors 1 and 2 through the logger, by line.

    OpenCV, FFmpeg and onnxruntime print from C/C++, past Python's logging (OpenCV's
    FFmpeg callback to stdout, the rest to stderr); in journald those lines land between
    the JSON ones and break `jq`. Here fd 1 and 2 become pipes that threads read, logging
    each line as ``native_output`` at its mapped level, redacted, with the ``cause`` it
    names (JSON when JSON is configured). The logger writes to the original stdout (or
    stderr); ``python_streams`` keeps Python's ``sys.stdout`` and ``sys.stderr`` there too
    (a command's table and its error line). At
    exit the descriptors are given back and the pipes drained, so a last traceback is
    logged too. Idempotent.
    """
    with _native_lock:
        if _routing.saved is not None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        _line_buffer_c_stdout()
        saved = (os.dup(1), os.dup(2))
        out = os.fdopen(saved[0], "w", buffering=1, encoding="utf-8", errors="replace")
        err = os.fdopen(saved[1], "w", buffering=1, encoding="utf-8", errors="replace")
        _routing.saved = (out, err)
        # The logger keeps writing where it wrote (its stream is now one of the saved fds).
        target = err if _routing.stream is sys.stderr else out
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=target))
        readers = [_pump(fd) for fd in (1, 2)]
    if python_streams:
        sys.stdout, sys.stderr = out, err

    def restore() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        _flush_c_stdio()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)  # the pipe's last writer closes: its reader sees EOF
        for reader in readers:
            reader.join(2.0)

    atexit.register(restore)


def _pump(fd: int) -> threading.Thread:
    """Make ``fd`` a pipe and start the thread that logs its lines."""
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, fd)
    os.close(write_fd)
    # Native lines are filtered by native_log_level at their source, not by log_level.
    # Lazy (no .bind): it must write where the logger writes *after* routing, never fd 1.
    log = structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG), component="native"
    )

    def pump() -> None:
        lines = NativeLines()
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                text = raw.decode("utf-8", "replace").rstrip()
                for level, message, cause in lines.feed_all(text):
                    extra = {} if cause is None else {"cause": cause}
                    getattr(log, level)("native_output", line=message, **extra)

    reader = threading.Thread(target=pump, name=f"native-log-{fd}", daemon=True)
    reader.start()
    return reader
