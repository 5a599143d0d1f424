"""From processed frames to MQTT messages: DetectionMessage, label counts, on_change mode."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agent.log import get_logger
from agent.mqtt.messages import DetectionMessage, ModelRef, utc_ts
from agent.mqtt.topics import Topics
from agent.service.engine import Processed
from agent.service.objects import ObjectsService
from agent.stats import LatencyHistogram, RateMeter

log = get_logger("publish")


class Outbox(Protocol):
    """What the pipeline needs from the MQTT layer."""

    def publish_spooled(self, topic: str, payload: bytes, qos: int) -> bool: ...

    def publish_state(self, topic: str, payload: bytes) -> None: ...


@dataclass
class CameraOut:
    """Per-camera publishing state."""

    seq: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    last_published_counts: dict[str, int] | None = None
    fps_processed: RateMeter = field(default_factory=RateMeter)
    capture_to_publish: LatencyHistogram = field(default_factory=LatencyHistogram)
    published: int = 0
    skipped_unchanged: int = 0
    errors: int = 0
    last: Processed | None = None


class DetectionPublisher:
    """Turns ``Processed`` results into messages. Called in frame order per camera."""

    def __init__(
        self,
        outbox: Outbox,
        topics: Topics,
        device_id: str,
        boot_id: str,
        qos: int,
        mode: str,
        observers: list[Callable[[Processed], None]] | None = None,
        objects: ObjectsService | None = None,
    ) -> None:
        self._outbox = outbox
        self._topics = topics
        self._device = device_id
        self._boot = boot_id
        self.qos = qos
        self.mode = mode
        self.cameras: dict[str, CameraOut] = {}
        self.inference_ms = LatencyHistogram()
        self._observers = observers or []
        self.objects = objects
        self._lock = threading.Lock()

    def camera(self, camera_id: str) -> CameraOut:
        with self._lock:
            return self.cameras.setdefault(camera_id, CameraOut())

    def __call__(self, p: Processed) -> None:
        for observe in self._observers:
            observe(p)
        cam = self.camera(p.frame.camera_id)
        cam.last = p
        if p.detections is None or p.times is None:
            cam.errors += 1
            return
        self.inference_ms.add(p.times.inference_ms)
        cam.fps_processed.tick()
        model = ModelRef(name=p.model.name, version=p.model.version, sha256=p.model.sha256)
        dets = p.detections
        track_ids: list[int | None] = [None] * len(dets)
        if self.objects is not None:
            f = p.frame
            tracked = self.objects.process(
                f.camera_id, dets, f.image, f.t_capture, f.ts_capture, model
            )
            dets, track_ids = tracked.detections, tracked.track_ids
        counts = dets.counts()
        self._publish_counts(p.frame.camera_id, cam, counts)
        if self.mode == "on_change" and counts == cam.last_published_counts:
            cam.skipped_unchanged += 1
            return
        cam.last_published_counts = counts
        detections = dets.to_dicts()
        for d, tid in zip(detections, track_ids, strict=True):
            d["track_id"] = tid
        now = time.monotonic()
        c2p = (now - p.frame.t_capture) * 1e3
        msg = DetectionMessage(
            device=self._device,
            camera=p.frame.camera_id,
            boot_id=self._boot,
            seq=cam.seq,
            frame_id=p.frame.frame_id,
            ts=utc_ts(p.frame.ts_capture),
            image_wh=list(p.frame.image_wh),
            model=model,
            latency_ms={
                "capture_to_publish": round(c2p, 2),
                "inference": round(p.times.inference_ms, 2),
            },
            detections=detections,
        )
        cam.seq += 1
        self._outbox.publish_spooled(
            self._topics.camera_detections(p.frame.camera_id), msg.to_bytes(), self.qos
        )
        cam.capture_to_publish.add(c2p)
        cam.published += 1

    def _publish_counts(self, camera_id: str, cam: CameraOut, counts: dict[str, int]) -> None:
        """Retained per-label counts, sent only when a label's count changes."""
        for label in set(cam.counts) | set(counts):
            n = counts.get(label, 0)
            if cam.counts.get(label) != n:
                cam.counts[label] = n
                self._outbox.publish_state(
                    self._topics.camera_label(camera_id, label), str(n).encode()
                )
