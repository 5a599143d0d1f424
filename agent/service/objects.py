"""Objects over time in the running agent: one ``CameraObjects`` per camera, published.

Per processed frame (publisher thread, in frame order per camera) the camera's stage runs;
its events go through the spool (``mqtt.qos``), zone and line counts are retained state,
snapshots are drawn and encoded on a thread of their own so the frame path stays cheap.

What a crash must not lose is persisted in ``<state_dir>/objects.json`` before the events
that change it are spooled: the open events (the next start ends them with ``restart``)
and the line totals (cumulative across restarts). A crash between the two writes can at
worst send an ``end`` whose ``new`` never left, never a ``new`` without its ``end``.

The file is written on a thread of its own (``StateWriter``), which spools the events and
publishes the line counts once the write that holds them is done: the frame path never
waits on the disk (a rename on a busy SD card, or on ext4 mounted with ``discard``, takes
from 50 ms to half a second, and an inference worker waiting on it drops every camera's
frames), and the saves that queue up meanwhile go to disk in one write.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.log import get_logger
from agent.messages import EventMessage, ModelRef
from agent.mqtt.spool import disk_reason
from agent.mqtt.topics import Topics
from agent.objects.events import EndReason, EventBook, SnapshotRequest
from agent.objects.stage import CameraObjects, LineKey, ObjectsOutput, ZoneKey
from agent.objects.tracker import Track
from agent.osthread import name_os_thread
from agent.render.draw import draw_box, jpeg_within
from agent.settings import AgentSettings, CameraSettings

log = get_logger("objects")

STATE_FILE = "objects.json"
_SNAPSHOT_QUEUE = 16


class ObjectsOutbox(Protocol):
    """What the objects need from the MQTT layer."""

    def publish_spooled(self, topic: str, payload: bytes, qos: int | None = None) -> bool: ...

    def publish_state(self, topic: str, payload: bytes) -> None: ...

    def clear_state(self, topic: str) -> None: ...

    def publish_event(self, topic: str, payload: bytes, *, qos: int = 1) -> bool: ...


@dataclass(frozen=True, slots=True)
class Tracked:
    """A frame's detections as published: masked ones gone, each with its track id.

    ``objects``: confirmed objects per label now (those not looked at this frame too);
    ``tracks``: every live track, for the region planner; ``rows``: per detection, its
    row among those looked at (``ObjectsOutput.rows``; None: every one, in order).
    """

    detections: Detections | None
    track_ids: list[int | None]
    objects: dict[str, int]
    tracks: tuple[Track, ...]
    rows: npt.NDArray[np.intp] | None = None


def _member(key: str, value: Any) -> str:
    """``"key":value`` as compact JSON: one member of an object."""
    return f"{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))}"


class ObjectsState:
    """``objects.json``: open events and line totals per camera, written atomically."""

    def __init__(self, path: Path, *, retry_s: float = 1.0) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.cameras: dict[str, dict[str, Any]] = {}
        # Each camera's member of the file's "cameras" object as JSON (``"id":{...}``), kept:
        # a save serialises only the camera that changed (a busy box saves many times a
        # second; the whole file per save cost every camera's events each time, O(cameras)
        # per event).
        self._parts: dict[str, str] = {}
        # A failed write (full or read-only disk) is kept in memory and written again: the
        # file must catch up before a restart reads it, or a `new` would miss its `end`.
        self.failed_writes = 0
        self._error: OSError | None = None  # the last failed write's, until one succeeds
        self._retry_s = retry_s
        self._next_retry = 0.0

    @property
    def dirty(self) -> bool:
        """A write failed and none has succeeded since: the file lags what went out."""
        return self._error is not None

    @property
    def degraded_reason(self) -> str | None:
        """Why the file lags what has gone out (a failed write not yet caught up), for the
        heartbeat: ``disk_full: state_dir /x has 0 B free (objects.json not written)``."""
        e = self._error
        if e is None:
            return None
        return f"{disk_reason(self.path.parent, e)} ({self.path.name} not written)"

    def load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            cameras = data["cameras"]
            if not isinstance(cameras, dict):
                raise TypeError("cameras is not an object")
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as e:
            # Unreadable state loses the line totals and open events, not the start.
            log.error("objects_state_unreadable", path=str(self.path), error=str(e)[:200])
            return
        self.cameras = cameras
        self._parts = {k: _member(k, v) for k, v in cameras.items()}

    def line_totals(self, camera_id: str) -> dict[LineKey, int]:
        rows = self.cameras.get(camera_id, {}).get("lines", [])
        out: dict[LineKey, int] = {}
        for row in rows:
            if isinstance(row, list) and len(row) == 4 and isinstance(row[3], int):
                out[(str(row[0]), str(row[1]), str(row[2]))] = row[3]
        return out

    def open_events(self, camera_id: str) -> list[dict[str, Any]]:
        events = self.cameras.get(camera_id, {}).get("open", [])
        return [e for e in events if isinstance(e, dict)]

    @staticmethod
    def part(stage: CameraObjects) -> dict[str, Any]:
        """What the file keeps of one camera: its open events and line totals, as of now."""
        return {
            "open": stage.events.open_events(),
            "lines": [[*k, v] for k, v in sorted(stage.line_totals.items())],
        }

    def save(self, camera_id: str, stage: CameraObjects) -> None:
        self.save_parts([(camera_id, self.part(stage))])

    def save_parts(self, parts: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Set each camera's part (later ones win), then write the file once."""
        with self._lock:
            for camera_id, part in parts:
                self._set(camera_id, part)
            self._write()

    def forget_open(self, camera_id: str) -> None:
        with self._lock:
            self._set(camera_id, {**self.cameras.get(camera_id, {}), "open": []})
            self._write()

    def _set(self, camera_id: str, part: dict[str, Any]) -> None:
        self.cameras[camera_id] = part
        self._parts[camera_id] = _member(camera_id, part)

    def retry(self) -> None:
        """Write again what a failed write left only in memory (at most once per retry_s)."""
        if not self.dirty or time.monotonic() < self._next_retry:
            return
        with self._lock:
            if self.dirty:
                self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        cameras = ",".join(self._parts[k] for k in self.cameras)
        body = f'{{"version":1,"cameras":{{{cameras}}}}}'
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(tmp, self.path)
        except OSError as e:  # a full disk: the events still go out; written again later
            self.failed_writes += 1
            self._next_retry = time.monotonic() + self._retry_s
            if not self.dirty:
                log.error("objects_state_not_written", path=str(self.path), error=str(e))
            self._error = e
            with contextlib.suppress(OSError):  # a half-written file would only hold space
                tmp.unlink()
            return
        if self.dirty:
            log.info("objects_state_written", path=str(self.path), failed_writes=self.failed_writes)
        self._error = None


