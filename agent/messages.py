"""Payloads of the MQTT contract v1 (docs/mqtt.md) as pydantic models.

Only the payloads the contract shows with a ``schema`` (detections, health) carry one; the
status, camera-status, model and reply payloads have exactly the keys the contract lists.
``to_bytes()`` is on the per-frame path: it serialises straight to JSON bytes.

A base module: the payloads are the public contract, not the transport, so the stages that
build them (``objects``) import them without depending on ``agent.mqtt``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

DETECTIONS_SCHEMA: Final = "edge-vision/detections/1"
HEALTH_SCHEMA: Final = "edge-vision/health/1"
EVENT_SCHEMA: Final = "edge-vision/event/1"

#: ISO 8601 UTC with microseconds and a trailing Z, as ``utc_ts`` writes it.
Timestamp = Annotated[
    str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
]
#: Event times: ISO 8601 UTC with milliseconds, as the contract's EventMessage shows them.
TimestampMs = Annotated[
    str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
]
Ident = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
NonNegFloat = Annotated[float, Field(ge=0)]
NonNegInt = Annotated[int, Field(ge=0)]


def utc_ts(epoch_s: float) -> str:
    """``2026-11-22T08:00:00.123456Z`` for a ``time.time()`` value."""
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_ts_ms(epoch_s: float) -> str:
    """``2026-11-25T08:02:11.402Z`` for a ``time.time()`` value (event times)."""
    return utc_ts(epoch_s)[:23] + "Z"


class Message(BaseModel):
    """Base: frozen, strict about unknown keys, serialised by alias (``schema``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_bytes(self) -> bytes:
        return self.__pydantic_serializer__.to_json(self, by_alias=True)


# -- detections ---------------------------------------------------------------------------
class ModelRef(Message):
    name: str = Field(min_length=1)
    version: NonNegInt
    sha256: str = Field(pattern=r"^[0-9a-f]{0,64}$")


class LatencyMs(Message):
    capture_to_publish: NonNegFloat
    inference: NonNegFloat


class Detection(Message):
    label: str
    class_id: NonNegInt
    score: float = Field(ge=0, le=1)
    xyxy: tuple[float, float, float, float]
    keypoints: list[tuple[float, float, float]] | None = None
    track_id: int | None = None


class DetectionMessage(Message):
    schema_: Literal["edge-vision/detections/1"] = Field(DETECTIONS_SCHEMA, alias="schema")
    device: Ident
    camera: Ident
    boot_id: str = Field(min_length=1)
    seq: NonNegInt
    frame_id: NonNegInt
    ts: Timestamp
    image_wh: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]]
    model: ModelRef
    latency_ms: LatencyMs
    detections: list[Detection]
    #: Where inference ran this frame (xyxy, source pixels): additive, for debugging.
    regions: list[tuple[float, float, float, float]] | None = None

    _NO_KEYPOINTS: ClassVar[dict[str, Any]] = {"detections": {"__all__": {"keypoints"}}}

    def to_bytes(self) -> bytes:
        """JSON bytes; ``keypoints`` is left out of detections that have none, and
        ``regions`` out of a message that does not say."""
        missing = [i for i, d in enumerate(self.detections) if d.keypoints is None]
        exclude: dict[str, Any] = {}
        if len(missing) == len(self.detections) and missing:
            exclude.update(self._NO_KEYPOINTS)
        elif missing:
            exclude["detections"] = {i: {"keypoints"} for i in missing}
        if self.regions is None:
            exclude["regions"] = True
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude=exclude or None)


# -- events (objects over time) -------------------------------------------------------------
class Crossing(Message):
    line: Ident
    direction: Literal["in", "out"]
    ts: TimestampMs


class EventMessage(Message):
    """``<p>/<d>/<c>/events``: an object's ``new``, ``update`` and ``end``."""

    schema_: Literal["edge-vision/event/1"] = Field(EVENT_SCHEMA, alias="schema")
    device: Ident
    camera: Ident
    boot_id: str = Field(min_length=1)
    seq: NonNegInt
    type: Literal["new", "update", "end"]
    id: str = Field(min_length=1, max_length=128)
    ts: TimestampMs
    label: str
    score: float = Field(ge=0, le=1)
    top_score: float = Field(ge=0, le=1)
    xyxy: tuple[float, float, float, float]
    start_ts: TimestampMs
    end_ts: TimestampMs | None
    zones: list[Ident]
    entered_zones: list[Ident]
    crossings: list[Crossing]
    stationary: bool
    end_reason: (
        Literal["lost", "camera_offline", "shutdown", "restart", "model_swap", "scene_change"]
        | None
    )
    has_snapshot: bool
    model: ModelRef


