"""The event lifecycle of one camera's objects: ``new`` once, ``update`` on what matters, ``end``.

A track becomes an object (and a ``new`` event) once seen in ``confirm_frames`` frames with
a median score of at least ``confirm_score``: one-frame false positives never make an event.
An ``update`` goes out when something a person cares about changed (zone entered or left,
line crossed, became stationary or moving again, a clearly better snapshot), at most one
per ``update_interval_s``: changes in between are held and sent together, so a parked car
makes no traffic and a busy scene no storm. ``end`` goes out exactly once per ``new``.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.frames import lasted
from agent.messages import (
    Crossing,
    EventMessage,
    ModelRef,
    utc_ts_ms,
)
from agent.objects.tracker import Track
from agent.settings import ObjectsSettings

EndReason = Literal["lost", "camera_offline", "shutdown", "restart", "model_swap", "scene_change"]
#: A snapshot is clearly better when its score beats the best by this much.
BETTER_SNAPSHOT = 0.1
#: Crossings kept in one event's messages (the oldest go first).
MAX_CROSSINGS = 50


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """Publish a JPEG of this frame with this box drawn, for this event."""

    event_id: str
    label: str
    score: float
    xyxy: tuple[float, float, float, float]


def event_id(camera_id: str, ts: float) -> str:
    """``front-20261125T080211Z-3f2a9c1e``: camera, start second, 32 random bits."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(ts))
    return f"{camera_id}-{stamp}-{secrets.token_hex(4)}"


@dataclass(slots=True)
class _Object:
    """One confirmed object's event state."""

    id: str
    label: str
    start_ts: float
    score: float
    top_score: float
    xyxy: tuple[float, float, float, float]
    last_seen_ts: float
    zones: set[str] = field(default_factory=set)
    entered: list[str] = field(default_factory=list)
    crossings: list[Crossing] = field(default_factory=list)
    stationary: bool = False
    anchor_xy: tuple[float, float] = (0.0, 0.0)
    anchor_t: float = 0.0
    pending: bool = False
    last_sent_t: float = 0.0
    has_snapshot: bool = False
    model: ModelRef | None = None


