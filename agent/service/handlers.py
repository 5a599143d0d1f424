"""Command handlers: pause, resume, config/set, snapshot, and model update commands."""

from __future__ import annotations

import time
from typing import Any, Protocol

from pydantic import ValidationError

from agent.capture.camera import CameraWorker
from agent.detect.inputs import thresholds
from agent.errors import CommandError, ConfigError
from agent.log import get_logger
from agent.messages import ProgressMessage, utc_ts
from agent.mqtt.client import Inbound, MqttLink
from agent.mqtt.topics import Topics
from agent.regions.looker import Looker
from agent.render.draw import draw, jpeg_within
from agent.service.control import CommandRouter, Request
from agent.service.engine import InferenceEngine, Processed
from agent.service.objects import ObjectsService
from agent.service.patchkeys import (
    HOT_CAMERA_KEYS,
    HOT_DETECTOR_KEYS,
    HOT_PUBLISH_KEYS,
    SECTIONS,
    did_you_mean,
    key_error,
    section_error,
)
from agent.service.publish import DetectionPublisher
from agent.settings import AgentSettings, CameraSettings, DetectorSettings, PublishSettings
from agent.update.manager import UpdateManager

log = get_logger("handlers")


class AgentParts(Protocol):
    """What the handlers act on: the running agent's parts (the daemon provides them)."""

    settings: AgentSettings
    topics: Topics
    link: MqttLink
    engine: InferenceEngine
    publisher: DetectionPublisher
    cameras: dict[str, CameraWorker]
    updates: UpdateManager
    objects: ObjectsService | None
    lookers: dict[str, Looker]

    def publish_discovery(self) -> None: ...


#: Camera keys that are maps by name: a patch merges them, and a name set to null removes it.
_NAMED_CAMERA_KEYS = ("zones", "lines")
#: Hot keys a config/set body may also give flat, at its top level, and their section.
_FLAT = {**{k: "detector" for k in HOT_DETECTOR_KEYS}, "mode": "publish"}


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


def config_patch(body: dict[str, Any], cameras: list[str]) -> dict[str, Any]:
    """The patch of a config/set body, in any of its three spellings.

    ``{"patch": {"detector": {...}, "publish": {...}, "cameras": {...}}}`` (docs/mqtt.md),
    the same sections at the top level (``{"detector": {"conf_threshold": 0.4}}``), or flat
    hot keys (``{"conf_threshold": 0.4, "mode": "on_change", "fps": 5}``; a flat ``fps``
    applies to every camera, or to ``"camera"`` when given). The values are validated later.
    """
    rest = {k: v for k, v in body.items() if k != "id"}
    if "patch" in rest:
        if len(rest) > 1:
            others = ", ".join(sorted(set(rest) - {"patch"}))
            raise CommandError(
                "bad_patch", f"give the changes in 'patch' or at the top level, not both ({others})"
            )
        given = rest["patch"]
        if not isinstance(given, dict) or not given:
            raise CommandError("bad_patch", "'patch' must be a non-empty object")
        return given
    has_fps, fps, camera = "fps" in rest, rest.pop("fps", None), rest.pop("camera", None)
    if camera is not None and not has_fps:
        raise CommandError("bad_patch", "'camera' is given without 'fps'")
    patch: dict[str, Any] = {k: _copy(rest.pop(k)) for k in SECTIONS if k in rest}
    flat = {**rest, **({"fps": fps} if has_fps else {})}
    for key, value in flat.items():
        name = "cameras" if key == "fps" else _FLAT.get(key)
        if name is None:
            keys = ", ".join(sorted([*_FLAT, "fps"]))
            raise CommandError(
                "bad_patch",
                f"{key} is not a hot-reloadable setting (config/set takes 'patch', the "
                f"sections {', '.join(SECTIONS)}, or the keys {keys})"
                + did_you_mean(key, [*_FLAT, "fps"], ""),
            )
        section = patch.setdefault(name, {})
        if key == "fps":
            updates = {c: {"fps": value} for c in (cameras if camera is None else [camera])}
        else:
            updates = {key: value}
        if not isinstance(section, dict):
            raise CommandError("bad_patch", f"patch.{name} must be an object")
        if set(updates) & set(section):
            raise CommandError("bad_patch", f"{key} is given twice (in {name} and flat)")
        section.update(updates)
    if not patch:
        raise CommandError("bad_patch", "config/set needs a non-empty 'patch' object")
    return patch


