"""Short per-camera frame queues (bounded in age, count and bytes) and a fair, sleeping
consumer over several of them.

All slots of one ``RoundRobinFeed`` share the feed's lock and its "frame ready" condition,
so a consumer waiting for *any* camera sleeps on one condition and wakes on the first
``put``: no busy polling, no lost wake-ups. Each slot has its own "space" condition on the
same lock for producers that must not drop (files with ``realtime: false``); a slot with
``one_in_flight`` has room only once the consumer is also done with the frame it took
(``finished``), so each frame is planned with the results of the one before.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from agent.frames import Frame

#: Longest a frame waits for the pipeline while a newer one of its camera is in: a burst of
#: work (every camera's frame arriving at once, a frame needing several model runs) delays
#: frames without losing them, while a pipeline slower than its camera still works on
#: fresh frames. Seconds, from the frame's capture time. Region mode's work varies from
#: frame to frame (no model run to three): near a box's capacity, 0.25 s lost frames in
#: bursts (vtest.avi, 6 and 7 cameras on 2 cores, alternating runs: 6 of 14 fell behind,
#: against 3 of 14 at 0.5 s).
MAX_WAIT_S = 0.5
#: Most frames a slot holds, and most bytes of them (memory bounds for fast and for large
#: cameras: three 1080p frames, one 4K frame; the newest frame is always kept).
MAX_DEPTH = 4
MAX_BYTES = 3 * 1920 * 1080 * 3
#: A slot that dropped two frames within this long is behind, not in a burst: waiting
#: frames would only add latency (they are dropped later anyway), so the consumer gets the
#: newest.
BEHIND_S = 1.0


class LatestFrameSlot:
    """A camera's frames not yet consumed, oldest first: at most ``max_depth`` frames and
    ``max_bytes`` of them, and none older than ``max_wait_s`` while a newer one waits.

    ``put`` drops (and counts) the oldest frames beyond those bounds, so a consumer that is
    late by a short burst still gets every frame, in order. Once two frames had to be
    dropped within ``BEHIND_S``, the consumer is steadily slower than the camera and gets the
    newest frame, as fresh as a 1-deep slot would give it. Counters are plain ints updated
    under the lock; reading them without it is fine for statistics.

    ``one_in_flight`` (a lossless producer in region mode): ``put_wait`` and ``wait_space``
    wait until the consumer is done with the frame it took, not only until it took it, so
    region planning sees the tracks of the frame before (as ``edge-agent track`` does)
    instead of planning the next frame while that one's model runs are still out.
    """

    def __init__(
        self,
        camera_id: str,
        *,
        lock: threading.Lock | None = None,
        ready: threading.Condition | None = None,
        max_wait_s: float = MAX_WAIT_S,
        max_depth: int = MAX_DEPTH,
        max_bytes: int = MAX_BYTES,
        one_in_flight: bool = False,
    ) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        self.camera_id = camera_id
        self._lock = lock if lock is not None else threading.Lock()
        self._ready = ready if ready is not None else threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._frames: deque[Frame] = deque()
        self._max_wait = max_wait_s
        self._max_depth = max_depth
        self._max_bytes = max_bytes
        self._bytes = 0
        self._one_in_flight = one_in_flight
        self._in_flight = 0  # frames taken and not yet finished (one_in_flight only)
        self._drops: deque[float] = deque([-BEHIND_S] * 2, maxlen=2)  # last two drops
        self.frames_in = 0
        self.frames_dropped = 0
        self.frames_out = 0

    @property
    def has_frame(self) -> bool:
        return bool(self._frames)

    def put(self, frame: Frame) -> Frame | None:
        """Store ``frame``; return the newest frame it pushed out (never seen by any
        consumer), or None.

        The caller may reuse the returned frame's image as its next read buffer: nothing
        else holds a reference to it.
        """
        with self._lock:
            self._append_locked(frame)
            dropped = self._expire_locked(frame.t_capture, taking=False)
        return dropped

    def _append_locked(self, frame: Frame) -> None:
        self._frames.append(frame)
        self._bytes += frame.image.nbytes
        self.frames_in += 1
        self._ready.notify_all()

    def _expire_locked(self, now: float, *, taking: bool) -> Frame | None:
        """Drop the oldest frames beyond the bounds, or too old while a newer one waits;
        ``taking`` (the consumer's turn): all but the newest if the slot is behind."""
        dropped = None
        frames = self._frames
        while len(frames) > 1 and (
            len(frames) > self._max_depth
            or self._bytes > self._max_bytes
            or now - frames[0].t_capture > self._max_wait
            or (taking and now - self._drops[0] < BEHIND_S)
        ):
            dropped = frames.popleft()
            self._bytes -= dropped.image.nbytes
            self.frames_dropped += 1
            self._drops.append(now)
        return dropped

    def _room_locked(self) -> bool:
        return not self._frames and not self._in_flight

    def put_wait(self, frame: Frame, timeout: float) -> bool:
        """Store ``frame`` once the slot has room (empty, and with ``one_in_flight`` the
        frame taken last finished); False (frame not stored) on timeout."""
        with self._lock:
            if not self._space.wait_for(self._room_locked, timeout):
                return False
            self._append_locked(frame)
        return True

    def wait_space(self, timeout: float) -> bool:
        """Wait until the slot has room (True, as for ``put_wait``) or ``timeout`` passes
        (False); stores nothing.

        With one producer per slot, a frame put right after a True return is never dropped.
        """
        with self._lock:
            return self._space.wait_for(self._room_locked, timeout)

    def finished(self) -> None:
        """The consumer is done with a frame it took (its results handed on): with
        ``one_in_flight``, the producer may put the next one."""
        with self._lock:
            if self._in_flight:
                self._in_flight -= 1
                if self._room_locked():
                    self._space.notify()

    def _take_locked(self) -> Frame | None:
        if not self._frames:
            return None
        self._expire_locked(time.monotonic(), taking=True)
        frame = self._frames.popleft()
        self._bytes -= frame.image.nbytes
        self.frames_out += 1
        if self._one_in_flight:
            self._in_flight += 1
        elif not self._frames:
            self._space.notify()
        return frame

    def try_get(self) -> Frame | None:
        """The oldest waiting frame, or None at once."""
        with self._lock:
            return self._take_locked()

    def get(self, timeout: float) -> Frame | None:
        """The oldest waiting frame, or the next one put within ``timeout`` seconds, else
        None."""
        with self._lock:
            if not self._frames:
                self._ready.wait_for(lambda: bool(self._frames), timeout)
            return self._take_locked()


class RoundRobinFeed:
    """Takes each camera's oldest waiting frame in turn; sleeps while none has one.

    Implements the inference engine's ``FrameFeed`` (``get(timeout)``, ``ready_count()``).
    Several consumer threads may call ``get`` at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._slots: list[LatestFrameSlot] = []
        self._one_in_flight: dict[str, LatestFrameSlot] = {}
        self._next = 0

    def add(self, camera_id: str, *, one_in_flight: bool = False) -> LatestFrameSlot:
        """A new slot for ``camera_id`` that wakes this feed's consumers (``one_in_flight``:
        see ``LatestFrameSlot``; the consumer then calls ``finished`` for each frame)."""
        with self._lock:
            if any(s.camera_id == camera_id for s in self._slots):
                raise ValueError(f"camera {camera_id!r} already has a slot in this feed")
            slot = LatestFrameSlot(
                camera_id, lock=self._lock, ready=self._ready, one_in_flight=one_in_flight
            )
            self._slots.append(slot)
            if one_in_flight:
                self._one_in_flight[camera_id] = slot
            return slot

    def remove(self, camera_id: str) -> None:
        with self._lock:
            self._slots = [s for s in self._slots if s.camera_id != camera_id]
            self._one_in_flight.pop(camera_id, None)
            self._next = 0

    def finished(self, camera_id: str) -> None:
        """The consumer handed on the results of a frame of ``camera_id`` it took."""
        slot = self._one_in_flight.get(camera_id)  # every frame: no lock for other cameras
        if slot is not None:
            slot.finished()

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
        """The next camera's oldest waiting frame in round-robin order, waiting up to
        ``timeout``."""
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
