"""Frame-rate caps and media clocks: pure arithmetic on monotonic times."""

from __future__ import annotations


class RateGate:
    """Admits at most ``fps`` frames per second from a stream of frame times.

    ``slack`` (about half the source's frame interval) lets a frame that arrives a little
    early through; without it a 30 FPS camera capped at 10 would alias down to 7.5.
    """

    def __init__(self, fps: float, slack_s: float = 0.0) -> None:
        if fps <= 0:
            raise ValueError(f"fps cap must be positive, got {fps}")
        self.period = 1.0 / fps
        self.slack = min(slack_s, self.period / 2.0)
        self._next: float | None = None

    def admit(self, t: float) -> bool:
        """Whether a frame at time ``t`` passes; if it does, the next one is due a period on."""
        if self._next is not None and t < self._next - self.slack:
            return False
        # After a gap longer than a period the schedule restarts at t instead of bursting.
        if self._next is None or t - self._next > self.period:
            self._next = t + self.period
        else:
            self._next += self.period
        return True

    def wait_s(self, t: float) -> float:
        """Seconds from ``t`` until a frame would be admitted (0 when it would be now)."""
        return 0.0 if self._next is None else max(0.0, self._next - self.slack - t)


def file_gate(cap_fps: float | None, media_fps: float) -> RateGate | None:
    """The gate a recording played at ``media_fps`` passes under a cap of ``cap_fps``, fed
    each frame's media time (None: every frame passes), as the live reader admits it."""
    if cap_fps is None or cap_fps >= media_fps:
        return None
    return RateGate(cap_fps, 0.5 / media_fps)


class MediaClock:
    """Due times of a file's frames when played at ``fps`` from a start time.

    A player that falls more than ``max_lag_s`` behind (slow decode, a suspended machine)
    restarts the clock at the current time rather than racing to catch up.
    """

    def __init__(self, fps: float, start: float, max_lag_s: float = 1.0) -> None:
        if fps <= 0:
            raise ValueError(f"media fps must be positive, got {fps}")
        self.fps = fps
        self.period = 1.0 / fps
        self._start = start
        self._index = 0
        self._max_lag = max_lag_s

    def due(self, now: float) -> float:
        """Monotonic time at which the current frame should be shown."""
        due = self._start + self._index * self.period
        if now - due > self._max_lag:
            self._start = now - self._index * self.period
            due = now
        return due

    def advance(self) -> None:
        self._index += 1
