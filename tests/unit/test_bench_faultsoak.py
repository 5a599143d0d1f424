"""The accounting of bench/faultsoak.py: seq gaps, duplicates, per-boot drops, event pairs."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import faultsoak  # noqa: E402  (bench/faultsoak.py, found through the path above)


def msgs(boot: str, seqs: list[int], camera: str = "front") -> list[dict]:
    return [
        {"boot_id": boot, "camera": camera, "seq": s, "ts": f"2026-11-26T23:00:{s:02d}.000Z"}
        for s in seqs
    ]


def hb(dropped_overflow=0, dropped_expired=0, dropped_disk_full=0, rejected_oversize=0) -> dict:
    return {
        "mqtt": {
            "dropped_overflow": dropped_overflow,
            "dropped_expired": dropped_expired,
            "dropped_disk_full": dropped_disk_full,
            "rejected_oversize": rejected_oversize,
        }
    }


@pytest.mark.parametrize(
    ("seqs", "expected"),
    [
        ([], {"sent": 0, "received": 0, "missing": 0, "duplicated": 0}),
        ([0, 1, 2], {"sent": 3, "received": 3, "missing": 0, "duplicated": 0}),
        ([2, 0, 1], {"sent": 3, "received": 3, "missing": 0, "duplicated": 0}),
        ([1, 2], {"sent": 3, "received": 2, "missing": 1, "duplicated": 0}),
        ([0, 3, 4, 9], {"sent": 10, "received": 4, "missing": 6, "duplicated": 0}),
        ([0, 1, 1, 2, 2, 2], {"sent": 3, "received": 3, "missing": 0, "duplicated": 3}),
        ([0, 0, 5], {"sent": 6, "received": 2, "missing": 4, "duplicated": 1}),
    ],
)
def test_seq_stats_counts_sent_missing_and_duplicated(seqs, expected):
    """Sent is max seq + 1; missing are seqs never received; duplicates are extra copies."""
    assert faultsoak.seq_stats(seqs) == expected


def test_account_is_per_boot_and_per_camera_with_the_last_heartbeat_counts():
    """Each boot and camera has its own seq; drops come from that boot's heartbeat."""
    dets = [*msgs("a", [0, 1, 3, 3]), *msgs("a", [0, 2], camera="back"), *msgs("b", [0, 1, 2])]
    events = [*msgs("a", [0, 2]), *msgs("b", [1])]
    out = faultsoak.account(dets, events, {"a": hb(dropped_disk_full=2, dropped_overflow=1)})
    a, b = out["boots"]
    assert (a["boot_id"], a["det_sent"], a["det_received"]) == ("a", 7, 5)
    assert (a["det_missing"], a["det_duplicated"]) == (2, 1)
    assert (a["ev_sent"], a["ev_missing"], a["counted_dropped"], a["unexplained"]) == (3, 1, 3, 0)
    assert (b["det_missing"], b["ev_sent"], b["ev_missing"], b["counted_dropped"]) == (0, 2, 1, 0)
    assert b["unexplained"] == 1  # a boot without a heartbeat counted nothing
    assert out["total"]["det_sent"] == 10 and out["total"]["unexplained"] == 1


@pytest.mark.parametrize(
    ("health", "counted"),
    [
        (None, 0),
        ({}, 0),
        (hb(), 0),
        (hb(1, 2, 3, 4), 10),
        ({"mqtt": {"dropped_overflow": 5}}, 5),  # a heartbeat from before dropped_disk_full
    ],
)
def test_dropped_counted_sums_every_reason(health, counted):
    """Overflow, expiry, disk-full and oversize drops all count as explained loss."""
    assert faultsoak.dropped_counted(health) == counted


def test_account_orders_boots_as_given_then_as_they_arrived():
    """A boot known only from its heartbeat still gets a row, sending nothing."""
    out = faultsoak.account(msgs("b", [0]) + msgs("a", [0]), [], {"c": hb()}, boots=["a"])
    assert [r["boot_id"] for r in out["boots"]] == ["a", "b", "c"]
    assert out["boots"][2]["det_sent"] == 0


