"""Configuration: one pydantic model per section, loaded from YAML with env overrides.

Precedence (highest first): runtime overrides that ``config/set`` kept in ``<state_dir>``
(applied by the running agent, agent/service/overrides.py), the environment
(``EDGE_AGENT__MQTT__PORT=1884``), the YAML file, the defaults below. The defaults are the
embedded defaults: bundled INT8 model, bundled sample video looped, broker on localhost.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.errors import ConfigError
from agent.provider_names import canonical_provider
from agent.redact import is_secret_field, redact

ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
Ident = Annotated[str, StringConstraints(pattern=ID_PATTERN)]

#: Root of the source checkout (or install), used to resolve bundled relative paths.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = Path("configs/agent.yaml")
#: The model an omitted ``detector.model`` means for a look at a whole frame or photo
#: (``detect``, ``regions: full``): the bundled file best at whole frames (docs/regions.md).
DEFAULT_MODEL = Path("models/yolo11n-pose-640-int8.onnx")
#: The model an omitted ``detector.model`` means for region sheets: regions are small, so
#: the 320 input magnifies them at a quarter of the 640 model's cost (docs/regions.md).
DEFAULT_REGION_MODEL = Path("models/yolo11n-pose-320-int8.onnx")
DEFAULT_VIDEO = "assets/vtest.avi"


def _default_device_id() -> str:
    """The hostname, reduced to the characters a topic level may hold."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname().split(".")[0])[:64]
    return name or "edge-agent"