def _section(
    patch: dict[str, Any],
    key: str,
    allowed: frozenset[str],
    model: type[Any],
    where: str | None = None,
) -> dict[str, Any]:
    where = where or f"patch.{key}"
    value = patch.get(key, {})
    if not isinstance(value, dict):
        raise CommandError("bad_patch", f"{where} must be an object")
    error = key_error(f"{where}.", value, allowed, model)
    if error is not None:
        raise CommandError("bad_patch", error)
    return value


def _replier(req: Request) -> Any:
    def reply(ok: bool, result: dict[str, Any] | None, code: str | None, message: str) -> None:
        req.reply(ok, result, code, message)

    return reply


def _validation_message(prefix: str, e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{prefix}.{loc} = {err.get('input')!r}: {err['msg']}"


class CommandHandlers:
    """The agent's remote-control surface; every handler runs on the command thread."""

    def __init__(self, agent: AgentParts) -> None:
        self.agent = agent

    def register(self, router: CommandRouter) -> None:
        router.register("pause", self.pause)
        router.register("resume", self.resume)
        router.register("config/set", self.config_set)
        router.register("snapshot", self.snapshot)
        router.register("model/deploy", self.model_deploy)
        router.register("model/rollback", self.model_rollback)

    def observe(self, p: Processed) -> None:
        """Every processed frame, in order per camera (health window of model updates:
        inference per whole model input, so a busy moment after a quiet one is no slower
        model)."""
        self.agent.updates.observe(p.model.sha256, p.ms_per_input, p.error)

    def on_upload(self, msg: Inbound) -> None:
        """A model upload chunk (network thread): queued, never blocks."""
        parsed = self.agent.topics.parse_upload(msg.topic)
        if parsed is not None:
            self.agent.updates.on_chunk(parsed[0], parsed[1], msg.payload)

    # -- model updates: the manager replies when the update ends -----------------------------
    def model_deploy(self, req: Request) -> None:
        self.agent.updates.deploy(req.body, _replier(req), lambda: self._accepted(req))

    def _accepted(self, req: Request) -> None:
        """``<p>/<d>/progress/model/deploy`` ``accepted``: the operator may send chunks."""
        msg = ProgressMessage(id=req.id, stage="accepted", ts=utc_ts(time.time()))
        self.agent.link.publish_event(self.agent.topics.progress(req.name), msg.to_bytes())

    def model_rollback(self, req: Request) -> None:
        self.agent.updates.rollback(_replier(req))

    # -- commands ----------------------------------------------------------------------------
    def pause(self, req: Request) -> dict[str, Any]:
        self.agent.engine.pause()
        log.info("paused", id=req.id)
        return {"state": "paused"}

    def resume(self, req: Request) -> dict[str, Any]:
        self.agent.engine.resume()
        log.info("resumed", id=req.id)
        return {"state": "running"}

    def config_set(self, req: Request) -> dict[str, Any]:
        patch = config_patch(req.body, list(self.agent.cameras))
        error = section_error("patch.", patch)
        if error is not None:
            raise CommandError("bad_patch", error)
        settings = self.agent.settings
        det_patch = _section(patch, "detector", HOT_DETECTOR_KEYS, DetectorSettings)
        pub_patch = _section(patch, "publish", HOT_PUBLISH_KEYS, PublishSettings)
        cams_patch = patch.get("cameras", {})
        if not isinstance(cams_patch, dict):
            raise CommandError("bad_patch", "patch.cameras must be an object keyed by camera id")
        # Validate everything first; apply only when the whole patch is valid.
        try:
            new_det = DetectorSettings.model_validate(
                {**settings.detector.model_dump(), **det_patch}
            )
            new_pub = type(settings.publish).model_validate(
                {**settings.publish.model_dump(), **pub_patch}
            )
        except ValidationError as e:
            raise CommandError("bad_patch", _validation_message("patch", e)) from e
        new_cams = {
            cid: self._camera_patch(cid, cam_patch) for cid, cam_patch in cams_patch.items()
        }
        th = thresholds(new_det)
        try:
            self.agent.engine.models.workers[0].check_thresholds(th)
        except ConfigError as e:
            raise CommandError("bad_patch", str(e)) from e
        # Apply.
        self.agent.engine.set_thresholds(th)
        settings.detector = new_det
        settings.publish = new_pub
        self.agent.publisher.mode = new_pub.mode
        for cid, cam in new_cams.items():
            self.agent.cameras[cid].set_fps(cam.fps)
            if self.agent.objects is not None:
                self.agent.objects.reconfigure(cam)
            looker = self.agent.lookers.get(cid)
            if looker is not None:
                looker.set_masks([*cam.masks, *cam.motion_masks])
        if new_cams:
            settings.cameras = [new_cams.get(c.id, c) for c in settings.cameras]
            self.agent.publish_discovery()
        log.info("config_set", id=req.id, patch=patch)
        return {
            "detector": {k: getattr(new_det, k) for k in sorted(HOT_DETECTOR_KEYS)},
            "publish": {"mode": new_pub.mode},
            "cameras": {
                cid: c.model_dump(mode="json", include=set(cams_patch[cid]))
                for cid, c in new_cams.items()
            },
        }

    def _camera_patch(self, cid: str, cam_patch: Any) -> CameraSettings:
        """One camera's patched settings, validated; nothing is applied here."""
        current = {c.id: c for c in self.agent.settings.cameras}.get(cid)
        if current is None:
            known = ", ".join(sorted(self.agent.cameras))
            raise CommandError("bad_patch", f"patch.cameras.{cid}: no such camera ({known})")
        if not isinstance(cam_patch, dict):
            raise CommandError("bad_patch", f"patch.cameras.{cid} must be an object")
        _section({"c": cam_patch}, "c", HOT_CAMERA_KEYS, CameraSettings, f"patch.cameras.{cid}")
        if self.agent.objects is None and set(cam_patch) & {"zones", "lines", "masks"}:
            raise CommandError(
                "bad_patch",
                f"patch.cameras.{cid}: zones, lines and masks need objects.enabled: true",
            )
        merged = current.model_dump()
        for key, value in cam_patch.items():
            if key in _NAMED_CAMERA_KEYS:
                if not isinstance(value, dict):
                    raise CommandError(
                        "bad_patch", f"patch.cameras.{cid}.{key} must be an object keyed by name"
                    )
                named = dict(merged[key])
                for name, body in value.items():
                    if body is None:
                        named.pop(name, None)
                    else:
                        named[name] = body
                merged[key] = named
            else:
                merged[key] = value
        try:
            return CameraSettings.model_validate(merged)
        except ValidationError as e:
            raise CommandError("bad_patch", _validation_message(f"patch.cameras.{cid}", e)) from e

    def snapshot(self, req: Request) -> dict[str, Any]:
        camera = req.body.get("camera")
        cameras = list(self.agent.cameras)
        if camera is None:
            camera = cameras[0]
        if not isinstance(camera, str) or camera not in self.agent.cameras:
            raise CommandError("unknown_camera", f"camera {camera!r} not in {cameras}")
        last = self.agent.publisher.camera(camera).last
        if last is None or last.detections is None:
            raise CommandError("no_frame", f"camera {camera!r} has not produced a frame yet")
        image = draw(last.frame.image, last.detections)
        limit = self.agent.settings.mqtt.max_payload_bytes
        data = jpeg_within(image, limit)
        if not data:
            raise CommandError("too_large", f"snapshot does not fit mqtt.max_payload_bytes={limit}")
        topic = self.agent.topics.camera_snapshot(camera)
        self.agent.link.publish_event(topic, data)
        return {
            "camera": camera,
            "topic": topic,
            "bytes": len(data),
            "frame_id": last.frame.frame_id,
            "detections": len(last.detections),
            "age_s": round(time.monotonic() - last.frame.t_capture, 3),
        }
