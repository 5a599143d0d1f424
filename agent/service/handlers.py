"""Command handlers: pause, resume, config/set|get|reset, snapshot, model update commands."""

from __future__ import annotations

import time
from typing import Any, Protocol

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
from agent.service.hotconfig import (
    Plan,
    effective,
    entries,
    plan,
    reset_patch,
)
from agent.service.objects import ObjectsService
from agent.service.overrides import RuntimeOverrides
from agent.service.patchkeys import HOT_DETECTOR_KEYS, SECTIONS, did_you_mean
from agent.service.publish import DetectionPublisher
from agent.settings import AgentSettings
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
    overrides: RuntimeOverrides

    def publish_discovery(self) -> None: ...


_SECTIONS = SECTIONS
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


def _replier(req: Request) -> Any:
    def reply(ok: bool, result: dict[str, Any] | None, code: str | None, message: str) -> None:
        req.reply(ok, result, code, message)

    return reply


class CommandHandlers:
    """The agent's remote-control surface; every handler runs on the command thread."""

    def __init__(self, agent: AgentParts) -> None:
        self.agent = agent

    def register(self, router: CommandRouter) -> None:
        router.register("pause", self.pause)
        router.register("resume", self.resume)
        router.register("config/set", self.config_set)
        router.register("config/get", self.config_get)
        router.register("config/reset", self.config_reset)
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
        # Validate everything first; apply only when the whole patch is valid.
        planned = self._plan(patch)
        self._apply(planned)
        log.info("config_set", id=req.id, patch=patch)
        # Kept in state_dir after it applied: a full disk still changes the running agent,
        # and the reply says it will not survive a restart.
        kept = self.agent.overrides.record(entries(patch))
        cams_patch = patch.get("cameras", {})
        return {
            "detector": {k: getattr(planned.detector, k) for k in sorted(HOT_DETECTOR_KEYS)},
            "publish": {"mode": planned.publish.mode},
            "cameras": {
                cid: c.model_dump(mode="json", include=set(cams_patch[cid]))
                for cid, c in planned.cameras.items()
            },
            **kept,
        }

    def config_get(self, req: Request) -> dict[str, Any]:
        """The effective hot-reloadable config and where each value came from."""
        return self.agent.overrides.describe(self.agent.settings)

    def config_reset(self, req: Request) -> dict[str, Any]:
        """Drop the runtime overrides and apply the file's (and environment's) values live."""
        ov = self.agent.overrides
        enabled = self.agent.objects is not None
        planned = self._plan(reset_patch(self.agent.settings, ov.base, objects_enabled=enabled))
        self._apply(planned)
        result = ov.reset()
        log.info("config_reset", id=req.id, dropped=result["dropped"])
        return {**result, "config": effective(self.agent.settings)}

    def _plan(self, patch: dict[str, Any]) -> Plan:
        planned = plan(self.agent.settings, patch, objects_enabled=self.agent.objects is not None)
        try:
            self.agent.engine.models.workers[0].check_thresholds(thresholds(planned.detector))
        except ConfigError as e:
            raise CommandError("bad_patch", str(e)) from e
        return planned

    def _apply(self, planned: Plan) -> None:
        self.agent.engine.set_thresholds(thresholds(planned.detector))
        self.agent.publisher.mode = planned.publish.mode
        for cid, cam in planned.cameras.items():
            self.agent.cameras[cid].set_fps(cam.fps)
            if self.agent.objects is not None:
                self.agent.objects.reconfigure(cam)
            looker = self.agent.lookers.get(cid)
            if looker is not None:
                looker.set_masks([*cam.masks, *cam.motion_masks])
        planned.apply_to(self.agent.settings)
        if planned.cameras:
            self.agent.publish_discovery()

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
