"""Bounded statistics: histogram percentiles, rate meter, sd_notify datagrams."""

from __future__ import annotations

import os
import socket
import tempfile

import numpy as np
import pytest

from agent.service.notify import Notifier
from agent.stats import LatencyHistogram, ProcessStats, RateMeter


@pytest.mark.parametrize("dist", ["uniform", "lognormal"])
def test_histogram_percentiles_within_bucket_width(dist):
    """p50/p95/p99 from the histogram are within ~6% of the exact percentiles."""
    rng = np.random.default_rng(1)
    xs = rng.uniform(5, 80, 20000) if dist == "uniform" else rng.lognormal(3, 0.5, 20000)
    h = LatencyHistogram()
    for x in xs:
        h.add(float(x))
    for p in (50, 95, 99):
        assert h.percentile(p) == pytest.approx(np.percentile(xs, p), rel=0.06)


def test_histogram_memory_is_bounded_and_empty_is_none():
    """The histogram has a fixed bucket count and reports None before any sample."""
    h = LatencyHistogram()
    assert h.percentile(50) is None
    for i in range(100000):
        h.add(i % 500 / 3)
    assert len(h._counts) == 290
    assert h.count == 100000
    assert h.percentile(100) is not None


def test_rate_meter_window():
    """A 10 Hz tick stream reads 10/s; the rate decays once ticks stop."""
    m = RateMeter(window_s=5.0)
    for i in range(51):
        m.tick(now=100.0 + i * 0.1)
    assert m.rate(now=105.0) == pytest.approx(10.0, rel=0.02)
    assert m.rate(now=120.0) == 0.0


def test_process_stats_reads_proc():
    """RSS is positive; temperature is None or a plausible number."""
    s = ProcessStats()
    assert s.rss_mb() > 10
    t = s.temp_c()
    assert t is None or -40 < t < 150
    assert s.cpu_percent() >= 0


def test_temp_reads_hottest_zone(tmp_path):
    """The hottest plausible thermal zone is reported, in degrees C."""
    for i, milli in enumerate(["45000", "61500", "garbage"]):
        (tmp_path / f"thermal_zone{i}").mkdir()
        (tmp_path / f"thermal_zone{i}" / "temp").write_text(milli)
    assert ProcessStats.temp_c(tmp_path) == 61.5


def test_notifier_sends_datagrams():
    """READY/WATCHDOG/STATUS/STOPPING arrive as sd_notify datagrams on NOTIFY_SOCKET."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "notify.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        server.bind(path)
        server.settimeout(2)
        n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000"})
        assert n.watchdog_interval_s == 2.0
        assert n.ready("starting")
        assert server.recv(256) == b"READY=1\nSTATUS=starting"
        n.watchdog()
        assert server.recv(256) == b"WATCHDOG=1"
        n.stopping()
        assert server.recv(256) == b"STOPPING=1"
        n.close()
        server.close()


def test_notifier_noop_outside_systemd():
    """Without NOTIFY_SOCKET nothing is sent and no watchdog interval is set."""
    n = Notifier({})
    assert not n.enabled
    assert not n.ready()
    assert n.watchdog_interval_s is None