def test_more_counted_than_missing_is_negative_unexplained():
    """A boot that counts drops of an earlier boot's spooled rows shows it, not hides it."""
    out = faultsoak.account(msgs("a", [0, 1]), [], {"a": hb(dropped_disk_full=3)})
    assert out["boots"][0]["unexplained"] == -3


def test_gaps_name_the_missing_runs_and_the_times_around_them():
    """Each run of missing seqs, with the ts before (None at the start) and after it."""
    out = faultsoak.gaps(msgs("a", [2, 3, 7, 8, 8]))
    assert [(g["first"], g["last"]) for g in out] == [(0, 1), (4, 6)]
    assert out[0]["ts_before"] is None
    assert out[1]["ts_after"] - out[1]["ts_before"] == pytest.approx(4.0)
    assert faultsoak.gaps(msgs("a", [0, 1, 2])) == []


def ev(boot: str, seq: int, kind: str, oid: str, reason: str | None = None) -> dict:
    return {"boot_id": boot, "camera": "front", "seq": seq, "type": kind, "id": oid,
            "end_reason": reason}  # fmt: skip


def test_event_ends_pairs_each_new_with_one_end_across_boots_and_duplicates():
    """A redelivered end is one end; a restart end comes from the next boot."""
    events = [
        ev("a", 0, "new", "x"),
        ev("a", 1, "end", "x", "lost"),
        ev("a", 1, "end", "x", "lost"),  # the same message delivered twice
        ev("a", 2, "new", "y"),
        ev("b", 0, "end", "y", "restart"),
        ev("b", 1, "new", "z"),
        ev("b", 2, "end", "w", "shutdown"),
        ev("b", 3, "new", "v"),
        ev("b", 4, "end", "v", "lost"),
        ev("b", 5, "end", "v", "shutdown"),
    ]
    out = faultsoak.event_ends(events)
    assert out["new"] == 4 and out["ended_once"] == 2
    assert out["without_end"] == ["z"]
    assert out["end_without_new"] == ["w"]
    assert out["ended_more_than_once"] == ["v"]
    assert out["end_reasons"] == {"lost": 2, "restart": 1, "shutdown": 2}


@pytest.mark.parametrize(
    ("ends", "ev_missing", "ok"),
    [
        ({"without_end": [], "end_without_new": []}, 0, True),
        ({"without_end": ["z"], "end_without_new": ["w"]}, 2, True),
        ({"without_end": ["z"], "end_without_new": ["w"]}, 1, False),
        ({"without_end": [], "end_without_new": [], "ended_more_than_once": ["v"]}, 5, False),
    ],
)
def test_pairs_explained_only_by_missing_events(ends, ev_missing, ok):
    """A broken pair is explained only when its other half is a missing event."""
    ends = {"new_more_than_once": [], "ended_more_than_once": [], **ends}
    assert faultsoak.pairs_explained(ends, {"ev_missing": ev_missing}) is ok


@pytest.mark.parametrize("minutes", [1, 10, 30])
def test_schedule_is_seeded_and_covers_every_kind(minutes):
    """The same seed gives the same faults; every kind comes, within the minutes."""
    a, b = faultsoak.schedule(minutes, 39), faultsoak.schedule(minutes, 39)
    assert a == b and a != faultsoak.schedule(minutes, 40)
    assert {f.kind for f in a} == set(faultsoak.KINDS)
    assert all(f.at_s < minutes * 60 for f in a)
    assert all(x.at_s + x.duration_s < y.at_s for x, y in itertools.pairwise(a))


def test_fault_at_names_the_faults_overlapping_a_window():
    """Faults whose start..end overlaps the window; an unended one lasts to the end."""
    timeline = [
        {"what": "broker start", "wall": 10.0},
        {"what": "broker end", "wall": 20.0},
        {"what": "disk+broker start", "wall": 30.0},
        {"what": "disk full", "wall": 30.5},
        {"what": "disk+broker end", "wall": 40.0},
        {"what": "net start", "wall": 50.0},
    ]
    assert faultsoak.fault_at(timeline, 15.0, 16.0) == ["broker"]
    assert faultsoak.fault_at(timeline, 21.0, 29.0) == []
    assert faultsoak.fault_at(timeline, 19.0, 31.0) == ["broker", "disk+broker"]
    assert faultsoak.fault_at(timeline, 60.0, 61.0) == ["net"]
