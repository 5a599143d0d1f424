"""On-disk store-and-forward spool: SQLite in WAL mode, bounded by bytes and age.

Every append is its own committed transaction, so a SIGKILL of the agent loses nothing
already appended. ``synchronous=NORMAL`` (the default here) does not fsync the WAL on
every commit: a committed row survives a crash of the process, and the database stays
consistent across a power cut, which may lose the rows since the WAL was last synced (at
each checkpoint, at least every 5 s: a few seconds of rows at most). ``FULL`` fsyncs each
commit (see bench/ and the spool tests for the measured cost).

On disk it stays bounded in every file: the WAL is checkpointed and truncated
(``wal_autocheckpoint``, ``journal_size_limit``, a periodic ``wal_checkpoint(TRUNCATE)``)
once it holds a 32nd of the disk's room for the spool (256 KiB to 4 MiB), and the rows
are bounded by ``min(max_bytes, what the free space can hold)`` with a reserve kept free.
Rows dropped to fit the disk, and messages a failed write could not store, are counted as
``dropped_disk_full``; a delete that failed after delivery is retried.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from agent.errors import ConfigError
from agent.mqtt.store import MemoryQueue, SpoolRecord, Store, log, record_size
from agent.settings import SpoolSettings

SCHEMA_VERSION = 1
_SQLITE_CORRUPT = 11  # sqlite3.SQLITE_CORRUPT, a module constant only from 3.11
_SQLITE_NOTADB = 26
_BATCH = 256
_ACK_CHUNK = 256
#: SQLite 3.35 and later delete and count a chunk in one statement (older ones, such as
#: Debian 11's 3.34, in a transaction of two).
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)
# Error codes of a disk that cannot take a write (full, failing, read-only, gone).
_DISK_CODES = frozenset({8, 10, 13, 14})  # READONLY, IOERR, FULL, CANTOPEN
_PAGE = 4096  # SQLite's default page size
#: The WAL is checkpointed once it holds this (then truncated back to it): a 32nd of what the
#: disk has for the spool, within these bounds. Each checkpoint syncs the disk twice, on the
#: thread whose commit crossed it (an inference worker's append, often): on a busy box
#: (vtest.avi, 12 cameras on 2 cores, ~100 messages/s) 256 KiB meant 17 syncs a second,
#: 4 MiB 1.4. A small disk keeps the small WAL.
_WAL_MIN = 256 * 1024
_WAL_MAX = 4 * 1024 * 1024
_WAL_SHARE = 32
#: Free space the spool never takes (other writers on the same disk, SQLite's temp pages).
RESERVE_BYTES = 512 * 1024
# A row costs more on disk than its topic and payload (b-tree pages, row headers).
_DISK_OVERHEAD = 1.25
_DISK_CHECK_S = 1.0
_CHECKPOINT_S = 5.0
_DISK_CALM_S = 10.0  # no disk drop for this long, and the reserve free: healthy again
_DDL = """
CREATE TABLE IF NOT EXISTS spool (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL,
    size INTEGER NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL
)
"""


class CorruptSpoolError(Exception):
    """The spool file is damaged; it is moved aside and a new one started."""


class SpoolDiskError(Exception):
    """A write failed because the disk is full, failing or read-only."""


def is_disk_error(e: BaseException) -> bool:
    """A full, failing or read-only disk (sqlite3 or OS error), not a damaged file."""
    if isinstance(e, OSError):
        return True
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _DISK_CODES
    text = str(e).lower()
    return any(w in text for w in ("full", "disk i/o", "readonly", "read-only", "unable to open"))


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer can still use on the file system of ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def disk_reason(directory: Path, e: BaseException | None = None) -> str:
    """``disk_full: state_dir /x has 0 B free`` (or read-only / the error), for health."""
    try:
        st = os.statvfs(directory)
        free, read_only = st.f_bavail * st.f_frsize, bool(st.f_flag & os.ST_RDONLY)
    except OSError:
        free, read_only = -1, False
    text = str(e).lower() if e is not None else ""
    if read_only or "readonly" in text or getattr(e, "errno", None) == errno.EROFS:
        return f"read_only: state_dir {directory} is read-only"
    if e is None or free < RESERVE_BYTES or "full" in text:
        return f"disk_full: state_dir {directory} has {max(free, 0)} B free"
    return f"disk_error: state_dir {directory}: {str(e)[:120]}"


def _is_corruption(e: sqlite3.DatabaseError) -> bool:
    # OperationalError covers locks, I/O errors and a full disk: not a damaged file.
    code = getattr(e, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    return type(e) is sqlite3.DatabaseError


class Spool:
    """SQLite store of outgoing messages (see ``agent.mqtt.store.Store``). Thread-safe."""

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        max_age_s: float,
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        clock: Callable[[], float] = time.time,
        keep_corrupt: int = 2,
        reserve_bytes: int = RESERVE_BYTES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._sync = synchronous
        self._clock = clock
        self._keep_corrupt = keep_corrupt
        self._lock = threading.Lock()
        self._cursor = 0
        self._depth = 0
        self._bytes = 0
        self._dropped_overflow = 0
        self._dropped_expired = 0
        self._corrupt_resets = 0
        self._write_errors = 0
        self._dropped_disk_full = 0
        self.reserve_bytes = reserve_bytes
        self._mono = monotonic
        self._cap = max_bytes
        self._next_disk_check = 0.0
        self._next_checkpoint = 0.0
        self._wal_bytes = _WAL_MIN
        self._disk_reason: str | None = None
        self._disk_drops_seen = 0
        self._last_disk_drop = -_DISK_CALM_S
        self._unacked: set[int] = set()  # delivered rows whose delete failed: retried
        self._logged: set[str] = set()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._open()
        except CorruptSpoolError as e:
            self._db = self._reset(str(e))

    # -- counters ---------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return self._depth

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
        return self._corrupt_resets

    @property
    def write_errors(self) -> int:
        return self._write_errors

    @property
    def dropped_disk_full(self) -> int:
        return self._dropped_disk_full

    @property
    def degraded_reason(self) -> str | None:
        """Why the disk limits the spool now (``disk_full: ...``), or None."""
        return self._disk_reason

    @property
    def effective_max_bytes(self) -> int:
        """``min(max_bytes, what the disk can hold)``, refreshed about once a second."""
        return self._cap

    # -- open, check, reset -----------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0.5)
        try:
            # EXCLUSIVE: a second agent on the same state_dir must not send our rows too.
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            db.execute(f"PRAGMA synchronous={self._sync}")
            self._set_wal(db, self._wal_bytes)
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise CorruptSpoolError(f"quick_check: {check}")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise CorruptSpoolError(f"unknown spool schema version {version}")
            db.execute(_DDL)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            depth, size = db.execute(
                "SELECT count(*), coalesce(sum(size), 0) FROM spool"
            ).fetchone()
        except sqlite3.OperationalError as e:
            db.close()
            if "locked" in str(e):
                raise ConfigError(
                    f"spool {self.path} is in use by another process (two agents on one state_dir?)"
                ) from e
            raise
        except sqlite3.DatabaseError as e:
            db.close()
            if _is_corruption(e):
                raise CorruptSpoolError(str(e)) from e
            raise
        except CorruptSpoolError:
            db.close()
            raise
        if mode != "wal":
            log.warning("spool_not_wal", path=str(self.path), journal_mode=mode)
        self._depth, self._bytes, self._cursor = int(depth), int(size), 0
        if depth:
            log.info("spool_opened", path=str(self.path), depth=depth, bytes=size)
        return db

    def _reset(self, reason: str) -> sqlite3.Connection:
        """Move the damaged file (and its WAL) aside and start an empty spool."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock()))
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.path}{suffix}")
            if src.exists():
                src.rename(f"{aside}{suffix}")
        self._corrupt_resets += 1
        lost = self._depth
        self._depth = self._bytes = self._cursor = 0
        log.error(
            "spool_corrupt_reset",
            path=str(self.path),
            moved_to=str(aside),
            reason=reason[:200],
            lost_at_least=lost,
        )
        self._prune_corrupt()
        return self._open()

    def _prune_corrupt(self) -> None:
        # A failing SD card corrupts again and again: keep only the newest few copies.
        olds = sorted(self.path.parent.glob(f"{self.path.name}.corrupt-*"))
        mains = [p for p in olds if not p.name.endswith(("-wal", "-shm"))]
        for old in mains[: max(0, len(mains) - self._keep_corrupt)]:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{old}{suffix}").unlink(missing_ok=True)

    @contextmanager
    def _tx(self, *, single: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction; a damaged file is reset, other failures re-raised.
        ``single``: the body is one statement, its own transaction (no BEGIN and COMMIT:
        a third of the calls into SQLite on the frame path, each of which lets go of
        Python's lock for the other threads)."""
        db = self._db
        try:
            if single:
                yield db
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            if not _is_corruption(e):
                raise
            self._db.close()
            self._db = self._reset(str(e))
            raise CorruptSpoolError(str(e)) from e

    def _error_once(self, event: str, e: Exception) -> None:
        key = f"{event}:{e}"
        if key not in self._logged:
            self._logged.add(key)
            log.error(event, path=str(self.path), error=str(e))

    # -- disk ---------------------------------------------------------------------------
    def _file_bytes(self) -> int:
        return sum(
            os.stat(f"{self.path}{sfx}").st_size
            for sfx in ("", "-wal")
            if os.path.exists(f"{self.path}{sfx}")
        )

    def _refresh_disk(self, force: bool = False) -> None:
        """Recompute the disk-derived bound; clear the reason once space has returned."""
        now = self._mono()
        if not force and now < self._next_disk_check:
            return
        self._next_disk_check = now + _DISK_CHECK_S
        try:
            free = free_bytes(self.path.parent)
            disk = self._file_bytes() + free - self.reserve_bytes
        except OSError as e:
            self._disk_reason = disk_reason(self.path.parent, e)
            return
        wal = min(_WAL_MAX, max(_WAL_MIN, disk // _WAL_SHARE // _PAGE * _PAGE))
        if wal != self._wal_bytes:
            try:
                self._set_wal(self._db, wal)
            except sqlite3.Error as e:
                self._error_once("spool_wal_size_failed", e)
        room = disk - 2 * self._wal_bytes
        self._cap = max(0, min(self.max_bytes, int(room / _DISK_OVERHEAD)))
        # Degraded while the disk is what drops rows (or eats into the reserve); back to
        # normal after _DISK_CALM_S without either.
        if self._dropped_disk_full > self._disk_drops_seen:
            self._disk_drops_seen = self._dropped_disk_full
            self._last_disk_drop = now
        squeezed = free < self.reserve_bytes or now - self._last_disk_drop < _DISK_CALM_S
        if not squeezed:
            if self._disk_reason is not None:
                log.info("spool_disk_recovered", path=str(self.path), free_bytes=free)
            self._disk_reason = None
        elif self._disk_reason is None:
            self._disk_reason = disk_reason(self.path.parent)
            log.warning("spool_disk_low", path=str(self.path), reason=self._disk_reason)

    def _set_wal(self, db: sqlite3.Connection, nbytes: int) -> None:
        """Checkpoint the WAL once it holds ``nbytes``, and truncate it back to that."""
        db.execute(f"PRAGMA wal_autocheckpoint={nbytes // _PAGE}")
        db.execute(f"PRAGMA journal_size_limit={nbytes}")
        self._wal_bytes = nbytes

    def _checkpoint(self) -> None:
        # Autocheckpoints only restart the WAL; TRUNCATE gives its space back to the disk.
        now = self._mono()
        if now < self._next_checkpoint:
            return
        self._next_checkpoint = now + _CHECKPOINT_S
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:
            self._error_once("spool_checkpoint_failed", e)

    # -- the Store API ----------------------------------------------------------------------
    def append(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> int | None:
        try:
            return self.try_append(topic, payload, qos, retain)
        except SpoolDiskError:
            return None

    def try_append(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> int | None:
        """``append``, but a message the disk could not take raises ``SpoolDiskError``
        (counted in ``dropped_disk_full``) so that a caller can keep it elsewhere."""
        size = record_size(topic, payload)
        with self._lock:
            if size > self.max_bytes:
                self._dropped_overflow += 1
                return None
            self._refresh_disk()
            for attempt in range(3):  # a reset file, or room made by dropping the oldest
                try:
                    row = self._append(topic, payload, qos, retain, size)
                except CorruptSpoolError:
                    continue
                except (sqlite3.Error, SpoolDiskError) as e:
                    self._write_errors += 1
                    self._error_once("spool_write_failed", e)
                    if not is_disk_error(e) and not isinstance(e, SpoolDiskError):
                        self._dropped_disk_full += 1
                        raise SpoolDiskError(str(e)) from e
                    self._disk_reason = disk_reason(self.path.parent, e)
                    self._next_disk_check = self._mono() + _DISK_CHECK_S
                    if attempt == 0 and self._make_room(max(8 * size, 64 * 1024)):
                        continue
                    self._dropped_disk_full += 1
                    raise SpoolDiskError(self._disk_reason) from e
                if self._logged:  # log the next failure again, after this success
                    self._logged = {k for k in self._logged if not k.startswith("spool_write")}
                return row
            self._dropped_disk_full += 1
            raise SpoolDiskError("spool reset did not help")

    def _make_room(self, need: int) -> bool:
        """After a failed write: drop the oldest pending rows (counted); True if any."""
        try:
            self._next_checkpoint = 0.0
            self._checkpoint()
            with self._tx() as db:
                dropped, freed = self._drop_pending(db, need)
        except (sqlite3.Error, CorruptSpoolError) as e:
            self._error_once("spool_make_room_failed", e)
            return False
        self._dropped_disk_full += dropped
        self._depth -= dropped
        self._bytes -= freed
        return dropped > 0

    def _append(self, topic: str, payload: bytes, qos: int, retain: bool, size: int) -> int:
        cap = min(self.max_bytes, self._cap)
        if size > cap:
            raise SpoolDiskError(self._disk_reason or disk_reason(self.path.parent))
        over = self._bytes + size - cap
        # Rows dropped only because the disk holds less than max_bytes are disk_full drops.
        overflow = max(0, self._bytes + size - self.max_bytes)
        with self._tx(single=over <= 0) as db:
            dropped, freed = self._drop_pending(db, over) if over > 0 else (0, 0)
            cur = db.execute(
                "INSERT INTO spool (ts, qos, retain, size, topic, payload) VALUES (?,?,?,?,?,?)",
                (self._clock(), qos, int(retain), size, topic, payload),
            )
        if dropped and overflow > 0:
            self._dropped_overflow += dropped
        else:
            self._dropped_disk_full += dropped
        self._depth += 1 - dropped
        self._bytes += size - freed
        return int(cur.lastrowid or 0)

    def _drop_pending(self, db: sqlite3.Connection, need: int) -> tuple[int, int]:
        """Delete the oldest rows not in flight until ``need`` bytes are free."""
        dropped = freed = 0
        last = self._cursor
        while freed < need:
            rows = db.execute(
                "SELECT id, size FROM spool WHERE id > ? ORDER BY id LIMIT ?", (last, _BATCH)
            ).fetchall()
            for row_id, size in rows:
                last = row_id
                dropped += 1
                freed += size
                if freed >= need:
                    break
            if len(rows) < _BATCH:
                break
        if dropped:
            db.execute("DELETE FROM spool WHERE id > ? AND id <= ?", (self._cursor, last))
        return dropped, freed

    def take(self, limit: int) -> list[SpoolRecord]:
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT id, topic, payload, qos, retain, ts FROM spool "
                    "WHERE id > ? ORDER BY id LIMIT ?",
                    (self._cursor, limit),
                ).fetchall()
            except sqlite3.DatabaseError as e:
                self._recover(e)
                return []
            out = [SpoolRecord(r[0], r[1], bytes(r[2]), r[3], bool(r[4]), r[5]) for r in rows]
            if out:
                self._cursor = out[-1].id
            # A delivered row whose delete failed is not sent again.
            return [r for r in out if r.id not in self._unacked]

    def ack(self, ids: Sequence[int]) -> int:
        with self._lock:
            return self._ack_locked([*self._unacked, *ids]) if (ids or self._unacked) else 0

    def _ack_locked(self, ids: Sequence[int]) -> int:
        # One transaction per chunk: a big delete in one would need WAL space for every page.
        removed = 0
        for start in range(0, len(ids), _ACK_CHUNK):
            chunk = list(ids[start : start + _ACK_CHUNK])
            marks = ",".join("?" * len(chunk))
            try:
                with self._tx(single=_RETURNING) as db:
                    if _RETURNING:
                        sizes = db.execute(
                            f"DELETE FROM spool WHERE id IN ({marks}) RETURNING size",  # noqa: S608 - only "?" marks are interpolated
                            chunk,
                        ).fetchall()
                        n, size = len(sizes), sum(row[0] for row in sizes)
                    else:
                        n, size = db.execute(
                            f"SELECT count(*), coalesce(sum(size), 0) FROM spool "  # noqa: S608 - only "?" marks are interpolated
                            f"WHERE id IN ({marks})",
                            chunk,
                        ).fetchone()
                        db.execute(f"DELETE FROM spool WHERE id IN ({marks})", chunk)  # noqa: S608 - only "?" marks
            except CorruptSpoolError:
                self._unacked.clear()
                return removed
            except sqlite3.Error as e:
                # Kept and retried with the next ack or expiry, so spool_depth cannot stick.
                self._write_errors += 1
                self._unacked.update(ids[start:])
                self._error_once("spool_ack_failed", e)
                return removed
            self._unacked.difference_update(chunk)
            removed += n
            self._depth -= n
            self._bytes -= size
        return removed

    def rewind(self) -> None:
        with self._lock:
            self._cursor = 0

    def expire(self) -> int:
        cutoff = self._clock() - self.max_age_s
        dropped = freed = 0
        with self._lock:
            if self._unacked:
                self._ack_locked(list(self._unacked))
            self._checkpoint()
            self._refresh_disk()
            try:
                with self._tx() as db:
                    young = False
                    while not young:
                        rows = db.execute(
                            "SELECT id, size, ts FROM spool WHERE id > ? ORDER BY id LIMIT ?",
                            (self._cursor, _BATCH),
                        ).fetchall()
                        last = None
                        for row_id, size, ts in rows:
                            if ts >= cutoff:
                                young = True  # rows are in time order: the rest are younger
                                break
                            last = row_id
                            dropped += 1
                            freed += size
                        if last is not None:
                            db.execute(
                                "DELETE FROM spool WHERE id > ? AND id <= ?", (self._cursor, last)
                            )
                        young = young or len(rows) < _BATCH
            except CorruptSpoolError:
                return 0
            except sqlite3.Error as e:
                self._error_once("spool_expire_failed", e)
                return 0
            self._dropped_expired += dropped
            self._depth -= dropped
            self._bytes -= freed
        return dropped

    def _recover(self, e: sqlite3.DatabaseError) -> None:
        if _is_corruption(e):
            self._db.close()
            self._db = self._reset(str(e))
        else:
            self._error_once("spool_read_failed", e)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def open_store(settings: SpoolSettings, state_dir: Path) -> Store:
    """The on-disk spool ``<state_dir>/spool.db`` (memory while the disk fails, see
    ``agent.mqtt.fallback``), or a memory queue if it is disabled."""
    if settings.enabled:
        from agent.mqtt.fallback import DiskFallbackStore  # it builds on this module

        return DiskFallbackStore(state_dir / "spool.db", settings.max_bytes, settings.max_age_s)
    return MemoryQueue(settings.max_bytes, settings.max_age_s)
