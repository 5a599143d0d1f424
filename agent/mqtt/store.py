"""What the publisher needs from a message store, and the in-memory store.

A store holds outgoing messages in send order. ``take`` hands the next ones to the sender,
which then owns them ("in flight") until ``ack``. Bounds drop the oldest messages that are
not in flight: those are already in paho's hands and will be delivered after a reconnect,
so dropping them would count as lost what in fact arrives.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from agent.log import get_logger

log = get_logger("spool")


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One stored outgoing message; ``id`` increases in send order."""

    id: int
    topic: str
    payload: bytes
    qos: int
    retain: bool
    ts: float

    @property
    def size(self) -> int:
        return record_size(self.topic, self.payload)


def record_size(topic: str, payload: bytes) -> int:
    """What a message counts against the store bound: payload plus topic bytes."""
    return len(payload) + len(topic.encode())


class Store(Protocol):
    """Bounded, ordered store of outgoing messages (SQLite spool or memory)."""

    @property
    def depth(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def dropped_overflow(self) -> int: ...

    @property
    def dropped_expired(self) -> int: ...

    @property
    def corrupt_resets(self) -> int: ...

    @property
    def write_errors(self) -> int: ...

    @property
    def dropped_disk_full(self) -> int:
        """Messages lost because the disk could not hold them (full, failing, read-only)."""
        ...

    @property
    def degraded_reason(self) -> str | None:
        """Why the store cannot do its job in full now (``disk_full: ...``), or None."""
        ...

    def append(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> int | None:
        """Store a message; its id, or None when it was not stored (counted)."""
        ...

    def take(self, limit: int) -> list[SpoolRecord]:
        """The next ``limit`` messages not yet taken, oldest first; they are now in flight."""
        ...

    def ack(self, ids: Sequence[int]) -> int:
        """Delete delivered (or finally refused) messages; how many were still stored."""
        ...

    def rewind(self) -> None:
        """Forget what is in flight: every stored message is pending again."""
        ...

    def expire(self) -> int:
        """Drop pending messages older than the age bound; how many."""
        ...

    def close(self) -> None: ...


class MemoryQueue:
    """The store used when ``spool.enabled`` is false: same bounds, lost on exit."""

    def __init__(
        self, max_bytes: int, max_age_s: float, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._clock = clock
        self._rows: OrderedDict[int, SpoolRecord] = OrderedDict()
        self._lock = threading.Lock()
        self._next_id = 1
        self._cursor = 0
        self._bytes = 0
        self._dropped_overflow = 0
        self._dropped_expired = 0

    @property
    def depth(self) -> int:
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def dropped_overflow(self) -> int:
        return self._dropped_overflow

    @property
    def dropped_expired(self) -> int:
        return self._dropped_expired

    @property
    def corrupt_resets(self) -> int:
        return 0

    @property
    def write_errors(self) -> int:
        return 0

    @property
    def dropped_disk_full(self) -> int:
        return 0

    @property
    def degraded_reason(self) -> str | None:
        return None

    def append(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> int | None:
        size = record_size(topic, payload)
        with self._lock:
            if size > self.max_bytes:
                self._dropped_overflow += 1
                return None
            if self._bytes + size > self.max_bytes:
                self._drop_pending(self._bytes + size - self.max_bytes)
            row = SpoolRecord(self._next_id, topic, payload, qos, retain, self._clock())
            self._next_id += 1
            self._rows[row.id] = row
            self._bytes += size
            return row.id

    def _drop_pending(self, need: int) -> None:
        victims: list[int] = []
        freed = 0
        for row_id, row in self._rows.items():
            if freed >= need:
                break
            if row_id > self._cursor:
                victims.append(row_id)
                freed += row.size
        for row_id in victims:
            self._bytes -= self._rows.pop(row_id).size
        self._dropped_overflow += len(victims)

    def take(self, limit: int) -> list[SpoolRecord]:
        out: list[SpoolRecord] = []
        with self._lock:
            for row_id, row in self._rows.items():
                if len(out) >= limit:
                    break
                if row_id > self._cursor:
                    out.append(row)
            if out:
                self._cursor = out[-1].id
        return out

    def ack(self, ids: Sequence[int]) -> int:
        n = 0
        with self._lock:
            for row_id in ids:
                row = self._rows.pop(row_id, None)
                if row is not None:
                    self._bytes -= row.size
                    n += 1
        return n

    def rewind(self) -> None:
        with self._lock:
            self._cursor = 0

    def expire(self) -> int:
        cutoff = self._clock() - self.max_age_s
        victims: list[int] = []
        with self._lock:
            for row_id, row in self._rows.items():
                if row_id <= self._cursor:
                    continue
                if row.ts >= cutoff:
                    break  # rows are in time order: the rest are younger
                victims.append(row_id)
            for row_id in victims:
                self._bytes -= self._rows.pop(row_id).size
            self._dropped_expired += len(victims)
        return len(victims)

    def close(self) -> None:
        return None
