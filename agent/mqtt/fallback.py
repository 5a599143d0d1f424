"""The store the agent uses: the on-disk spool while the disk takes writes, memory when not.

A full or read-only ``state_dir`` is a fault like a broker outage, not a reason to stop:
the spool cannot be opened (at start) or cannot take a row (later), so the message goes to
a bounded memory queue instead and still leaves at QoS 1 (lost on a crash, like paho's own
queue). ``degraded_reason`` says why; the spool is opened again by itself once the disk
takes writes. Memory rows have negative ids so that one ``ack`` can serve both stores.
Messages that neither store could keep are counted in ``dropped_disk_full``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from agent.errors import ConfigError
from agent.mqtt.spool import Spool, SpoolDiskError, disk_reason
from agent.mqtt.store import MemoryQueue, SpoolRecord, log

#: The memory queue stands in for the disk, so it gets far less than ``spool.max_bytes``.
MEMORY_MAX_BYTES = 8 * 1024 * 1024
_REOPEN_S = 5.0
_RETRY_DISK_S = 1.0  # after a failed spool write, memory only for this long (no retry storm)


class DiskFallbackStore:
    """``Store`` over ``Spool`` with a memory queue for when the disk fails (see module)."""

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        max_age_s: float,
        *,
        open_spool: Callable[[], Spool] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._open_spool = open_spool or (
            lambda: Spool(path, max_bytes, max_age_s, monotonic=monotonic)
        )
        self._mono = monotonic
        self.mem = MemoryQueue(min(max_bytes, MEMORY_MAX_BYTES), max_age_s)
        self._mem_lost = 0  # memory-queue overflow while degraded: disk_full drops
        self._next_open = 0.0
        self._skip_spool_until = 0.0
        self._reason: str | None = None
        self.spool: Spool | None = None
        self._try_open()

    def _try_open(self) -> None:
        self._next_open = self._mono() + _REOPEN_S
        try:
            self.spool = self._open_spool()
        except ConfigError:
            raise  # another agent holds the spool: not a disk fault
        except (sqlite3.Error, OSError) as e:
            reason = disk_reason(self.path.parent, e)
            if reason != self._reason:
                log.error("spool_unavailable", path=str(self.path), reason=reason)
            self._reason = reason
            return
        if self._reason is not None:
            log.info("spool_reopened", path=str(self.path))
        self._reason = None

    # -- counters -------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return self.mem.depth + (self.spool.depth if self.spool else 0)

    @property
    def nbytes(self) -> int:
        return self.mem.nbytes + (self.spool.nbytes if self.spool else 0)

    @property
    def dropped_overflow(self) -> int:
        return self.spool.dropped_overflow if self.spool else 0

    @property
    def dropped_expired(self) -> int:
        return self.mem.dropped_expired + (self.spool.dropped_expired if self.spool else 0)

    @property
    def corrupt_resets(self) -> int:
        return self.spool.corrupt_resets if self.spool else 0

    @property
    def write_errors(self) -> int:
        return self.spool.write_errors if self.spool else 0

    @property
    def dropped_disk_full(self) -> int:
        spool = self.spool.dropped_disk_full if self.spool else 0
        return spool + self.mem.dropped_overflow + self._mem_lost

    @property
    def degraded_reason(self) -> str | None:
        if self.spool is None:
            return self._reason
        return self.spool.degraded_reason

    # -- the Store API ----------------------------------------------------------------------
    def append(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> int | None:
        if self.spool is not None and self._mono() >= self._skip_spool_until:
            try:
                return self.spool.try_append(topic, payload, qos, retain)
            except SpoolDiskError:
                self._skip_spool_until = self._mono() + _RETRY_DISK_S
            row = self.mem.append(topic, payload, qos, retain)
            if row is not None:
                self._mem_lost -= 1  # the spool counted it lost, but memory holds it
            return None if row is None else -row
        row = self.mem.append(topic, payload, qos, retain)
        return None if row is None else -row

    def take(self, limit: int) -> list[SpoolRecord]:
        out = self.spool.take(limit) if self.spool is not None else []
        if len(out) < limit:
            out += [replace(r, id=-r.id) for r in self.mem.take(limit - len(out))]
        return out

    def ack(self, ids: Sequence[int]) -> int:
        n = self.mem.ack([-i for i in ids if i < 0])
        disk = [i for i in ids if i > 0]
        if self.spool is not None and disk:
            n += self.spool.ack(disk)
        return n

    def rewind(self) -> None:
        self.mem.rewind()
        if self.spool is not None:
            self.spool.rewind()

    def expire(self) -> int:
        if self.spool is None and self._mono() >= self._next_open:
            self._try_open()
        n = self.mem.expire()
        return n + (self.spool.expire() if self.spool is not None else 0)

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
