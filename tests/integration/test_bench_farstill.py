"""bench/farstill.py (issue 38): far people still from the first frame, offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import farstill  # noqa: E402  (bench/farstill.py, found through the path above)
import regions  # noqa: E402


@pytest.mark.timeout(120)
def test_region_mode_publishes_far_still_people_on_the_first_frame():
    """vtest.avi's frame 700 frozen (eight people 55-100 px tall on 576): the coarse look of
    the first frame and its regions find most of them at once, where the whole frame on
    the 640 model finds a few; each time is 0.0 or later, or None (not found)."""
    labels = json.loads(regions.LABELS.read_text())["frames"]["700"]["people"]
    image = next(f for i, f in enumerate(regions.video_frames(regions.VIDEO)) if i == 700)
    defaults = farstill.first_seen(image, labels, {}, 0.3)
    full = farstill.first_seen(image, labels, {"regions": "full"}, 0.3)
    assert len(defaults) == len(labels) == 8
    at_once = sum(t == 0.0 for t in defaults)
    assert at_once >= 4
    assert at_once > sum(t == 0.0 for t in full)
    assert all(t is None or 0.0 <= t <= 0.2 for t in defaults + full)
