"""Progress for long offline commands: a live line on a TTY, one summary line when piped."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

#: Redraw the live line at most this often (seconds); a redraw per frame floods slow terminals.
REDRAW_S = 0.2


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class Progress:
    """Counts work items; ``update()`` per item, ``close()`` once at the end.

    On a TTY it redraws ``label: done/total (pct) rate/s, ETA m:ss`` in place; otherwise it
    prints nothing until ``close``, which writes one summary line. ``total=None`` when the
    amount of work is unknown (no ETA then). Usable as a context manager.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "frames",
        stream: TextIO | None = None,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty() if live is None else live
        self._clock = clock
        self._start = clock()
        self._drawn = 0.0
        self._closed = False

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._start

    @property
    def rate(self) -> float:
        """Items per second so far (0 before the first item)."""
        elapsed = self.elapsed_s
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        """The live line as it would be drawn now."""
        rate = self.rate
        if self.total:
            pct = 100.0 * self.done / self.total
            text = f"{self.label}: {self.done}/{self.total} {self.unit} ({pct:.0f}%)"
            if rate > 0:
                text += f" {rate:.1f}/s, ETA {_clock((self.total - self.done) / rate)}"
            return text
        return f"{self.label}: {self.done} {self.unit}" + (f" {rate:.1f}/s" if rate > 0 else "")

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self._live:
            return
        now = self._clock()
        if now - self._drawn >= REDRAW_S or (self.total is not None and self.done >= self.total):
            self._drawn = now
            self._stream.write("\r\x1b[2K" + self.line())
            self._stream.flush()

    def close(self, summary: str | None = None) -> None:
        """Finish: clear the live line and print one summary line (default: count and rate).

        ``summary=""`` prints nothing (the caller reports the outcome itself).
        """
        if self._closed:
            return
        self._closed = True
        text = (
            summary
            if summary is not None
            else f"{self.label}: {self.done} {self.unit} in {self.elapsed_s:.1f} s "
            f"({self.rate:.1f}/s)"
        )
        prefix = "\r\x1b[2K" if self._live else ""
        if text or prefix:
            self._stream.write(prefix + (text + "\n" if text else ""))
            self._stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Steps:
    """Named steps of a long job (export): numbered lines on a TTY, silence when piped.

    ``verbose`` tells callers whether to let subprocess output through (on a TTY) or to
    capture it and show it only when a step fails.
    """

    def __init__(
        self, label: str, total: int, *, stream: TextIO | None = None, live: bool | None = None
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self.verbose = self._stream.isatty() if live is None else live
        self._start = time.monotonic()

    def step(self, text: str) -> None:
        self.done += 1
        if self.verbose:
            self._stream.write(f"[{self.done}/{self.total}] {text}\n")
            self._stream.flush()

    def close(self, summary: str) -> None:
        elapsed = time.monotonic() - self._start
        self._stream.write(f"{self.label}: {summary} ({elapsed:.0f} s)\n")
        self._stream.flush()
