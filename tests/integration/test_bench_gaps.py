"""bench/gaps.py (issue 38): a busy frame's cost at each sampling rate, offline."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gaps  # noqa: E402  (bench/gaps.py, found through the path above)
import harness  # noqa: E402  (bench/harness.py)


@pytest.mark.timeout(120)
def test_each_rate_samples_the_clip_as_the_live_reader_and_counts_every_look():
    """The first 40 frames of vtest.avi at 10 and at 5 fps: every frame, then every other
    one, each looked at (the first with a coarse look), with model pixels and CPU counted."""
    every = gaps.one(10.0, {}, limit=40)
    half = gaps.one(5.0, {}, limit=40)
    assert every["frames"] == 40 and half["frames"] == 20
    for row in (every, half):
        assert row["coarse_share"] >= 1 / row["frames"]  # the first frame's coarse look
        assert row["kpx_per_frame"] > 0 and row["regions_per_frame"] > 0
        assert 0 < row["sheet_kpx_per_frame"] < row["kpx_per_frame"]  # a coarse look besides
        assert 0.3 < row["region_share"] < 1  # packing adds gutters, border and rounding
        assert row["cpu_ms_mean"] > 0 and row["new_events"] > 0
    # Frame 20 is the one labelled frame of the 40 (vtest_people.json), looked at by both.
    for row in (every, half):
        assert row["labelled_frames"] == 1
        assert 0.5 <= row["recall"] <= 1 and 0.5 <= row["precision"] <= 1


def test_also_names_each_variant_by_its_spec_with_json_values():
    """``--also`` of bench/gaps.py and bench/farstill.py: one variant per spec, its keys'
    values read as JSON."""
    got = harness.also_variants(["predict_s=0", 'recheck_s=0.5,sweep_s=2,regions="full"'])
    assert got == {
        "predict_s=0": {"predict_s": 0},
        'recheck_s=0.5,sweep_s=2,regions="full"': {
            "recheck_s": 0.5,
            "sweep_s": 2,
            "regions": "full",
        },
    }


def test_write_result_writes_the_json_with_the_time_it_took(tmp_path):
    """The offline benches' JSON (bench/gaps.py, bench/farstill.py): the result, its
    seconds, in a folder made for it."""
    out = tmp_path / "results" / "r.json"
    harness.write_result({"rows": [1]}, out, time.monotonic() - 2.0)
    got = json.loads(out.read_text())
    assert got["rows"] == [1] and 2.0 <= got["elapsed_s"] < 60