def _default_state_dir() -> Path:
    """systemd's StateDirectory when run as a service, else a per-user directory."""
    env = os.environ.get("STATE_DIRECTORY")
    if env:
        return Path(env.split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "edge-vision-agent"


def resolve_path(path: Path | str) -> Path:
    """Resolve a relative path against the CWD, falling back to the bundled project files:
    those of the checkout, else those an install put beside its virtualenv (install.sh:
    PREFIX/models beside PREFIX/venv)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    for root in (PROJECT_ROOT, Path(sys.prefix).parent):
        bundled = root / p
        if bundled.exists():
            return bundled
    return p


class Section(BaseModel):
    """Base for config sections: unknown keys are errors, values re-validated on change."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class TlsSettings(Section):
    ca: Path | None = Field(None, description="CA bundle to verify the broker (enables TLS).")
    cert: Path | None = Field(None, description="Client certificate (PEM) for mutual TLS.")
    key: Path | None = Field(None, description="Client private key (PEM) for mutual TLS.")
    insecure: bool = Field(False, description="Skip hostname verification (testing only).")

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> TlsSettings:
        if (self.cert is None) != (self.key is None):
            raise ValueError("tls.cert and tls.key must be given together")
        return self

    @property
    def enabled(self) -> bool:
        return self.ca is not None or self.cert is not None


class MqttSettings(Section):
    host: str = Field("localhost", min_length=1, description="Broker host name or address.")
    port: int = Field(1883, ge=1, le=65535, description="Broker TCP port.")
    topic_prefix: str = Field(
        "vision", pattern=r"^[A-Za-z0-9_/-]{1,64}$", description="First topic level(s)."
    )
    protocol: Literal[5, 311] = Field(5, description="5 for MQTT 5, 311 for MQTT 3.1.1.")
    qos: Literal[0, 1, 2] = Field(1, description="QoS of detection messages.")
    keepalive_s: int = Field(30, ge=2, le=3600, description="MQTT keepalive in seconds.")
    username: str | None = Field(None, description="Broker user name.")
    password: SecretStr | None = Field(None, description="Broker password.")
    client_id: str | None = Field(None, description="Client id; default edge-agent-<device>.")
    max_payload_bytes: int = Field(
        262144, ge=1024, le=268435455, description="Larger payloads are refused locally."
    )
    reconnect_min_s: float = Field(0.5, gt=0, le=60, description="First reconnect delay.")
    reconnect_max_s: float = Field(30.0, gt=0, le=600, description="Reconnect delay cap.")
    inflight_window: int = Field(
        64, ge=1, le=1024, description="Spooled messages in flight (unacked) at once."
    )
    tls: TlsSettings = Field(default_factory=TlsSettings)

    @model_validator(mode="after")
    def _backoff_order(self) -> MqttSettings:
        if self.reconnect_min_s > self.reconnect_max_s:
            raise ValueError("reconnect_min_s must not exceed reconnect_max_s")
        return self


NormCoord = Annotated[float, Field(ge=0.0, le=1.0)]
#: A point in fractions of the source image (0..1, x right, y down).
NormPoint = tuple[NormCoord, NormCoord]


class ZoneSettings(Section):
    polygon: list[NormPoint] = Field(
        min_length=3, description="Corners as [x, y] fractions of the image (0..1)."
    )
    objects: list[str] | None = Field(
        None, description="Labels this zone counts and reports (null = every label)."
    )
    inertia: int = Field(
        3, ge=1, le=100, description="Frames in a row inside (outside) to enter (leave)."
    )
    loiter_s: float = Field(
        0.0, ge=0.0, le=86400, description="Seconds inside before an object counts as in it."
    )


class LineSettings(Section):
    points: list[NormPoint] = Field(
        min_length=2,
        max_length=2,
        description="[A, B] as [x, y] fractions; crossing from the left of A->B is 'in'.",
    )
    objects: list[str] | None = Field(
        None, description="Labels this line counts (null = every label)."
    )

    @field_validator("points")
    @classmethod
    def _distinct(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        if v[0] == v[1]:
            raise ValueError("a line's two points must differ")
        return v


class CameraSettings(Section):
    id: Ident = Field(description="Camera id, used as a topic level.")
    source: str = Field(
        min_length=1,
        description="Device index, /dev/videoN, video file, image dir/glob, rtsp/http URL, "
        "or a GStreamer pipeline (contains '!').",
    )
    fps: float | None = Field(None, gt=0, le=240, description="Cap on frames processed per s.")
    loop: bool = Field(False, description="Restart a file source at its end.")
    realtime: bool = Field(
        True,
        description="Pace files at their native FPS; false: every frame, as fast as the "
        "agent takes them, on the recording's own time (motion, regions, tracks and events "
        "go by its seconds, as on the camera it was recorded from); in region mode a frame "
        "is handed over once the one before is done, so it is planned with its tracks, as "
        "edge-agent track plans it.",
    )
    stall_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="No frame for this long = reconnect."
    )
    open_timeout_s: float = Field(10.0, gt=0, le=600, description="Open timeout (FFmpeg).")
    read_timeout_s: float = Field(10.0, gt=0, le=600, description="Read timeout (FFmpeg).")
    reconnect_max_s: float = Field(30.0, gt=0, le=3600, description="Reopen backoff cap.")
    zones: dict[Ident, ZoneSettings] = Field(
        default_factory=dict, description="Zones by name (a topic level): polygons to watch."
    )
    lines: dict[Ident, LineSettings] = Field(
        default_factory=dict, description="Counting lines by name (a topic level)."
    )
    masks: list[Annotated[list[NormPoint], Field(min_length=3)]] = Field(
        default_factory=list,
        description="Polygons (fractions); detections whose feet fall inside are dropped.",
    )
    motion_masks: list[Annotated[list[NormPoint], Field(min_length=3)]] = Field(
        default_factory=list,
        description="Polygons (fractions) where motion never counts (trees, a busy road); "
        "masks count too.",
    )


class DetectorSettings(Section):
    model: Path | None = Field(
        None,
        description="ONNX model to start with (default: for each look the bundled INT8 model "
        "best at it: the 320 one for region sheets, the 640 one for whole frames and photos).",
    )
    regions: Literal["motion", "full"] = Field(
        "motion",
        description="motion: look at regions around motion and tracked objects (and sweep "
        "the frame slowly); full: the whole frame, every frame.",
    )
    region_px: int | None = Field(
        None,
        ge=32,
        le=4096,
        description="Source pixels that fill the model's input at the highest magnification "
        "(default: 1/2 of the input, so small objects are magnified 2x at most); the slow "
        "sweep looks at squares of 1.5x this.",
    )
    max_regions: int = Field(
        12,
        ge=1,
        le=32,
        description="Most regions looked at per frame (packed into as few model runs as fit).",
    )
    recheck_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="Seconds between looks at a tracked object that stands still where "
        "nothing moves; in between, its last look's box stands in (the same pixels give the "
        "same box), so every published frame still holds it (0: looked at every frame).",
    )
    predict_s: float = Field(
        0.15,
        ge=0,
        le=10,
        description="Seconds a tracked walker (under a fifth of the frame tall, found "
        "plainly over several looks) may go between looks, looked at every other frame at "
        "most; in between, its last look's box, moved on by its track's velocity, stands in "
        "(0: looked at every frame).",
    )
    sweep_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="Seconds between two squares of the slow sweep for small, still objects, "
        "and between two coarse looks at the whole frame while anything a fifth of the frame "
        "tall is in view (4x this while only smaller things are). A camera the box has no "
        "time for every frame of gets the sweep and that quieter coarse look as many times "
        "less often as it is behind.",
    )
    providers: list[str] = Field(
        default_factory=lambda: ["auto"],
        min_length=1,
        description="'auto' or an ordered list of onnxruntime execution providers.",
    )
    select: Literal["first", "benchmark"] = Field(
        "first", description="Take the first working provider, or time them and take the fastest."
    )
    conf_threshold: float = Field(0.25, ge=0.0, le=1.0, description="Minimum score.")
    iou_threshold: float = Field(0.45, ge=0.0, le=1.0, description="NMS IoU threshold.")
    max_det: int = Field(100, ge=1, le=10000, description="Most detections kept per frame.")
    classes: list[str | int] | None = Field(
        None, description="Keep only these labels or class ids (null = all)."
    )
    threads: int | None = Field(
        None,
        ge=1,
        le=256,
        description=(
            "Intra-op threads per session where sessions is set (or on one core); with "
            "sessions unset, each worker session has one thread and this sizes the "
            "whole-frame latency session (default: all cores)."
        ),
    )
    sessions: int | None = Field(
        None, ge=1, le=16, description="Parallel sessions (frames in flight); null = auto."
    )
    provider_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-provider options, keyed by provider name."
    )
    provider_models: dict[str, Path] = Field(
        default_factory=dict,
        description=(
            "A provider's own file of the configured model (e.g. OpenVINO: the INT8 model "
            "quantized for it), keyed by provider name; select: benchmark times each "
            "provider on its own file. A pushed model replaces them all."
        ),
    )

    def model_for(self, look: Literal["whole", "sheets"]) -> Path:
        """The model file a look uses: the one configured, else the bundled one best at it.

        ``whole``: a whole frame or photo in one input (``detect``, ``regions: full``);
        ``sheets``: packed region sheets (``regions: motion``). The only place this is chosen.
        """
        if self.model is not None:
            return self.model
        return DEFAULT_MODEL if look == "whole" else DEFAULT_REGION_MODEL

    @property
    def by_regions(self) -> bool:
        """Region mode (``regions: motion``): motion and tracks choose where to look, on
        packed sheets of any size; else whole frames."""
        return self.regions == "motion"

    @property
    def coarse_model(self) -> Path | None:
        """Region mode's model of coarse looks where it is another file than the sheets':
        the bundled one best at whole frames, while no model is named (a named or pushed
        model runs every look); None: the sheets' model does them."""
        if not self.by_regions or self.model is not None:
            return None
        whole = resolve_path(self.model_for("whole"))
        return whole if whole != resolve_path(self.live_model) and whole.is_file() else None

    @property
    def live_model(self) -> Path:
        """The model the agent (and ``track``) runs: sheets in region mode, else whole frames."""
        return self.model_for("sheets" if self.by_regions else "whole")

    @field_validator("providers")
    @classmethod
    def _auto_alone(cls, v: list[str]) -> list[str]:
        if "auto" in v and len(v) > 1:
            raise ValueError("'auto' cannot be combined with explicit providers")
        return v

    @field_validator("provider_options", "provider_models")
    @classmethod
    def _provider_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Keys become full provider names ('openvino' -> 'OpenVINOExecutionProvider').

        The runtime looks entries up by the full name, so a misspelt key would match no
        provider and its entry would silently never apply, and two keys for one provider
        would silently keep the last: both are refused, naming the key.
        """
        out: dict[str, Any] = {}
        for key, value in v.items():
            provider = canonical_provider(key)
            if not provider.endswith("ExecutionProvider"):
                raise ValueError(
                    f"{key!r}: unknown provider (use a short name such as openvino or cuda, "
                    "or a full one such as OpenVINOExecutionProvider)"
                )
            if provider in out:
                raise ValueError(f"{key!r}: {provider} is named twice (keep one entry)")
            out[provider] = value
        return out


class PublishSettings(Section):
    mode: Literal["every_frame", "on_change"] = Field(
        "every_frame", description="Publish every processed frame, or only when counts change."
    )
    summary_interval_s: float = Field(
        5.0, gt=0, le=3600, description="Period of the one-line log summary."
    )


class SpoolSettings(Section):
    max_bytes: int = Field(64 * 1024 * 1024, ge=4096, description="Spool size bound.")
    max_age_s: float = Field(86400.0, gt=0, description="Older spooled messages are dropped.")
    enabled: bool = Field(True, description="Store-and-forward through the on-disk spool.")


class ModelsSettings(Section):
    trusted_keys: list[str] = Field(
        default_factory=list, description="Base64 raw Ed25519 public keys of model publishers."
    )
    trusted_keys_file: Path | None = Field(None, description="File of keys, one per line.")
    allow_unsigned: bool = Field(False, description="Accept unsigned model deploys.")
    max_bytes: int = Field(100 * 1024 * 1024, ge=1024, description="Largest model accepted.")
    health_frames: int = Field(50, ge=1, le=100000, description="Frames in the health window.")
    latency_budget: float = Field(
        3.0, gt=1.0, le=100.0, description="Roll back if latency exceeds previous x this."
    )
    transfer_timeout_s: float = Field(120.0, gt=0, description="Chunked transfer deadline.")
    crash_loop_starts: int = Field(
        3, ge=1, le=100, description="Starts without commit before falling back."
    )


class CommandsSettings(Section):
    """Who may steer the device over MQTT (docs/mqtt.md, "Signed commands")."""

    require_signature: bool = Field(
        False,
        description="Refuse every command that is not signed by a trusted key "
        "(edge-agent ... --key KEY); without it, anyone who may publish to the device's "
        "cmd topics steers it.",
    )
    trusted_keys: list[str] | None = Field(
        None,
        description="Base64 raw Ed25519 public keys of operators; null: models.trusted_keys.",
    )
    trusted_keys_file: Path | None = Field(None, description="File of keys, one per line.")
    max_skew_s: float = Field(
        300.0,
        ge=1.0,
        le=86400.0,
        description="A signed command older or newer than this by the device's clock is stale.",
    )
    response_topic_prefixes: list[str] | None = Field(
        None,
        description="Besides <p>/<d>/reply/, where MQTT 5 ResponseTopics may point; null: any "
        "topic outside <p>/ and the Home Assistant prefix. A command naming another is refused.",
    )

    @field_validator("response_topic_prefixes")
    @classmethod
    def _plain_prefixes(cls, v: list[str] | None) -> list[str] | None:
        for prefix in v or []:
            if not prefix or "+" in prefix or "#" in prefix:
                raise ValueError(f"{prefix!r}: a prefix is a non-empty topic without wildcards")
        return v


class HealthSettings(Section):
    interval_s: float = Field(10.0, ge=0.5, le=3600, description="Heartbeat period.")


class MetricsSettings(Section):
    port: int | None = Field(
        None, ge=1, le=65535, description="Serve Prometheus /metrics on this port; null = off."
    )
    host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="Address to bind /metrics to; 0.0.0.0 lets another host scrape it.",
    )


class FleetSettings(Section):
    groups: list[Ident] = Field(default_factory=list, description="Fleet groups to obey.")


class HomeAssistantSettings(Section):
    enabled: bool = Field(False, description="Publish Home Assistant MQTT discovery configs.")
    discovery_prefix: str = Field("homeassistant", min_length=1, description="HA prefix.")


class MotionSettings(Section):
    threshold: float = Field(
        12.0, ge=1, le=255, description="Least grey-level change that is motion (noise adapts it)."
    )
    min_area: float = Field(
        0.0005, ge=0, le=1, description="Smallest moving blob, as a share of the frame."
    )
    height_px: int = Field(100, ge=24, le=1080, description="Height of the frame motion sees.")
    off_delay_s: float = Field(
        10.0, ge=0, le=3600, description="Seconds without motion before the motion topic is OFF."
    )


class ObjectsSettings(Section):
    enabled: bool = Field(True, description="Track objects and publish events, zones, lines.")
    confirm_frames: int = Field(
        3, ge=1, le=100, description="Frames a track is seen in before it is an object."
    )
    confirm_score: float = Field(
        0.5, ge=0.0, le=1.0, description="Median score a track needs to become an object."
    )
    lost_s: float = Field(
        2.0, gt=0, le=600, description="Seconds unseen before an object is lost (its end)."
    )
    track_score: float = Field(
        0.5, ge=0.0, le=1.0, description="Detections from this score start and lead tracks."
    )
    stationary_s: float = Field(
        5.0, gt=0, le=86400, description="Seconds without moving before 'stationary'."
    )
    stationary_move: float = Field(
        0.25, gt=0, le=10, description="Movement (box heights) that counts as moving."
    )
    update_interval_s: float = Field(
        1.0, ge=0, le=3600, description="Least seconds between two updates of one event."
    )
    snapshots: bool = Field(True, description="Publish a JPEG of each event's best frame.")
    snapshot_max_px: int = Field(
        960, ge=64, le=8192, description="Snapshots are scaled to at most this many px wide."
    )


def _default_cameras() -> list[CameraSettings]:
    return [CameraSettings(id="front", source=DEFAULT_VIDEO, loop=True)]


class AgentSettings(BaseSettings):
    """The whole configuration."""

    model_config = SettingsConfigDict(
        env_prefix="EDGE_AGENT__",
        env_nested_delimiter="__",
        extra="forbid",
        validate_assignment=True,
    )

    device_id: Ident = Field(default_factory=_default_device_id, description="Device id.")
    state_dir: Path = Field(default_factory=_default_state_dir, description="Models, spool.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    native_log_level: Literal["silent", "error", "warning", "info", "debug"] = Field(
        "error",
        description="Level of OpenCV's and FFmpeg's own messages (a missing camera, a bad "
        "stream); with JSON logs they become JSON lines on stdout, never raw text.",
    )
    mqtt: MqttSettings = Field(default_factory=MqttSettings)
    cameras: list[CameraSettings] = Field(default_factory=_default_cameras, min_length=1)
    detector: DetectorSettings = Field(default_factory=DetectorSettings)
    publish: PublishSettings = Field(default_factory=PublishSettings)
    spool: SpoolSettings = Field(default_factory=SpoolSettings)
    models: ModelsSettings = Field(default_factory=ModelsSettings)
    commands: CommandsSettings = Field(default_factory=CommandsSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    homeassistant: HomeAssistantSettings = Field(default_factory=HomeAssistantSettings)
    objects: ObjectsSettings = Field(default_factory=ObjectsSettings)
    motion: MotionSettings = Field(default_factory=MotionSettings)

    @field_validator("cameras")
    @classmethod
    def _unique_camera_ids(cls, v: list[CameraSettings]) -> list[CameraSettings]:
        ids = [c.id for c in v]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"camera ids must be unique, repeated: {', '.join(dupes)}")
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init kwargs; the environment overrides it.
        return env_settings, init_settings


ENV_PREFIX = "EDGE_AGENT__"


def _env_source(loc: tuple[str | int, ...]) -> str | None:
    """The environment variable that set the value at ``loc``, if one did.

    pydantic-settings reads ``EDGE_AGENT__SECTION__KEY`` case-insensitively, and a variable
    for a whole section (``EDGE_AGENT__MQTT='{"port": 0}'``) covers every key under it.
    """
    env = {k.upper(): k for k in os.environ if k.upper().startswith(ENV_PREFIX)}
    names: list[str] = []
    for part in loc:
        if isinstance(part, int):
            break
        names.append(part.upper())
    for n in range(len(names), 0, -1):
        key = ENV_PREFIX + "__".join(names[:n])
        if key in env:
            return env[key]
    return None


def env_variable(loc: tuple[str | int, ...]) -> str | None:
    """The ``EDGE_AGENT__...`` variable that set the value at ``loc``, if one did."""
    return _env_source(loc)


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The settings model that holds the keys at ``loc`` (list indexes skipped)."""
    cls: type[BaseModel] = AgentSettings
    for part in loc:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part)
        if field is None:
            return None
        found = _submodel(field.annotation)
        if found is None:
            return None
        cls = found
    return cls


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def _hint(error: Any) -> str:
    """A hint for the common mistakes: an unquoted camera index, a misspelt key."""
    loc = tuple(error["loc"])
    value = error.get("input")
    if error["type"] == "string_type" and loc and loc[-1] == "source":
        if isinstance(value, int) and not isinstance(value, bool):
            return (
                f' (a camera index is text in YAML: write source: "{value}" '
                f"or source: /dev/video{value})"
            )
        return " (write the source in quotes)"
    if error["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
        model = _model_at(loc[:-1])
        if model is None:
            return ""
        keys = list(model.model_fields)
        close = difflib.get_close_matches(loc[-1], keys, n=1, cutoff=0.6)
        if close:
            return f" (did you mean {close[0]!r}?)"
        return f" (known keys: {', '.join(keys)})"
    return ""


#: Field names whose values are never echoed in an error (mqtt.password, tokens, keys).
_SECRET = re.compile(r"pas|pwd|secret|token|key|cred", re.IGNORECASE)


def _shown(error: Any) -> str:
    """The offending value as the error line shows it: secrets masked, URLs redacted, long
    values cut."""
    value = error.get("input")
    names = [p for p in error["loc"] if isinstance(p, str)]
    if any(_SECRET.search(n) or is_secret_field(n) for n in names) or isinstance(value, SecretStr):
        return "***"
    shown = redact(repr(value) if not isinstance(value, dict) else "{...}")
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _format_validation_error(err: ValidationError, origin: str) -> str:
    """One line per error: where the value came from, its field path, the value, the rule."""
    lines = []
    for error in err.errors():
        loc = ".".join(str(p) for p in error["loc"]) or "(root)"
        env_var = _env_source(tuple(error["loc"]))
        where = origin if env_var is None else f"invalid environment variable {env_var}"
        lines.append(f"{where}: {loc} = {_shown(error)}: {error['msg']}{_hint(error)}")
    return "\n".join(lines)


def tls_file_problems(tls: TlsSettings) -> list[str]:
    """``mqtt.tls.ca = 'PATH': no such file`` for each TLS file that is missing.

    Checked where the files are opened, not at load: configs name files of the device they
    are deployed to, and operator commands load them elsewhere.
    """
    problems = []
    for key in ("ca", "cert", "key"):
        path: Path | None = getattr(tls, key)
        if path is None:
            continue
        if path.is_dir():
            problems.append(f"mqtt.tls.{key} = {str(path)!r}: is a directory, not a PEM file")
        elif not path.exists():
            problems.append(f"mqtt.tls.{key} = {str(path)!r}: no such file")
    return problems


def _yaml_error(path: Path, e: yaml.YAMLError) -> str:
    """One line naming the file, the line and column (1-based) and what YAML expected."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is not None:
        return (
            f"cannot read config {path}: line {mark.line + 1}, column {mark.column + 1}: {problem}"
        )
    return f"cannot read config {path}: {problem}"


def load_settings(path: Path | str | None = None) -> AgentSettings:
    """Load settings from ``path`` (default configs/agent.yaml if present) plus environment.

    Raises ConfigError with a one-line message naming the field, the value, the rule and
    where the value came from (the file or an ``EDGE_AGENT__...`` environment variable).
    """
    explicit = path is not None
    cfg_path = Path(path) if path is not None else resolve_path(DEFAULT_CONFIG)
    data: dict[str, Any] = {}
    if cfg_path.exists():
        try:
            loaded = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ConfigError(_yaml_error(cfg_path, e)) from e
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read config {cfg_path}: {e}".splitlines()[0]) from e
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config {cfg_path}: top level must be a mapping of sections")
        data = loaded
    elif explicit:
        raise ConfigError(f"config file not found: {cfg_path} (pass --config PATH)")
    try:
        return AgentSettings(**data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, f"invalid config {cfg_path}")) from e
