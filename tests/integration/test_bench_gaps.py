"""bench/gaps.py (issue 38): a busy frame's cost at each sampling rate, offline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gaps  # noqa: E402  (bench/gaps.py, found through the path above)


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
        assert row["cpu_ms_mean"] > 0 and row["new_events"] > 0
