"""Optional Prometheus ``/metrics`` endpoint (``metrics.port``; off by default).

The figures are the heartbeat's, read at scrape time (no second bookkeeping), plus an
inference latency histogram fed per processed frame. Needs ``prometheus-client``
(``pip install 'edge-vision-agent[metrics]'``); only imported when the endpoint is on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from agent.errors import ConfigError
from agent.log import get_logger
from agent.messages import Heartbeat
from agent.settings import MetricsSettings

log = get_logger("metrics")

#: Every value of the heartbeat's ``state``: each gets a series of ``edge_agent_state``.
STATES = ("running", "paused", "degraded")

#: Inference latency buckets in seconds: 2 ms (x86 320 INT8) .. 2.5 s (a Pi on 640 FP32).
LATENCY_BUCKETS_S = (0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)


def heartbeat_families(hb: Heartbeat) -> Iterator[Any]:
    """Metric families of one heartbeat (gauges for levels, counters for totals)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    up = GaugeMetricFamily("edge_agent_camera_up", "1 while the camera streams", labels=["camera"])
    fps_in = GaugeMetricFamily(
        "edge_agent_camera_fps_in", "frames per second read from the camera", labels=["camera"]
    )
    fps_out = GaugeMetricFamily(
        "edge_agent_camera_fps_processed", "frames per second through inference", labels=["camera"]
    )
    drops = CounterMetricFamily(
        "edge_agent_camera_frames_dropped", "frames dropped (newest kept)", labels=["camera"]
    )
    reconnects = CounterMetricFamily(
        "edge_agent_camera_reconnects", "camera reopen attempts", labels=["camera"]
    )
    for cid, cam in hb.cameras.items():
        up.add_metric([cid], 1.0 if cam.state == "streaming" else 0.0)
        fps_in.add_metric([cid], cam.fps_in)
        fps_out.add_metric([cid], cam.fps_processed)
        drops.add_metric([cid], cam.frames_dropped)
        reconnects.add_metric([cid], cam.reconnects)
    yield from (up, fps_in, fps_out, drops, reconnects)
    m = hb.mqtt
    yield GaugeMetricFamily("edge_agent_mqtt_connected", "1 while connected", value=m.connected)
    yield GaugeMetricFamily("edge_agent_spool_depth", "messages in the spool", value=m.spool_depth)
    yield GaugeMetricFamily("edge_agent_spool_bytes", "bytes in the spool", value=m.spool_bytes)
    yield CounterMetricFamily(
        "edge_agent_published",
        "detections and events (the spooled messages) acknowledged by the broker; retained "
        "states, replies and snapshots are not counted",
        value=m.published,
    )
    dropped = CounterMetricFamily(
        "edge_agent_spool_dropped", "messages dropped before delivery", labels=["reason"]
    )
    dropped.add_metric(["overflow"], m.dropped_overflow)
    dropped.add_metric(["expired"], m.dropped_expired)
    dropped.add_metric(["oversize"], m.rejected_oversize)
    dropped.add_metric(["disk_full"], m.dropped_disk_full)
    yield dropped
    if hb.commands is not None:
        refused = CounterMetricFamily(
            "edge_agent_commands_refused",
            "commands refused (malformed, unknown, unsigned, bad signature, stale, replayed)",
            labels=["code"],
        )
        c = hb.commands
        for code, n in (
            ("unsigned_command", c.unsigned_command),
            ("bad_signature", c.bad_signature),
            ("stale_command", c.stale_command),
            ("replayed_command", c.replayed_command),
            (
                "other",
                c.rejected
                - c.unsigned_command
                - c.bad_signature
                - c.stale_command
                - c.replayed_command,
            ),
        ):
            refused.add_metric([code], max(0, n))
        yield refused
        yield CounterMetricFamily("edge_agent_commands_received", "commands", value=c.received)
    # What never changes within a process; the state changes, so it has a gauge of its own
    # (a label here would start a new series at each change and break joins on info).
    info = GaugeMetricFamily(
        "edge_agent_info", "constant 1: the agent's version as a label", labels=["version"]
    )
    info.add_metric([hb.version], 1)
    yield info
    model = GaugeMetricFamily(
        "edge_agent_model_info",
        "constant 1: the active model and provider as labels (a new series at a model swap)",
        labels=["provider", "model_sha256"],
    )
    model.add_metric([hb.inference.provider, hb.inference.model_sha256], 1)
    yield model
    state = GaugeMetricFamily(
        "edge_agent_state", "1 for the agent's current state, 0 for the others", labels=["state"]
    )
    for name in STATES:
        state.add_metric([name], 1.0 if hb.state == name else 0.0)
    yield state
    yield GaugeMetricFamily("edge_agent_uptime_seconds", "seconds since start", value=hb.uptime_s)


class MetricsEndpoint:
    """The HTTP endpoint and the per-frame/per-event hooks; all no-ops while disabled."""

    def __init__(self, settings: MetricsSettings, heartbeat: Callable[[], Heartbeat]) -> None:
        self.settings = settings
        self._heartbeat = heartbeat
        self._server: Any = None
        self._latency: Any = None
        self._events: Any = None
        self.port: int | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.port is not None

    def start(self) -> None:
        if self.settings.port is None:
            return
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
        except ImportError as e:
            raise ConfigError(
                "metrics.port is set but prometheus-client is not installed: "
                "pip install 'edge-vision-agent[metrics]' (or remove metrics.port)"
            ) from e
        registry = CollectorRegistry(auto_describe=True)
        outer = self

        class _Heartbeat:
            def collect(self) -> Iterator[Any]:
                yield from heartbeat_families(outer._heartbeat())

        registry.register(_Heartbeat())
        self._latency = Histogram(
            "edge_agent_inference_latency_seconds",
            "model inference time per frame",
            ["camera"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self._events = Counter(
            "edge_agent_events",
            "object events published (edge-vision/event/1), by camera and type",
            ["camera", "type"],
            registry=registry,
        )
        try:
            self._server, _ = start_http_server(
                self.settings.port, addr=self.settings.host, registry=registry
            )
        except OSError as e:
            raise ConfigError(
                f"metrics.port {self.settings.port} on {self.settings.host}: {e.strerror}; "
                "pick a free port"
            ) from e
        self.port = int(self._server.server_port)
        log.info("metrics_started", host=self.settings.host, port=self.port)

    def observe_inference(self, camera: str, inference_ms: float) -> None:
        """Per processed frame (inference thread): one histogram observation."""
        if self._latency is not None:
            self._latency.labels(camera).observe(inference_ms / 1000.0)

    def count_event(self, camera: str, event_type: str) -> None:
        """Once per EventMessage sent (the objects service calls it)."""
        if self._events is not None:
            self._events.labels(camera, event_type).inc()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
