"""From processed frames to MQTT messages: DetectionMessage, label counts, on_change mode."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agent.log import get_logger
from agent.messages import DetectionMessage, ModelRef, utc_ts
from agent.mqtt.topics import Topics
from agent.regions.looker import Looker
from agent.service.engine import Processed
from agent.service.objects import ObjectsService
from agent.stats import LatencyHistogram, RateMeter

log = get_logger("publish")


class Outbox(Protocol):
    """What the pipeline needs from the MQTT layer."""

    def publish_spooled(self, topic: str, payload: bytes, qos: int) -> bool: ...

    def publish_state(self, topic: str, payload: bytes) -> None: ...

    def clear_state(self, topic: str) -> None: ...


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
    motion_on: bool | None = None
    last_motion_t: float | None = None
    #: Counts and motion change from the pipeline and from the camera's status thread.
    state_lock: threading.Lock = field(default_factory=threading.Lock)


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
        lookers: dict[str, Looker] | None = None,
        motion_off_s: float = 10.0,
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
        self.lookers = lookers or {}
        self.motion_off_s = motion_off_s
        self._lock = threading.Lock()

    def camera(self, camera_id: str) -> CameraOut:
        cam = self.cameras.get(camera_id)  # every frame: no new CameraOut to throw away
        if cam is not None:
            return cam
        with self._lock:
            return self.cameras.setdefault(camera_id, CameraOut())

    def __call__(self, p: Processed) -> None:
        cid = p.frame.camera_id
        cam = self.camera(cid)
        if not p.skipped:
            self._observe(cam, p)
        if p.motion is not None:
            self._motion(cid, cam, p.motion, p.frame.t_scene)
        if p.error is not None:
            cam.errors += 1
            return
        cam.fps_processed.tick()
        model = ModelRef(name=p.model.name, version=p.model.version, sha256=p.model.sha256)
        dets = p.detections
        track_ids: list[int | None] = [None] * (len(dets) if dets is not None else 0)
        counts = dets.counts() if dets is not None else None
        if self.objects is not None:
            f = p.frame
            looked = p.regions if p.motion is not None else None
            tracked = self.objects.process(
                cid, dets, f.image, f.t_scene, f.ts_capture, model, looked
            )
            dets, track_ids = tracked.detections, tracked.track_ids
            looker = self.lookers.get(cid)
            if looker is not None:
                looker.follow(tracked.tracks, p.coarse, (dets, track_ids), f.t_scene, tracked.rows)
                # Regions see part of the frame: the objects carry what was not looked at.
                counts = tracked.objects
            elif dets is not None:
                counts = dets.counts()
        if counts is not None:
            self._publish_counts(cid, cam, counts)
        if dets is None or p.times is None:
            return  # not looked at: nothing to publish but the state above
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
            camera=cid,
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
            regions=[[round(v, 1) for v in r] for r in p.regions],
        )
        cam.seq += 1
        self._outbox.publish_spooled(self._topics.camera_detections(cid), msg.to_bytes(), self.qos)
        cam.capture_to_publish.add(c2p)
        cam.published += 1

    def _observe(self, cam: CameraOut, p: Processed) -> None:
        """A frame not skipped: the camera's newest (snapshots); one that ran the model
        (not only still objects' last looks) counts for the inference time, and observers
        (the health window of a model update) see it."""
        cam.last = p
        if p.stood_in:
            return
        if p.times is not None and p.error is None:
            self.inference_ms.add(p.times.inference_ms)
        for observe in self._observers:
            observe(p)

    def _motion(self, camera_id: str, cam: CameraOut, moving: bool, t: float) -> None:
        """The retained motion topic: ON at once, OFF after ``motion_off_s`` without motion."""
        if moving:
            cam.last_motion_t = t
        on = cam.last_motion_t is not None and t - cam.last_motion_t < self.motion_off_s
        with cam.state_lock:
            if on != cam.motion_on:
                cam.motion_on = on
                self._outbox.publish_state(
                    self._topics.camera_motion(camera_id), b"ON" if on else b"OFF"
                )

    def _publish_counts(self, camera_id: str, cam: CameraOut, counts: dict[str, int]) -> None:
        """Retained per-label counts, sent only when a label's count changes."""
        with cam.state_lock:
            for label in set(cam.counts) | set(counts):
                n = counts.get(label, 0)
                if cam.counts.get(label) != n:
                    cam.counts[label] = n
                    self._outbox.publish_state(
                        self._topics.camera_label(camera_id, label), str(n).encode()
                    )

    def reset_camera(self, camera_id: str, labels: list[str]) -> None:
        """Counts 0 and motion OFF: at start (nothing is remembered from an earlier run),
        and when the camera is down or ended (nobody is seen on a camera that sees nothing).
        """
        cam = self.camera(camera_id)
        with cam.state_lock:
            for label in set(labels) | set(cam.counts):
                cam.counts[label] = 0
                self._outbox.publish_state(self._topics.camera_label(camera_id, label), b"0")
            cam.last_published_counts = None
            if camera_id in self.lookers:
                cam.motion_on, cam.last_motion_t = False, None
                self._outbox.publish_state(self._topics.camera_motion(camera_id), b"OFF")

    def clear_camera(self, camera_id: str) -> None:
        """A clean stop: the counts and motion topics are deleted (nothing is seen now)."""
        cam = self.camera(camera_id)
        with cam.state_lock:
            for label in cam.counts:
                self._outbox.clear_state(self._topics.camera_label(camera_id, label))
            cam.counts.clear()
            if camera_id in self.lookers:
                cam.motion_on = None
                self._outbox.clear_state(self._topics.camera_motion(camera_id))
