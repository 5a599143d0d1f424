"""The on-disk spool and the memory queue: order, bounds, in-flight rows, durability."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.mqtt import spool as spool_module
from agent.mqtt.fallback import DiskFallbackStore
from agent.mqtt.spool import Spool, open_store
from agent.mqtt.store import MemoryQueue, record_size
from agent.settings import SpoolSettings

TOPIC = "v/d/c/detections"  # 16 bytes: a record of payload n counts n + 16


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["spool", "memory"])
def make_store(request, tmp_path):
    made = []

    def make(max_bytes=1 << 20, max_age_s=3600.0, clock=None):
        clock = clock or Clock()
        if request.param == "spool":
            store = Spool(tmp_path / "spool.db", max_bytes, max_age_s, clock=clock)
        else:
            store = MemoryQueue(max_bytes, max_age_s, clock=clock)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def payload(seq: int, size: int = 84) -> bytes:
    return f"{seq:08d}".encode().ljust(size, b".")


def test_append_take_ack_in_order(make_store):
    """Rows come out oldest first with increasing ids and leave only when acked."""
    store = make_store()
    ids = [store.append(TOPIC, payload(i), 1) for i in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert store.depth == 5 and store.nbytes == 5 * 100
    first = store.take(3)
    assert [r.payload for r in first] == [payload(i) for i in range(3)]
    assert [r.qos for r in first] == [1, 1, 1] and not first[0].retain
    assert [r.payload for r in store.take(10)] == [payload(3), payload(4)]
    assert store.take(10) == []
    assert store.ack([first[1].id, first[0].id, 999]) == 2
    assert store.depth == 3 and store.nbytes == 300


@pytest.mark.parametrize("returning", [True, False])
def test_ack_deletes_and_counts_with_or_without_returning(tmp_path, monkeypatch, returning):
    """SQLite 3.35+ deletes an acked chunk in one statement (RETURNING), older ones in a
    transaction of two: the same rows leave, the same counts, and it lasts (reopened)."""
    monkeypatch.setattr(
        spool_module, "_RETURNING", returning and sqlite3.sqlite_version_info >= (3, 35)
    )
    s = Spool(tmp_path / "spool.db", 1 << 20, 3600)
    ids = [s.append(TOPIC, payload(i), 1) for i in range(6)]
    s.take(6)
    assert s.ack([ids[4], ids[1], 999]) == 2
    assert s.depth == 4 and s.nbytes == 4 * 100
    s.close()
    s = Spool(tmp_path / "spool.db", 1 << 20, 3600)
    assert [r.payload for r in s.take(10)] == [payload(i) for i in (0, 2, 3, 5)]
    assert s.depth == 4 and s.nbytes == 400
    s.close()


def test_rewind_makes_in_flight_rows_pending_again(make_store):
    """After rewind every unacked row is handed out again, oldest first."""
    store = make_store()
    for i in range(3):
        store.append(TOPIC, payload(i), 1)
    taken = store.take(2)
    store.ack([taken[0].id])
    store.rewind()
    assert [r.payload for r in store.take(10)] == [payload(1), payload(2)]


@pytest.mark.parametrize(
    ("max_bytes", "n", "in_flight", "kept", "dropped"),
    [
        (1000, 10, 0, list(range(10)), 0),  # exactly full
        (1000, 11, 0, list(range(1, 11)), 1),
        (1000, 25, 0, list(range(15, 25)), 15),
        (1050, 25, 0, list(range(15, 25)), 15),  # half a record of slack is not a record
        (1000, 25, 3, [0, 1, 2, *range(18, 25)], 15),  # in-flight rows are never dropped
        (300, 10, 3, [0, 1, 2, 9], 6),  # over the bound only by what is in flight
    ],
)
def test_overflow_drops_oldest_pending(make_store, max_bytes, n, in_flight, kept, dropped):
    """Past max_bytes the oldest rows not in flight are dropped and counted."""
    store = make_store(max_bytes=max_bytes)
    for i in range(n):
        store.append(TOPIC, payload(i), 1)
        if i == in_flight - 1:
            store.take(in_flight)
    store.rewind()
    assert [int(r.payload[:8]) for r in store.take(1000)] == kept
    assert store.dropped_overflow == dropped
    assert store.depth == len(kept)
    assert store.nbytes == 100 * len(kept)


def test_record_larger_than_bound_is_refused(make_store):
    """A single message larger than the whole bound is refused, counted, nothing evicted."""
    store = make_store(max_bytes=4096)
    store.append(TOPIC, payload(0), 1)
    assert store.append(TOPIC, b"x" * 5000, 1) is None
    assert store.dropped_overflow == 1 and store.depth == 1


@pytest.mark.parametrize(
    ("ages", "max_age", "kept", "expired"),
    [
        ([100, 50, 10, 0], 60, [1, 2, 3], 1),
        ([100, 50, 10, 0], 1000, [0, 1, 2, 3], 0),
        ([100, 50, 10, 0], 5, [3], 3),
        ([100, 50, 10, 0], 0.5, [3], 3),  # age 0 is not older than 0.5 s
    ],
)
def test_expiry_drops_old_pending_rows(make_store, ages, max_age, kept, expired):
    """Rows older than max_age_s are dropped oldest first and counted."""
    clock = Clock(0.0)
    store = make_store(max_age_s=max_age, clock=clock)
    for i, age in enumerate(ages):
        clock.t = 1000.0 - age
        store.append(TOPIC, payload(i), 1)
    clock.t = 1000.0
    assert store.expire() == expired
    assert [int(r.payload[:8]) for r in store.take(100)] == kept
    assert store.dropped_expired == expired
    assert store.nbytes == 100 * len(kept)


def test_expiry_spares_in_flight_rows(make_store):
    """A row already handed to paho is not expired (paho will still deliver it)."""
    clock = Clock(0.0)
    store = make_store(max_age_s=10, clock=clock)
    for i in range(3):
        store.append(TOPIC, payload(i), 1)
    store.take(1)
    clock.t = 100.0
    assert store.expire() == 2
    assert store.depth == 1


def test_concurrent_appends_are_all_stored(make_store):
    """Appends from several threads all land, with unique ids."""
    store = make_store()
    ids: list[int] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        for i in range(100):
            row = store.append(TOPIC, payload(k * 1000 + i), 1)
            with lock:
                ids.append(row)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 400 and store.depth == 400


def test_spool_persists_across_reopen(tmp_path):
    """Rows and their counters survive closing and reopening the file."""
    s = Spool(tmp_path / "spool.db", 1 << 20, 3600)
    for i in range(4):
        s.append(TOPIC, payload(i), 1, retain=i == 3)
    s.ack([s.take(1)[0].id])
    s.close()
    s = Spool(tmp_path / "spool.db", 1 << 20, 3600)
    rows = s.take(10)
    assert [r.payload for r in rows] == [payload(i) for i in (1, 2, 3)]
    assert rows[-1].retain
    assert s.depth == 3 and s.nbytes == 3 * record_size(TOPIC, payload(0))
    s.close()


_KILLER = """
import os, signal, sys
from agent.mqtt.spool import Spool
s = Spool(sys.argv[1], 1 << 24, 3600)
for i in range(500):
    s.append("t", b"%d" % i, 1)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_spool_survives_sigkill(tmp_path):
    """Every row appended before a SIGKILL of the process is there after restart."""
    path = tmp_path / "spool.db"
    proc = subprocess.run(
        [sys.executable, "-c", _KILLER, str(path)], timeout=60, check=False, cwd=Path.cwd()
    )
    assert proc.returncode == -signal.SIGKILL
    s = Spool(path, 1 << 24, 3600)
    assert [r.payload for r in s.take(1000)] == [b"%d" % i for i in range(500)]
    s.close()