# -- retained state -----------------------------------------------------------------------
class StatusMessage(Message):
    """``<p>/<d>/status``; the Last Will carries ``offline``."""

    state: Literal["online", "offline", "stopped"]
    boot_id: str
    version: str
    ts: Timestamp
    groups: list[str] = Field(default_factory=list)  # fleet groups (additive, issue 24)


class CameraStatusMessage(Message):
    """``<p>/<d>/<c>/status``: ``reason`` is one word (docs/mqtt.md), ``detail`` free text."""

    state: Literal["streaming", "reconnecting", "offline"]
    reason: str | None
    ts: Timestamp
    detail: str | None = None  # additive (issue 41): the sentence behind ``reason``


class ModelSummary(Message):
    """The model that was active before the current one."""

    name: str
    version: NonNegInt
    sha256: str


class ModelInfoMessage(Message):
    """``<p>/<d>/model``: the active model."""

    name: str
    version: NonNegInt
    sha256: str
    precision: str
    provider: str
    input_hw: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]]
    labels: list[str]
    task: str
    activated_at: Timestamp
    previous: ModelSummary | None


# -- heartbeat ----------------------------------------------------------------------------
class CameraHealth(Message):
    state: Literal["streaming", "reconnecting", "offline"]
    fps_in: NonNegFloat
    fps_processed: NonNegFloat
    frames_dropped: NonNegInt
    reconnects: NonNegInt
    last_frame_age_s: NonNegFloat | None


class Percentiles(Message):
    p50: NonNegFloat | None
    p95: NonNegFloat | None
    p99: NonNegFloat | None


class InferenceHealth(Message):
    provider: str
    model_sha256: str
    latency_ms: Percentiles


class MqttHealth(Message):
    connected: bool
    spool_depth: NonNegInt
    spool_bytes: NonNegInt
    published: NonNegInt
    dropped_overflow: NonNegInt
    dropped_expired: NonNegInt
    rejected_oversize: NonNegInt
    dropped_disk_full: NonNegInt = 0


class CommandsHealth(Message):
    """Commands received, and those refused by the guard per reply code (additive)."""

    received: NonNegInt
    rejected: NonNegInt
    unsigned_command: NonNegInt = 0
    bad_signature: NonNegInt = 0
    stale_command: NonNegInt = 0
    replayed_command: NonNegInt = 0


class SystemHealth(Message):
    cpu_percent: NonNegFloat
    rss_mb: NonNegFloat
    temp_c: float | None
    load1: NonNegFloat


class Heartbeat(Message):
    """``<p>/<d>/health``, retained, every ``health.interval_s``."""

    schema_: Literal["edge-vision/health/1"] = Field(HEALTH_SCHEMA, alias="schema")
    device: Ident
    boot_id: str
    ts: Timestamp
    uptime_s: NonNegFloat
    version: str
    state: Literal["running", "paused", "degraded"]
    cameras: dict[str, CameraHealth]
    inference: InferenceHealth
    mqtt: MqttHealth
    system: SystemHealth
    commands: CommandsHealth | None = None
    reason: str | None = None  # why ``degraded``: "disk_full: state_dir /x has 0 B free"

    def to_bytes(self) -> bytes:
        """JSON bytes; ``reason`` only when there is one (additive field)."""
        exclude = {"reason"} if self.reason is None else None
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude=exclude)


# -- commands -----------------------------------------------------------------------------
class ReplyError(Message):
    code: str
    message: str


class CommandReply(Message):
    """``<p>/<d>/reply/<name>`` (and the request's MQTT 5 ResponseTopic)."""

    id: str | None
    ok: bool
    result: dict[str, Any] | None
    error: ReplyError | None
    ts: Timestamp


class ProgressMessage(Message):
    """``<p>/<d>/progress/<name>``: a long command passed a stage; never its final reply.

    ``accepted``: a ``model/deploy`` passed signature, version and size checks and the
    device now waits for the file (docs/model-updates.md).
    """

    id: str
    stage: Literal["accepted"]
    ts: Timestamp
