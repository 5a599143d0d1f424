"""The spool on a small real tmpfs: bounded on disk, counted when full, back when space returns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.mqtt.fallback import DiskFallbackStore
from agent.mqtt.spool import RESERVE_BYTES, Spool, free_bytes
from tests.tmpfs import fill, remount_read_only, tmpfs

TOPIC = "vision/dev1/front/detections"
DISK = 4 * 1024 * 1024

pytestmark = pytest.mark.timeout(60)


class Mono:
    """A monotonic clock the test moves: the spool's once-a-second disk checks run at once."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.1
        return self.t


@pytest.fixture
def small_disk(tmp_path: Path):
    with tmpfs(tmp_path / "disk", "4m") as d:
        yield d


def spool_files(d: Path) -> int:
    return sum(p.stat().st_size for p in d.glob("spool.db*"))


def body(seq: int, size: int = 300) -> bytes:
    return f'{{"seq":{seq}}}'.encode().ljust(size, b" ")


def test_steady_flow_keeps_wal_and_file_small(small_disk):
    """3.6 MB through the spool (appended, taken, acked) on 4 MB: every write lands, WAL bounded."""
    s = Spool(small_disk / "spool.db", 64 << 20, 3600, monotonic=Mono())
    worst = 0
    for i in range(12_000):
        assert s.append(TOPIC, body(i), 1) is not None, f"append {i} failed: {s.degraded_reason}"
        if i % 50 == 49:
            s.ack([r.id for r in s.take(100)])
            s.expire()
            worst = max(worst, spool_files(small_disk))
    s.close()
    assert s.write_errors == 0 and s.dropped_disk_full == 0
    assert worst < DISK - RESERVE_BYTES, worst


def wal_peak(d: Path, messages: int) -> int:
    """Largest WAL file seen while ``messages`` flow through a spool in ``d``."""
    s = Spool(d / "spool.db", 64 << 20, 3600, monotonic=Mono())
    wal, peak = d / "spool.db-wal", 0
    for i in range(messages):
        assert s.append(TOPIC, body(i), 1) is not None, s.degraded_reason
        if i % 20 == 19:
            s.ack([r.id for r in s.take(100)])
            peak = max(peak, wal.stat().st_size if wal.exists() else 0)
    s.close()
    return peak


def test_wal_grows_with_the_room_the_disk_has(tmp_path):
    """Each checkpoint syncs the disk (twice) on the thread that crossed it, an inference
    worker's append often: where the disk has room the WAL is checkpointed at 4 MiB, not
    256 KiB (16x fewer syncs); a small disk keeps the small WAL."""
    with tmpfs(tmp_path / "big", "256m") as big:
        roomy = wal_peak(big, 6000)
    with tmpfs(tmp_path / "small", "4m") as small:
        tight = wal_peak(small, 6000)
    assert 2 << 20 < roomy <= (4 << 20) + (256 << 10), roomy
    assert tight <= (256 << 10) + (64 << 10), tight


def test_outage_on_small_disk_drops_oldest_and_counts_every_one(small_disk):
    """Broker away, 4.5 MB offered to 4 MB: the newest kept, every other one counted, space kept."""
    s = Spool(small_disk / "spool.db", 64 << 20, 3600, monotonic=Mono())
    n = 15_000
    for i in range(n):
        s.append(TOPIC, body(i), 1)
    assert s.dropped_disk_full > 0 and s.dropped_overflow == 0, s.degraded_reason
    assert s.depth + s.dropped_disk_full == n
    assert (s.degraded_reason or "").startswith(f"disk_full: state_dir {small_disk} has")
    assert free_bytes(small_disk) >= RESERVE_BYTES // 2
    rows = s.take(1_000_000)
    seqs = [int(r.payload.split(b":")[1].split(b"}")[0]) for r in rows]
    assert seqs == list(range(n - len(seqs), n))  # oldest first to go, no gaps in the rest
    s.ack([r.id for r in rows])
    for _ in range(10):  # healthy again after 10 s without a disk drop
        s.expire()
    assert s.depth == 0 and s.degraded_reason is None
    s.close()


