"""The optional Prometheus /metrics endpoint, scraped from a real running agent."""

from __future__ import annotations

import urllib.request

import pytest

from tests.agent_proc import MEDIA, ROOT, AgentProc
from tests.brokers import free_port, wait_until

pytest.importorskip("prometheus_client")


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.timeout(90)
def test_metrics_endpoint_serves_the_heartbeat_figures(broker, tmp_path):
    """fps, drops, reconnects, latency histogram, spool and published counters are scraped."""
    port = free_port()
    cams = [{"id": "cam", "source": str(MEDIA / "*.jpg"), "loop": True, "fps": 4}]
    overrides = {
        "detector": {"model": str(ROOT / "models" / "yolo11n-pose-320-int8.onnx"),
                     "sessions": 1, "threads": 1},
        "metrics": {"port": port},
    }  # fmt: skip
    agent = AgentProc(broker, tmp_path, cameras=cams, overrides=overrides).start()
    try:

        def published() -> bool:
            try:
                return (_value(_scrape(port), "edge_agent_published_total") or 0) >= 3
            except OSError:
                return False

        assert wait_until(published, 60, 0.2), agent.tail()
        text = _scrape(port)
        for name in (
            'edge_agent_camera_fps_processed{camera="cam"}',
            'edge_agent_camera_frames_dropped_total{camera="cam"}',
            'edge_agent_camera_reconnects_total{camera="cam"}',
            'edge_agent_camera_up{camera="cam"}',
            "edge_agent_spool_depth",
            'edge_agent_spool_dropped_total{reason="overflow"}',
            'edge_agent_spool_dropped_total{reason="disk_full"}',
            "edge_agent_mqtt_connected",
        ):
            assert _value(text, name) is not None, name
        assert _value(text, 'edge_agent_camera_up{camera="cam"}') == 1.0
        assert _value(text, "edge_agent_mqtt_connected") == 1.0
        count = _value(text, 'edge_agent_inference_latency_seconds_count{camera="cam"}')
        assert count is not None and count >= 3
        assert 'edge_agent_inference_latency_seconds_bucket{camera="cam",le="+Inf"}' in text
        assert "# TYPE edge_agent_events_total counter" in text
    finally:
        agent.stop()


def test_metrics_off_by_default():
    """Without metrics.port nothing listens: the setting defaults to off."""
    from agent.settings import MetricsSettings

    assert MetricsSettings().port is None and MetricsSettings().host == "127.0.0.1"


@pytest.mark.timeout(90)
def test_events_are_counted(broker, tmp_path):
    """Each event the objects stage sends is counted in edge_agent_events_total by type."""
    from tests.objects_clip import FPS, write_folder

    port = free_port()
    clip = write_folder(tmp_path / "clip")
    cams = [{"id": "gate", "source": str(clip), "loop": True, "fps": FPS}]
    overrides = {"metrics": {"port": port}, "objects": {"lost_s": 1.0}}
    agent = AgentProc(broker, tmp_path, cameras=cams, overrides=overrides).start()
    try:

        def ended() -> bool:
            try:
                return (
                    _value(_scrape(port), 'edge_agent_events_total{camera="gate",type="end"}') or 0
                ) >= 1
            except OSError:
                return False

        assert wait_until(ended, 60, 0.2), agent.tail()
        text = _scrape(port)
        assert (_value(text, 'edge_agent_events_total{camera="gate",type="new"}') or 0) >= 1
    finally:
        agent.stop()
