"""Heartbeat content and the one-line log summary, computed from the live components."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from agent import __version__
from agent.messages import (
    CameraHealth,
    CommandsHealth,
    Heartbeat,
    InferenceHealth,
    Percentiles,
    SystemHealth,
    utc_ts,
)
from agent.mqtt.client import LinkStats
from agent.service.engine import InferenceEngine
from agent.service.publish import DetectionPublisher
from agent.stats import ProcessStats


@dataclass(frozen=True, slots=True)
class CameraFigures:
    """What a camera worker reports about itself."""

    state: str
    fps_in: float
    frames_dropped: int
    reconnects: int
    last_frame_age_s: float | None


def build_heartbeat(
    *,
    device_id: str,
    boot_id: str,
    uptime_s: float,
    engine: InferenceEngine,
    publisher: DetectionPublisher,
    cameras: Mapping[str, CameraFigures],
    link: LinkStats,
    system: ProcessStats,
    now: float | None = None,
    commands: CommandsHealth | None = None,
    objects_reason: str | None = None,
) -> Heartbeat:
    """The ``edge-vision/health/1`` heartbeat. ``objects_reason``: why ``objects.json``
    lags (``ObjectsState.degraded_reason``); the link's own reason goes first."""
    info = engine.models.info
    cams = {}
    reason = link.degraded_reason or objects_reason
    degraded = not link.connected or engine.errors_recent() or reason is not None
    for cid, fig in cameras.items():
        out = publisher.camera(cid)
        degraded = degraded or fig.state != "streaming"
        cams[cid] = CameraHealth(
            state=fig.state if fig.state in ("streaming", "reconnecting") else "offline",
            fps_in=fig.fps_in,
            fps_processed=out.fps_processed.rate(),
            frames_dropped=fig.frames_dropped,
            reconnects=fig.reconnects,
            last_frame_age_s=None
            if fig.last_frame_age_s is None
            else round(fig.last_frame_age_s, 3),
        )
    hist = publisher.inference_ms
    state = "paused" if engine.paused else ("degraded" if degraded else "running")
    return Heartbeat(
        device=device_id,
        boot_id=boot_id,
        ts=utc_ts(time.time() if now is None else now),
        uptime_s=round(uptime_s, 1),
        version=__version__,
        state=state,
        cameras=cams,
        inference=InferenceHealth(
            provider=info.provider,
            model_sha256=info.sha256,
            latency_ms=Percentiles(
                p50=hist.percentile(50), p95=hist.percentile(95), p99=hist.percentile(99)
            ),
        ),
        mqtt=link.health(),
        system=SystemHealth(
            cpu_percent=system.cpu_percent(),
            rss_mb=system.rss_mb(),
            temp_c=system.temp_c(),
            load1=system.load1() or 0.0,
        ),
        commands=commands,
        reason=reason if state == "degraded" else None,
    )


def summary_line(hb: Heartbeat, label_totals: Mapping[str, Mapping[str, int]]) -> str:
    """``front 10.0/10.0 fps person=3 | broker up, spool 0 | infer p50 21 ms``."""
    parts = []
    for cid, cam in hb.cameras.items():
        labels = " ".join(f"{k}={v}" for k, v in sorted(label_totals.get(cid, {}).items()))
        parts.append(
            f"{cid} {cam.state} in {cam.fps_in:.1f} fps, done {cam.fps_processed:.1f} fps, "
            f"{labels or 'nothing'}"
        )
    m = hb.mqtt
    broker = "broker up" if m.connected else "broker DOWN"
    p50 = hb.inference.latency_ms.p50
    infer = f"infer p50 {p50:.0f} ms" if p50 is not None else "infer -"
    state = f"{hb.state} ({hb.reason})" if hb.reason else hb.state
    return " | ".join([*parts, f"{broker}, spool {m.spool_depth}", infer, state])