class StateWriter:
    """Writes ``objects.json`` off the frame path, then runs what waited for the write.

    ``put`` (a frame's worker, in frame order) queues a camera's part of the file and what
    may only happen once it is on disk (spooling the events that change it); the thread
    writes every part queued so far in one write, then runs their follow-ups in the order
    they came. A failed write (full disk) is written again every ``retry_s`` while the
    follow-ups go on (as they did before: events are not held back by a full disk). Not
    started (or closed): ``put`` writes and follows up itself."""

    def __init__(self, state: ObjectsState, retry_s: float = 1.0) -> None:
        self._state = state
        self._retry_s = retry_s
        self._items: deque[tuple[str, dict[str, Any], Callable[[], None]]] = deque()
        self._cv = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="objects-state", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, camera_id: str, part: dict[str, Any], after: Callable[[], None]) -> None:
        with self._cv:
            if self._thread.is_alive() and not self._closing:
                self._items.append((camera_id, part, after))
                self._cv.notify()
                return
        self._state.save_parts([(camera_id, part)])
        after()

    def close(self, timeout: float) -> None:
        """Write and follow up what is queued (within ``timeout``), then stop."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():  # the disk outlasted the stop: say what it holds up
            log.error(
                "objects_state_close_timed_out",
                path=str(self._state.path),
                timeout_s=round(timeout, 1),
                hint="a slow disk: an end waiting for the save goes out at the next start "
                "(reason restart) or not at all",
            )

    def _run(self) -> None:
        name_os_thread("objects-state")
        while True:
            with self._cv:
                if not self._items and not self._closing:
                    self._cv.wait(self._retry_s if self._state.dirty else None)
                batch = list(self._items)
                self._items.clear()
            if not batch:
                if self._closing:
                    return
                self._state.retry()  # a failed write, again (a no-op when none failed)
                continue
            try:
                self._state.save_parts([(cid, part) for cid, part, _ in batch])
            except Exception as e:  # never the thread's end: the events still go out
                log.error("objects_state_not_written", path=str(self._state.path), error=str(e))
            for *_, after in batch:
                try:
                    after()
                except Exception as e:  # one camera's follow-up must not stop the others
                    log.exception("objects_publish_failed", error=str(e)[:200])


class Snapshots:
    """Draws and encodes event snapshots off the frame path; drops when it falls behind."""

    def __init__(self, outbox: ObjectsOutbox, topics: Topics, limit: int, max_px: int) -> None:
        self._outbox = outbox
        self._topics = topics
        self._limit = limit
        self._max_px = max_px
        self._queue: queue.Queue[tuple[str, npt.NDArray[np.uint8], SnapshotRequest] | None] = (
            queue.Queue(_SNAPSHOT_QUEUE)
        )
        self._thread = threading.Thread(target=self._run, name="snapshots", daemon=True)
        self.published = 0
        self.dropped = 0

    def start(self) -> None:
        self._thread.start()

    def put(self, camera_id: str, image: npt.NDArray[np.uint8], req: SnapshotRequest) -> None:
        try:
            self._queue.put_nowait((camera_id, image, req))
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float) -> None:
        if self._thread.is_alive():
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                return
            self._thread.join(timeout)

    def _run(self) -> None:
        name_os_thread("snapshots")
        while True:
            item = self._queue.get()
            if item is None:
                return
            camera_id, image, req = item
            try:
                text = f"{req.label} {req.score:.2f}"
                data = jpeg_within(draw_box(image, req.xyxy, text), self._limit, self._max_px)
                if data:
                    topic = self._topics.event_snapshot(camera_id, req.event_id)
                    self._outbox.publish_event(topic, data, qos=1)
                    self.published += 1
            except Exception as e:  # a snapshot must never stop the others
                log.warning("snapshot_failed", camera=camera_id, error=str(e)[:200])


class ObjectsService:
    """Every camera's objects stage, its publishing and its persistence."""

    def __init__(
        self,
        settings: AgentSettings,
        outbox: ObjectsOutbox,
        topics: Topics,
        boot_id: str,
    ) -> None:
        self.settings = settings
        self._outbox = outbox
        self._topics = topics
        self._boot = boot_id
        self._qos = settings.mqtt.qos
        self.state = ObjectsState(settings.state_dir / STATE_FILE)
        self.state.load()
        self.stages: dict[str, CameraObjects] = {}
        self._locks: dict[str, threading.Lock] = {}
        for cam in settings.cameras:
            self.stages[cam.id] = CameraObjects(
                cam,
                settings.device_id,
                boot_id,
                settings.objects,
                line_totals=self.state.line_totals(cam.id),
            )
            self._locks[cam.id] = threading.Lock()
        self.snapshots = Snapshots(
            outbox, topics, settings.mqtt.max_payload_bytes, settings.objects.snapshot_max_px
        )
        self.writer = StateWriter(self.state)
        self.events_published = 0
        self._labels: list[str] = []
        #: Called with (camera, event type) for every event sent (Prometheus counter).
        self.on_event: Callable[[str, str], None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, labels: list[str]) -> None:
        """End what a previous run left open, publish the counts, start the snapshot thread."""
        self._end_restored()
        self.publish_counts(labels)
        self.snapshots.start()
        self.writer.start()

    def _end_restored(self) -> None:
        ts = time.time()
        for camera_id in list(self.state.cameras):
            saved = self.state.open_events(camera_id)
            if not saved:
                continue
            stage = self.stages.get(camera_id)
            book = stage.events if stage else EventBook(
                camera_id, self.settings.device_id, self._boot, self.settings.objects
            )  # fmt: skip
            ended: list[EventMessage] = []
            for body in saved:
                try:
                    ended.append(book.end_restored(body, ts))
                except ValueError as e:  # a damaged entry: skip it, end the others
                    log.error("objects_restore_skipped", camera=camera_id, error=str(e)[:200])
            self.state.forget_open(camera_id)
            for msg in ended:
                self._send_event(camera_id, msg)
            log.info("events_ended_after_restart", camera=camera_id, events=len(ended))

    def close(self, reason: EndReason, timeout: float = 2.0) -> None:
        """End every open event of every camera (clean stop), then stop the snapshots."""
        deadline = time.monotonic() + timeout
        for camera_id in self.stages:
            self.close_camera(camera_id, reason)
        self.writer.close(timeout)
        self.snapshots.close(max(0.0, deadline - time.monotonic()))

    def close_camera(self, camera_id: str, reason: EndReason) -> None:
        stage = self.stages.get(camera_id)
        if stage is None:
            return
        with self._locks[camera_id]:
            out = stage.close(reason, time.time())
            self._publish(camera_id, stage, out, None)

    # -- per frame ----------------------------------------------------------------------------
    def process(
        self,
        camera_id: str,
        dets: Detections | None,
        image: npt.NDArray[np.uint8],
        t: float,
        ts: float,
        model: ModelRef,
        looked: Sequence[tuple[float, float, float, float]] | None = None,
    ) -> Tracked:
        """One frame of ``camera_id`` (publisher thread, frame order); None: not looked at."""
        stage = self.stages[camera_id]
        wh = (int(image.shape[1]), int(image.shape[0]))
        with self._locks[camera_id]:
            out = stage.step(dets, t, ts, wh, model, looked, cut=stage.scene.update(image))
            self._publish(camera_id, stage, out, image)
        ids = [int(i) if i >= 0 else None for i in out.track_ids.tolist()]
        return Tracked(out.detections, ids, out.object_counts, out.tracks, out.rows)

    def _publish(
        self,
        camera_id: str,
        stage: CameraObjects,
        out: ObjectsOutput,
        image: npt.NDArray[np.uint8] | None,
    ) -> None:
        for (zone, label), n in out.zone_counts.items():
            self._outbox.publish_state(
                self._topics.zone_count(camera_id, zone, label), str(n).encode()
            )
        if out.events or out.line_counts:
            # Spooled once the file holds them: see the module docstring.
            events, lines = out.events, out.line_counts

            def after() -> None:
                for msg in events:
                    self._send_event(camera_id, msg)
                for (line, label, direction), n in lines.items():
                    self._outbox.publish_state(
                        self._topics.line_count(camera_id, line, label, direction),
                        str(n).encode(),
                    )

            self.writer.put(camera_id, self.state.part(stage), after)
        if image is not None:
            for req in out.snapshots:
                self.snapshots.put(camera_id, image, req)

    def _send_event(self, camera_id: str, msg: EventMessage) -> None:
        self._outbox.publish_spooled(
            self._topics.camera_events(camera_id), msg.to_bytes(), self._qos
        )
        self.events_published += 1
        if self.on_event is not None:
            self.on_event(camera_id, msg.type)
        if msg.type != "update":
            log.info(
                "object_event",
                camera=camera_id,
                type=msg.type,
                id=msg.id,
                label=msg.label,
                zones=msg.zones,
                end_reason=msg.end_reason,
            )

    # -- configuration ------------------------------------------------------------------------
    def publish_counts(self, labels: list[str]) -> None:
        """Retained zone and line counts for every (zone|line, label) the config names."""
        self._labels = list(labels)
        for camera_id, stage in self.stages.items():
            for (zone, label), n in stage.zone_labels(labels).items():
                self._outbox.publish_state(
                    self._topics.zone_count(camera_id, zone, label), str(n).encode()
                )
            for (line, label, direction), n in stage.line_labels(labels).items():
                self._outbox.publish_state(
                    self._topics.line_count(camera_id, line, label, direction), str(n).encode()
                )

    def reconfigure(self, camera: CameraSettings) -> None:
        """New zones, lines or masks for one camera: applied from its next frame."""
        stage = self.stages[camera.id]
        with self._locks[camera.id]:
            before_z = set(stage.zone_labels(self._labels))
            before_l = set(stage.line_labels(self._labels))
            stage.configure(camera)
            after_z = stage.zone_labels(self._labels)
            after_l = stage.line_labels(self._labels)
        for zone, label in before_z - set(after_z):
            self._outbox.clear_state(self._topics.zone_count(camera.id, zone, label))
        for line, label, direction in before_l - set(after_l):
            self._outbox.clear_state(self._topics.line_count(camera.id, line, label, direction))
        self.publish_counts(self._labels)

    def zone_keys(self) -> dict[str, list[ZoneKey]]:
        return {cid: sorted(s.zone_labels(self._labels)) for cid, s in self.stages.items()}

    def line_keys(self) -> dict[str, list[LineKey]]:
        return {cid: sorted(s.line_labels(self._labels)) for cid, s in self.stages.items()}
