"""Bounded runtime statistics: latency histogram, rate meter, process and system figures."""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from pathlib import Path


class LatencyHistogram:
    """Log-spaced buckets from 0.1 ms to ~100 s: O(1) memory however long the agent runs.

    Percentiles are accurate to one bucket (about 5% relative width).
    """

    _LO_MS = 0.1
    _GROWTH = 1.05

    def __init__(self, buckets: int = 290) -> None:
        self._counts = [0] * buckets
        self._n = 0
        self._lock = threading.Lock()
        self._log_growth = math.log(self._GROWTH)

    def _bucket(self, ms: float) -> int:
        if ms <= self._LO_MS:
            return 0
        i = int(math.log(ms / self._LO_MS) / self._log_growth) + 1
        return min(i, len(self._counts) - 1)

    def _upper_ms(self, i: int) -> float:
        return self._LO_MS * self._GROWTH**i

    def add(self, ms: float) -> None:
        i = self._bucket(ms)
        with self._lock:
            self._counts[i] += 1
            self._n += 1

    @property
    def count(self) -> int:
        return self._n

    def percentile(self, p: float) -> float | None:
        """The p-th percentile (0..100) in ms, or None when empty."""
        with self._lock:
            if self._n == 0:
                return None
            target = max(1, math.ceil(self._n * p / 100.0))
            seen = 0
            for i, c in enumerate(self._counts):
                seen += c
                if seen >= target:
                    # Geometric middle of the bucket: unbiased within its width.
                    lo = self._upper_ms(i - 1) if i > 0 else 0.0
                    return round(math.sqrt(max(lo, 1e-3) * self._upper_ms(i)), 2)
        return None  # pragma: no cover

    def reset(self) -> None:
        with self._lock:
            self._counts = [0] * len(self._counts)
            self._n = 0


class RateMeter:
    """Events per second over a sliding window (bounded by the window's event count)."""

    def __init__(self, window_s: float = 5.0, max_events: int = 4096) -> None:
        self._window = window_s
        self._times: deque[float] = deque(maxlen=max_events)
        self._lock = threading.Lock()

    def tick(self, now: float | None = None) -> None:
        with self._lock:
            self._times.append(time.monotonic() if now is None else now)

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._times and self._times[0] < now - self._window:
                self._times.popleft()
            n = len(self._times)
            if n < 2:
                return 0.0
            span = max(now - self._times[0], 1e-6)
        return round((n - 1) / span, 2)


class ProcessStats:
    """CPU percent (since the previous call), RSS, load and temperature, from /proc and /sys."""

    def __init__(self) -> None:
        self._last_cpu = self._cpu_seconds()
        self._last_wall = time.monotonic()

    @staticmethod
    def _cpu_seconds() -> float:
        t = os.times()
        return t.user + t.system

    def cpu_percent(self) -> float:
        cpu, wall = self._cpu_seconds(), time.monotonic()
        d_wall = wall - self._last_wall
        pct = 100.0 * (cpu - self._last_cpu) / d_wall if d_wall > 0 else 0.0
        self._last_cpu, self._last_wall = cpu, wall
        return round(pct, 1)

    @staticmethod
    def rss_mb() -> float:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
        except OSError:
            pass
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)

    @staticmethod
    def load1() -> float | None:
        try:
            return round(os.getloadavg()[0], 2)
        except OSError:
            return None

    @staticmethod
    def temp_c(root: Path = Path("/sys/class/thermal")) -> float | None:
        """The hottest thermal zone in deg C (Pi: cpu-thermal; Jetson: several), else None."""
        best: float | None = None
        try:
            zones = list(root.glob("thermal_zone*/temp"))
        except OSError:
            return None
        for zone in zones:
            try:
                value = int(zone.read_text().strip()) / 1000.0
            except (OSError, ValueError):
                continue
            if -40.0 < value < 150.0 and (best is None or value > best):
                best = value
        return None if best is None else round(best, 1)