@pytest.mark.parametrize("damage", ["garbage", "bad_page"])
def test_corrupt_spool_is_moved_aside(tmp_path, damage):
    """A damaged file is renamed spool.db.corrupt-*, counted, and a fresh spool works."""
    path = tmp_path / "spool.db"
    s = Spool(path, 1 << 24, 3600)
    for i in range(300):
        s.append(TOPIC, payload(i, 900), 1)
    s.close()
    # Fold the WAL into the main file so the damage below is what the next open reads.
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 300)
    else:
        with path.open("r+b") as f:
            f.seek(4096 * 5)
            f.write(os.urandom(4096 * 3))
    s = Spool(path, 1 << 24, 3600)
    assert s.corrupt_resets == 1
    assert len(list(tmp_path.glob("spool.db.corrupt-*"))) >= 1
    assert s.depth == 0
    assert s.append(TOPIC, payload(1), 1) is not None
    assert [r.payload for r in s.take(5)] == [payload(1)]
    s.close()


def test_old_corrupt_copies_are_pruned(tmp_path):
    """Only the newest corrupt copies are kept, so a failing card does not fill the disk."""
    path = tmp_path / "spool.db"
    clock = Clock(1_000_000.0)
    for _ in range(4):
        path.write_bytes(b"junk" * 1000)
        clock.t += 10
        Spool(path, 1 << 20, 3600, clock=clock, keep_corrupt=2).close()
    mains = [p for p in tmp_path.glob("spool.db.corrupt-*") if not p.name.endswith("-wal")]
    assert len(mains) == 2


def test_second_process_cannot_share_spool(tmp_path):
    """Two agents on one state_dir would send each other's rows: the second one is refused."""
    path = tmp_path / "spool.db"
    s = Spool(path, 1 << 20, 3600)
    s.append(TOPIC, payload(0), 1)
    code = f"from agent.mqtt.spool import Spool; Spool({str(path)!r}, 1 << 20, 3600)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode != 0
    assert "in use by another process" in proc.stderr
    s.close()
    s2 = Spool(path, 1 << 20, 3600)
    with pytest.raises(ConfigError, match="in use"):
        Spool(path, 1 << 20, 3600)
    s2.close()


@pytest.mark.parametrize(("enabled", "kind"), [(True, DiskFallbackStore), (False, MemoryQueue)])
def test_open_store_follows_settings(tmp_path, enabled, kind):
    """spool.enabled chooses the on-disk spool in state_dir or the memory queue."""
    store = open_store(SpoolSettings(enabled=enabled), tmp_path)
    assert isinstance(store, kind)
    assert (tmp_path / "spool.db").exists() == enabled
    store.close()
