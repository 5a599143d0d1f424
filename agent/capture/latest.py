"""1-deep frame slots and a fair, sleeping consumer over several of them.

All slots of one ``RoundRobinFeed`` share the feed's lock and its "frame ready" condition,
so a consumer waiting for *any* camera sleeps on one condition and wakes on the first
``put``: no busy polling, no lost wake-ups. Each slot has its own "space" condition on the
same lock for producers that must not drop (files with ``realtime: false``).
"""

from __future__ import annotations

import threading
import time

from agent.frames import Frame


class LatestFrameSlot:
    """Holds at most one frame: the newest one not yet consumed.

    ``put`` replaces an unconsumed frame and counts it as dropped. Counters are plain ints
    updated under the lock; reading them without it is fine for statistics.
    """

    def __init__(
        self,
        camera_id: str,
        *,
        lock: threading.Lock | None = None,
        ready: threading.Condition | None = None,
    ) -> None:
        self.camera_id = camera_id
        self._lock = lock if lock is not None else threading.Lock()
        self._ready = ready if ready is not None else threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._frame: Frame | None = None
        self.frames_in = 0
        self.frames_dropped = 0
        self.frames_out = 0

    @property
    def has_frame(self) -> bool:
        return self._frame is not None

    def put(self, frame: Frame) -> Frame | None:
        """Store ``frame``; return the frame it replaced (never seen by any consumer).

        The caller may reuse the returned frame's image as its next read buffer: nothing
        else holds a reference to it.
        """
        with self._lock:
            dropped = self._frame
            self._frame = frame
            self.frames_in += 1
            if dropped is not None:
                self.frames_dropped += 1
            self._ready.notify_all()
        return dropped

    def put_wait(self, frame: Frame, timeout: float) -> bool:
        """Store ``frame`` once the slot is empty; False (frame not stored) on timeout."""
        with self._lock:
            if not self._space.wait_for(lambda: self._frame is None, timeout):
                return False
            self._frame = frame
            self.frames_in += 1
            self._ready.notify_all()
        return True

    def wait_space(self, timeout: float) -> bool:
        """Wait until the slot is empty (True) or ``timeout`` passes (False); stores nothing.

        With one producer per slot, a frame put right after a True return is never dropped.
        """
        with self._lock:
            return self._space.wait_for(lambda: self._frame is None, timeout)

    def _take_locked(self) -> Frame | None:
        frame = self._frame
        if frame is not None:
            self._frame = None
            self.frames_out += 1
            self._space.notify()
        return frame

    def try_get(self) -> Frame | None:
        """The waiting frame, or None at once."""
        with self._lock:
            return self._take_locked()

    def get(self, timeout: float) -> Frame | None:
        """The waiting frame, or the next one put within ``timeout`` seconds, else None."""
        with self._lock:
            if self._frame is None:
                self._ready.wait_for(lambda: self._frame is not None, timeout)
            return self._take_locked()

    def clear(self) -> Frame | None:
        """Discard the waiting frame (e.g. a camera removed); not counted as consumed."""
        with self._lock:
            frame, self._frame = self._frame, None
            self._space.notify_all()
            return frame


class RoundRobinFeed:
    """Takes the newest frame of each camera in turn; sleeps while none has one.

    Implements the inference engine's ``FrameFeed`` (``get(timeout)``, ``ready_count()``).
    Several consumer threads may call ``get`` at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._slots: list[LatestFrameSlot] = []
        self._next = 0

    def add(self, camera_id: str) -> LatestFrameSlot:
        """A new slot for ``camera_id`` that wakes this feed's consumers."""
        with self._lock:
            if any(s.camera_id == camera_id for s in self._slots):
                raise ValueError(f"camera {camera_id!r} already has a slot in this feed")
            slot = LatestFrameSlot(camera_id, lock=self._lock, ready=self._ready)
            self._slots.append(slot)
            return slot

    def remove(self, camera_id: str) -> None:
        with self._lock:
            self._slots = [s for s in self._slots if s.camera_id != camera_id]
            self._next = 0

    @property
    def slots(self) -> tuple[LatestFrameSlot, ...]:
        return tuple(self._slots)

    def _take_next_locked(self) -> Frame | None:
        n = len(self._slots)
        for i in range(n):
            k = (self._next + i) % n
            frame = self._slots[k]._take_locked()
            if frame is not None:
                # The next search starts after this camera, so a fast camera cannot starve
                # a slow one: each camera with a frame gets one turn per round.
                self._next = (k + 1) % n
                return frame
        return None

    def get(self, timeout: float) -> Frame | None:
        """The next camera's newest frame in round-robin order, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                frame = self._take_next_locked()
                if frame is not None:
                    return frame
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._ready.wait(left)

    def try_get(self) -> Frame | None:
        with self._lock:
            return self._take_next_locked()

    def ready_count(self) -> int:
        """How many cameras have a frame waiting."""
        with self._lock:
            return sum(1 for s in self._slots if s.has_frame)
