"""One camera's objects stage: masks -> tracker -> zones, lines -> events.

``CameraObjects.step`` is fed one frame's detections at a time, in frame order, and
returns everything to publish for that frame; it does no I/O. Zones, lines and masks can be
replaced between two frames (``configure``), keeping tracks, events and line totals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.messages import EventMessage, ModelRef
from agent.objects.events import EndReason, EventBook, Look, SnapshotRequest
from agent.objects.geometry import anchor_bottom_centre, points_in_polygon, polygon_px
from agent.objects.lines import Direction, Line
from agent.objects.scene import SceneWatch
from agent.objects.tracker import ObjectTracker, Track, TrackerParams
from agent.objects.zones import Zone
from agent.settings import CameraSettings, ObjectsSettings

#: (line, label, direction) -> cumulative crossings.
LineKey = tuple[str, str, str]
#: (zone, label) -> objects in the zone now.
ZoneKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ObjectsOutput:
    """What one frame gives to publish.

    ``detections``: the frame's detections less the masked ones (None: not looked at);
    ``track_ids``: per kept detection, its track or -1; ``zone_counts`` and
    ``line_counts``: retained values that changed with this frame; ``rows``: per kept
    detection, its row among those handed in (None: every one, in order).
    """

    detections: Detections | None
    track_ids: npt.NDArray[np.int64]
    events: list[EventMessage]
    zone_counts: dict[ZoneKey, int]
    line_counts: dict[LineKey, int]
    snapshots: list[SnapshotRequest] = field(default_factory=list)
    tracks: tuple[Track, ...] = ()
    object_counts: dict[str, int] = field(default_factory=dict)
    rows: npt.NDArray[np.intp] | None = None


def select(dets: Detections, keep: npt.NDArray[np.bool_]) -> Detections:
    """The detections where ``keep`` is true, in order."""
    if bool(keep.all()):
        return dets
    idx = np.nonzero(keep)[0]
    return Detections(
        dets.xyxy[idx],
        dets.score[idx],
        dets.class_id[idx],
        tuple(dets.labels[i] for i in idx.tolist()),
        None if dets.keypoints is None else dets.keypoints[idx],
    )


class CameraObjects:
    """Objects over time for one camera (see the module docstring)."""

    def __init__(
        self,
        camera: CameraSettings,
        device_id: str,
        boot_id: str,
        params: ObjectsSettings,
        line_totals: dict[LineKey, int] | None = None,
    ) -> None:
        self.camera_id = camera.id
        self.params = params
        self.tracker = ObjectTracker(
            TrackerParams(
                high_score=params.track_score,
                new_track_score=params.track_score,
                lost_s=params.lost_s,
            )
        )
        self.events = EventBook(camera.id, device_id, boot_id, params)
        self.line_totals: dict[LineKey, int] = dict(line_totals or {})
        self._camera = camera
        self._image_wh: tuple[int, int] | None = None
        self._zones: dict[str, Zone] = {}
        self._lines: dict[str, Line] = {}
        self._masks: list[npt.NDArray[np.float64]] = []
        self._zone_counts: dict[ZoneKey, int] = {}
        #: The global change of this camera's frames: callers feed it every frame's image
        #: (``step(..., cut=stage.scene.update(image))``).
        self.scene = SceneWatch()

    # -- configuration ------------------------------------------------------------------------
    @property
    def camera(self) -> CameraSettings:
        return self._camera

    def configure(self, camera: CameraSettings) -> None:
        """New zones, lines or masks, from the next frame on (tracks and events kept)."""
        self._camera = camera
        if self._image_wh is not None:
            self._build(self._image_wh)

    def _build(self, image_wh: tuple[int, int]) -> None:
        cam = self._camera
        self._image_wh = image_wh
        self._zones = {n: Zone(n, z, image_wh) for n, z in cam.zones.items()}
        self._lines = {n: Line(n, ln, image_wh) for n, ln in cam.lines.items()}
        self._masks = [polygon_px(m, image_wh) for m in cam.masks]
        # Counts of zones that went away are no longer published; new zones start at 0.
        self._zone_counts = {k: v for k, v in self._zone_counts.items() if k[0] in self._zones}

    def zone_labels(self, labels: list[str]) -> dict[ZoneKey, int]:
        """Every (zone, label) a zone reports, with its count now (for retained topics)."""
        out: dict[ZoneKey, int] = {}
        for name, zone in self._camera.zones.items():
            for label in zone.objects if zone.objects is not None else labels:
                out[(name, label)] = self._zone_counts.get((name, label), 0)
        return out

    def line_labels(self, labels: list[str]) -> dict[LineKey, int]:
        """Every (line, label, direction) a line counts, with its total (retained topics)."""
        out: dict[LineKey, int] = {}
        for name, line in self._camera.lines.items():
            for label in line.objects if line.objects is not None else labels:
                for direction in ("in", "out"):
                    key = (name, label, direction)
                    out[key] = self.line_totals.get(key, 0)
        return out

    # -- per frame ----------------------------------------------------------------------------
    def step(
        self,
        dets: Detections | None,
        t: float,
        ts: float,
        image_wh: tuple[int, int],
        model: ModelRef,
        looked: Sequence[tuple[float, float, float, float]] | None = None,
        *,
        cut: bool = False,
    ) -> ObjectsOutput:
        """One frame: ``t`` monotonic seconds, ``ts`` wall-clock seconds (for messages).

        ``looked``: the regions inference ran on (None: the whole frame; see the tracker).
        ``cut``: most of the view changed with this frame (``SceneWatch``): it makes no line
        crossing and no zone entry, and the tracks that no longer fit end (``scene_change``).
        """
        if image_wh != self._image_wh:
            self._build(image_wh)
        rows = None
        if dets is not None and self._masks and len(dets):
            feet = anchor_bottom_centre(dets.xyxy)
            masked = np.zeros((len(dets),), np.bool_)
            for m in self._masks:
                masked |= points_in_polygon(feet, m)
            if masked.any():
                rows = np.nonzero(~masked)[0]
            dets = select(dets, ~masked)
        update = self.tracker.update(dets, t, looked, image_wh, cut=cut)
        looks = self._look(update.tracks, t, looked=dets is not None, cut=cut)
        events, snaps, counted = self.events.step(
            looks, update.removed, t, ts, model, cut=update.cut
        )
        for tid in update.removed:
            self._forget(tid)
        line_changes: dict[LineKey, int] = {}
        for _tid, line, label, direction in counted:
            key = (line, label, direction)
            self.line_totals[key] = self.line_totals.get(key, 0) + 1
            line_changes[key] = self.line_totals[key]
        objects: dict[str, int] = {}
        for tr in update.tracks:
            if self.events.is_object(tr.track_id):
                objects[tr.label] = objects.get(tr.label, 0) + 1
        return ObjectsOutput(
            detections=dets,
            track_ids=update.track_ids,
            events=events,
            zone_counts=self._count_zones(looks),
            line_counts=line_changes,
            snapshots=snaps,
            tracks=update.tracks,
            object_counts=objects,
            rows=rows,
        )

    def close(self, reason: EndReason, ts: float) -> ObjectsOutput:
        """End every open event and drop every track (shutdown, camera offline)."""
        events = self.events.close(reason, ts)
        for tid in self.tracker.reset():
            self._forget(tid)
        return ObjectsOutput(
            detections=None,
            track_ids=np.zeros((0,), np.int64),
            events=events,
            zone_counts=self._count_zones([]),
            line_counts={},
        )

    # -- helpers ------------------------------------------------------------------------------
    def _look(
        self, live: tuple[Track, ...], t: float, *, looked: bool, cut: bool = False
    ) -> list[Look]:
        if not live:
            return []
        ids = [tr.track_id for tr in live]
        seen_ids = [tr.track_id for tr in live if tr.seen]
        feet = anchor_bottom_centre(np.array([tr.xyxy for tr in live], np.float64))
        seen_feet = feet[[i for i, tr in enumerate(live) if tr.seen]]
        zones_of: dict[int, set[str]] = {tid: set() for tid in ids}
        passes: dict[int, list[tuple[str, Direction]]] = {}
        # Across a cut, zones keep who was in them, and lines learn the sides anew (a
        # track that goes on is where it was): a pass needs two looks at one scene.
        for name, zone in self._zones.items():
            members = zone.step(seen_ids, seen_feet, t) if looked and not cut else zone.members()
            for tid in members:
                if tid in zones_of:
                    zones_of[tid].add(name)
        if looked:
            for name, line in self._lines.items():
                for tid, direction in line.step(seen_ids, seen_feet):
                    if not cut:
                        passes.setdefault(tid, []).append((name, direction))
        out: list[Look] = []
        for tr in live:
            zones = frozenset(z for z in zones_of[tr.track_id] if self._zones[z].watches(tr.label))
            crossings = tuple(
                (ln, d) for ln, d in passes.get(tr.track_id, []) if self._lines[ln].counts(tr.label)
            )
            out.append(Look(tr, zones, crossings))
        return out

    def _count_zones(self, looks: list[Look]) -> dict[ZoneKey, int]:
        """Objects per (zone, label) now; returns the counts that changed."""
        now: dict[ZoneKey, int] = {}
        for look in looks:
            if not self.events.is_object(look.track.track_id):
                continue
            for z in look.zones:
                key = (z, look.track.label)
                now[key] = now.get(key, 0) + 1
        changed: dict[ZoneKey, int] = {}
        for key in set(self._zone_counts) | set(now):
            n = now.get(key, 0)
            if self._zone_counts.get(key, 0) != n or key not in self._zone_counts:
                changed[key] = n
            self._zone_counts[key] = n
        return changed

    def _forget(self, track_id: int) -> None:
        for zone in self._zones.values():
            zone.forget(track_id)
        for line in self._lines.values():
            line.forget(track_id)