def test_disk_filled_by_another_writer_falls_back_to_memory_and_recovers(small_disk):
    """A disk full to the last byte: messages go to memory (counted nowhere as lost), then back."""
    mono = Mono()
    store = DiskFallbackStore(small_disk / "spool.db", 64 << 20, 3600, monotonic=mono)
    for i in range(10):
        assert store.append(TOPIC, body(i), 1) is not None
    filler = fill(small_disk)
    assert free_bytes(small_disk) == 0
    ids = [store.append(TOPIC, body(i), 1) for i in range(10, 3000)]
    assert all(i is not None for i in ids)
    assert (store.degraded_reason or "").startswith("disk_full:")
    taken = store.take(10_000)
    got = {int(r.payload.split(b":")[1].split(b"}")[0]) for r in taken}
    lost = store.dropped_disk_full
    assert len(got) + lost == 3000, (len(got), lost)
    store.ack([r.id for r in taken])
    filler.unlink()
    assert store.append(TOPIC, body(3000), 1) is not None
    for _ in range(10):
        store.expire()
    assert store.degraded_reason is None
    assert store.spool is not None and store.spool.depth == 1
    store.close()


def test_start_on_full_disk_uses_memory_then_opens_the_spool(small_disk):
    """No room for spool.db at start: memory keeps messages, the spool opens once space returns."""
    mono = Mono()
    filler = fill(small_disk)
    store = DiskFallbackStore(small_disk / "spool.db", 64 << 20, 3600, monotonic=mono)
    assert store.spool is None
    assert store.degraded_reason == f"disk_full: state_dir {small_disk} has 0 B free"
    rid = store.append(TOPIC, body(1), 1)
    assert rid is not None and [r.id for r in store.take(10)] == [rid]
    assert store.ack([rid]) == 1 and store.depth == 0
    filler.unlink()
    for _ in range(6):  # reopen attempts run every 5 s of the monotonic clock
        store.expire()
    assert store.spool is not None and store.degraded_reason is None
    assert store.append(TOPIC, body(2), 1) is not None and store.spool.depth == 1
    store.close()


def test_read_only_state_dir_says_so(small_disk):
    """A read-only state_dir: memory store, reason ``read_only: state_dir ... is read-only``."""
    remount_read_only(small_disk)
    store = DiskFallbackStore(small_disk / "spool.db", 64 << 20, 3600)
    assert store.spool is None
    assert store.degraded_reason == f"read_only: state_dir {small_disk} is read-only"
    assert store.append(TOPIC, body(1), 1) is not None and store.depth == 1
    store.close()


def test_delete_that_failed_after_delivery_is_retried(small_disk):
    """Acks on a full disk fail; the rows are not sent again and leave once space returns."""
    mono = Mono()
    s = Spool(small_disk / "spool.db", 64 << 20, 3600, monotonic=mono)
    for i in range(2000):
        s.append(TOPIC, body(i), 1)
    s.expire()  # checkpoints and truncates the WAL: a delete now needs new disk space
    rows = s.take(5000)
    filler = fill(small_disk)
    s.ack([r.id for r in rows])
    if s.depth == 0:
        pytest.skip("the delete found room in the WAL; no failure to retry")
    assert s.write_errors >= 1 and s.depth == 2000
    s.rewind()
    assert s.take(5000) == []  # delivered: never sent twice
    os.unlink(filler)
    s.expire()
    assert s.depth == 0 and s.nbytes == 0
    s.close()


def test_objects_state_written_again_once_space_returns(small_disk):
    """objects.json on a full disk: the open event stays in memory, counted, written later."""
    from agent.service.objects import ObjectsState
    from tests.unit.test_objects_events import run, stage, walk

    st = stage({"confirm_frames": 2})
    assert [e.type for e in run(st, walk(100, 130, 3))] == ["new"]
    state = ObjectsState(small_disk / "objects.json", retry_s=0.0)
    assert state.degraded_reason is None
    filler = fill(small_disk)
    state.save("front", st)
    assert state.failed_writes == 1 and state.dirty
    # The heartbeat says so (the spool may be disabled, or on another disk).
    assert state.degraded_reason == (
        f"disk_full: state_dir {small_disk} has 0 B free (objects.json not written)"
    )
    assert not (small_disk / "objects.json").exists()
    assert not (small_disk / "objects.tmp").exists()
    state.retry()
    assert state.failed_writes == 2
    filler.unlink()
    state.retry()
    assert not state.dirty
    assert state.degraded_reason is None
    again = ObjectsState(small_disk / "objects.json")
    again.load()
    assert [e["id"] for e in again.open_events("front")] == [
        e["id"] for e in st.events.open_events()
    ]
