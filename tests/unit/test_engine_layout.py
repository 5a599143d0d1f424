"""The inference engine's session layout: workers, their threads, the latency session."""

from __future__ import annotations

import pytest

from agent.service.engine import layout
from agent.settings import DetectorSettings


@pytest.mark.parametrize(
    ("detector", "cores", "expected"),
    [
        ({"regions": "full"}, 2, (2, 1, 2)),
        ({"regions": "full"}, 4, (4, 1, 4)),
        ({"regions": "full", "threads": 3}, 4, (4, 1, 3)),
        ({"regions": "full"}, 1, (1, 1, None)),
        # Region mode: a sheet runs on a worker's session; a latency session would be
        # loaded and never run.
        ({"regions": "motion"}, 2, (2, 1, None)),
        ({"regions": "motion"}, 4, (4, 1, None)),
        ({"regions": "motion"}, 1, (1, 1, None)),
        # Sessions set: as asked, in either mode.
        ({"regions": "motion", "sessions": 1}, 4, (1, 4, None)),
        ({"regions": "full", "sessions": 2, "threads": 2}, 4, (2, 2, None)),
    ],
)
def test_layout(detector, cores, expected):
    assert layout(DetectorSettings(**detector), cores) == expected