@dataclass(slots=True)
class _Frame:
    """One frame's step: its times and model, and what it produced so far."""

    t: float
    ts: float
    model: ModelRef
    out: list[EventMessage] = field(default_factory=list)
    snaps: list[SnapshotRequest] = field(default_factory=list)
    counted: list[tuple[int, str, str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Look:
    """What the stage saw of one live track this frame."""

    track: Track
    zones: frozenset[str]
    crossings: tuple[tuple[str, Literal["in", "out"]], ...]  # (line, direction) this frame


class EventBook:
    """Events of one camera. Fed in frame order; returns the messages to publish."""

    def __init__(
        self, camera_id: str, device_id: str, boot_id: str, params: ObjectsSettings
    ) -> None:
        self.camera_id = camera_id
        self.device_id = device_id
        self.boot_id = boot_id
        self.params = params
        self.seq = 0
        self._objects: dict[int, _Object] = {}
        #: Crossings of tracks not yet confirmed: counted if the track becomes an object.
        self._early: dict[int, list[Crossing]] = {}

    # -- queries ------------------------------------------------------------------------------
    def is_object(self, track_id: int) -> bool:
        return track_id in self._objects

    def open_events(self) -> list[dict[str, Any]]:
        """The open events as their last state (persisted so a restart can end them)."""
        return [
            self._message(o, "update", o.last_seen_ts, seq=0).model_dump(mode="json", by_alias=True)
            for o in self._objects.values()
        ]

    # -- per frame ----------------------------------------------------------------------------
    def step(
        self,
        looks: list[Look],
        removed: tuple[int, ...],
        t: float,
        ts: float,
        model: ModelRef,
        *,
        cut: tuple[int, ...] = (),
    ) -> tuple[list[EventMessage], list[SnapshotRequest], list[tuple[int, str, str, str]]]:
        """Events, snapshots wanted, and confirmed crossings (track, line, label, direction).

        ``cut``: the removed tracks that a global change ended (``scene_change``).
        """
        f = _Frame(t, ts, model)
        for look in looks:
            tr = look.track
            crossings = [
                Crossing(line=ln, direction=d, ts=utc_ts_ms(ts)) for ln, d in look.crossings
            ]
            obj = self._objects.get(tr.track_id)
            if obj is None:
                self._candidate(look, crossings, f)
            else:
                self._follow(obj, look, crossings, f)
        for tid in removed:
            self._early.pop(tid, None)
            obj = self._objects.pop(tid, None)
            if obj is not None:
                obj.zones = set()
                reason: EndReason = "scene_change" if tid in cut else "lost"
                f.out.append(self._message(obj, "end", ts, reason, obj.last_seen_ts))
        return f.out, f.snaps, f.counted

    def _candidate(self, look: Look, crossings: list[Crossing], f: _Frame) -> None:
        """A track not yet an object: keep its crossings; confirm it when it qualifies."""
        p, tr = self.params, look.track
        early = self._early.setdefault(tr.track_id, [])
        early.extend(crossings)
        if tr.hits < p.confirm_frames or tr.median_score < p.confirm_score or not tr.seen:
            return
        obj = self._confirm(tr, look, f.ts, f.t, f.model)
        for c in self._early.pop(tr.track_id, []):
            obj.crossings.append(c)
            f.counted.append((tr.track_id, c.line, tr.label, c.direction))
        del obj.crossings[:-MAX_CROSSINGS]
        f.out.append(self._message(obj, "new", f.ts))
        obj.last_sent_t = f.t
        if p.snapshots:
            f.snaps.append(SnapshotRequest(obj.id, obj.label, obj.score, _round_box(obj.xyxy)))

    def _follow(self, obj: _Object, look: Look, crossings: list[Crossing], f: _Frame) -> None:
        """An object: note what changed, and send an update when one is due."""
        p, tr = self.params, look.track
        t, ts = f.t, f.ts
        obj.model = f.model
        if tr.seen:
            obj.score = tr.score
            obj.xyxy = tr.xyxy
            obj.last_seen_ts = ts
            if p.snapshots and tr.score >= obj.top_score + BETTER_SNAPSHOT:
                f.snaps.append(SnapshotRequest(obj.id, obj.label, tr.score, _round_box(tr.xyxy)))
                obj.pending = True
            obj.top_score = max(obj.top_score, tr.score)
            obj.pending |= self._moved(obj, tr, t)
        if look.zones != obj.zones:
            obj.entered.extend(z for z in sorted(look.zones - obj.zones) if z not in obj.entered)
            obj.zones = set(look.zones)
            obj.pending = True
        if crossings:
            obj.crossings.extend(crossings)
            del obj.crossings[:-MAX_CROSSINGS]
            f.counted.extend((tr.track_id, c.line, tr.label, c.direction) for c in crossings)
            obj.pending = True
        if obj.pending and lasted(t - obj.last_sent_t, p.update_interval_s):
            f.out.append(self._message(obj, "update", ts))
            obj.pending = False
            obj.last_sent_t = t

    def close(self, reason: EndReason, ts: float) -> list[EventMessage]:
        """End every open event (shutdown, camera offline): ``end`` once each."""
        out = [self._message(o, "end", ts, reason, ts) for o in self._objects.values()]
        self._objects.clear()
        self._early.clear()
        return out

    def end_restored(self, saved: dict[str, Any], ts: float) -> EventMessage:
        """The ``end`` (reason ``restart``) of an event a previous run left open."""
        body = {k: v for k, v in saved.items() if k not in ("schema", "seq", "boot_id", "type")}
        body.update(
            device=self.device_id,
            camera=self.camera_id,
            boot_id=self.boot_id,
            seq=self._next_seq(),
            type="end",
            ts=utc_ts_ms(ts),
            end_ts=saved.get("ts") or utc_ts_ms(ts),
            end_reason="restart",
            zones=[],
        )
        return EventMessage.model_validate(body)

    # -- helpers ------------------------------------------------------------------------------
    def _confirm(self, tr: Track, look: Look, ts: float, t: float, model: ModelRef) -> _Object:
        start_ts = ts - max(0.0, t - tr.first_seen_t)
        xy = _feet(tr.xyxy)
        obj = _Object(
            id=event_id(self.camera_id, start_ts),
            label=tr.label,
            start_ts=start_ts,
            score=tr.score,
            top_score=tr.score,
            xyxy=tr.xyxy,
            last_seen_ts=ts,
            zones=set(look.zones),
            entered=sorted(look.zones),
            anchor_xy=xy,
            anchor_t=t,
            has_snapshot=self.params.snapshots,
            model=model,
        )
        self._objects[tr.track_id] = obj
        return obj

    def _moved(self, obj: _Object, tr: Track, t: float) -> bool:
        """Stationary/moving with hysteresis; True when it changed."""
        x, y = _feet(tr.xyxy)
        height = max(1.0, tr.xyxy[3] - tr.xyxy[1])
        far = abs(x - obj.anchor_xy[0]) + abs(y - obj.anchor_xy[1]) > (
            self.params.stationary_move * height
        )
        if far:
            obj.anchor_xy, obj.anchor_t = (x, y), t
            if obj.stationary:
                obj.stationary = False
                return True
            return False
        if not obj.stationary and lasted(t - obj.anchor_t, self.params.stationary_s):
            obj.stationary = True
            return True
        return False

    def _next_seq(self) -> int:
        seq = self.seq
        self.seq += 1
        return seq

    def _message(
        self,
        obj: _Object,
        kind: Literal["new", "update", "end"],
        ts: float,
        reason: EndReason | None = None,
        end_ts: float | None = None,
        seq: int | None = None,
    ) -> EventMessage:
        return EventMessage(
            device=self.device_id,
            camera=self.camera_id,
            boot_id=self.boot_id,
            seq=self._next_seq() if seq is None else seq,
            type=kind,
            id=obj.id,
            ts=utc_ts_ms(ts),
            label=obj.label,
            score=round(obj.score, 3),
            top_score=round(obj.top_score, 3),
            xyxy=_round_box(obj.xyxy),
            start_ts=utc_ts_ms(obj.start_ts),
            end_ts=utc_ts_ms(end_ts) if end_ts is not None else None,
            zones=sorted(obj.zones),
            entered_zones=list(obj.entered),
            crossings=list(obj.crossings),
            stationary=obj.stationary,
            end_reason=reason,
            has_snapshot=obj.has_snapshot,
            model=obj.model or ModelRef(name="unknown", version=0, sha256=""),
        )


def _feet(xyxy: tuple[float, float, float, float]) -> tuple[float, float]:
    return (xyxy[0] + xyxy[2]) * 0.5, xyxy[3]


def _round_box(xyxy: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    return (round(xyxy[0], 1), round(xyxy[1], 1), round(xyxy[2], 1), round(xyxy[3], 1))
