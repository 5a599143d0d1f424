"""The hot-reloadable settings: validating a ``config/set`` patch, and its flat paths.

A patch is validated whole against the running settings (nothing applied until every part
is valid). ``entries`` turns a validated patch into flat paths (``detector.conf_threshold``,
``cameras.front.zones.door``), the unit in which runtime overrides are kept, merged and
dropped one at a time (agent/service/overrides.py); ``patch_of`` turns them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from agent.errors import CommandError
from agent.service.patchkeys import (
    HOT_CAMERA_KEYS,
    HOT_DETECTOR_KEYS,
    HOT_PUBLISH_KEYS,
    key_error,
    section_error,
)
from agent.settings import AgentSettings, CameraSettings, DetectorSettings, PublishSettings

#: Camera keys that are maps by name: a patch merges them, and a name set to null removes it.
NAMED_CAMERA_KEYS = ("zones", "lines")


@dataclass(frozen=True)
class Plan:
    """What a valid patch changes: the new sections, and only the cameras it names."""

    detector: DetectorSettings
    publish: PublishSettings
    cameras: dict[str, CameraSettings]

    def apply_to(self, settings: AgentSettings) -> None:
        """Put the plan into ``settings`` (the running agent applies it to its parts too)."""
        settings.detector = self.detector
        settings.publish = self.publish
        if self.cameras:
            settings.cameras = [self.cameras.get(c.id, c) for c in settings.cameras]


def section(
    patch: dict[str, Any],
    key: str,
    allowed: frozenset[str],
    model: type[BaseModel],
    where: str | None = None,
) -> dict[str, Any]:
    """One section of a patch, its keys checked: a typo gets "did you mean"."""
    where = where or f"patch.{key}"
    value = patch.get(key, {})
    if not isinstance(value, dict):
        raise CommandError("bad_patch", f"{where} must be an object")
    error = key_error(f"{where}.", value, allowed, model)
    if error is not None:
        raise CommandError("bad_patch", error)
    return value


def validation_message(prefix: str, e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{prefix}.{loc} = {err.get('input')!r}: {err['msg']}"


def plan(settings: AgentSettings, patch: dict[str, Any], *, objects_enabled: bool) -> Plan:
    """Validate ``patch`` against ``settings``; raise CommandError(bad_patch) naming the key."""
    error = section_error("patch.", patch)
    if error is not None:
        raise CommandError("bad_patch", error)
    det_patch = section(patch, "detector", HOT_DETECTOR_KEYS, DetectorSettings)
    pub_patch = section(patch, "publish", HOT_PUBLISH_KEYS, PublishSettings)
    cams_patch = patch.get("cameras", {})
    if not isinstance(cams_patch, dict):
        raise CommandError("bad_patch", "patch.cameras must be an object keyed by camera id")
    try:
        new_det = DetectorSettings.model_validate({**settings.detector.model_dump(), **det_patch})
        new_pub = PublishSettings.model_validate({**settings.publish.model_dump(), **pub_patch})
    except ValidationError as e:
        raise CommandError("bad_patch", validation_message("patch", e)) from e
    cameras = {
        cid: camera_patch(settings, cid, body, objects_enabled=objects_enabled)
        for cid, body in cams_patch.items()
    }
    return Plan(new_det, new_pub, cameras)


def camera_patch(
    settings: AgentSettings, cid: str, cam_patch: Any, *, objects_enabled: bool
) -> CameraSettings:
    """One camera's patched settings, validated; nothing is applied here."""
    current = {c.id: c for c in settings.cameras}.get(cid)
    if current is None:
        known = ", ".join(sorted(c.id for c in settings.cameras))
        raise CommandError("bad_patch", f"patch.cameras.{cid}: no such camera ({known})")
    if not isinstance(cam_patch, dict):
        raise CommandError("bad_patch", f"patch.cameras.{cid} must be an object")
    section({"c": cam_patch}, "c", HOT_CAMERA_KEYS, CameraSettings, f"patch.cameras.{cid}")
    if not objects_enabled and set(cam_patch) & {"zones", "lines", "masks"}:
        raise CommandError(
            "bad_patch",
            f"patch.cameras.{cid}: zones, lines and masks need objects.enabled: true",
        )
    merged = current.model_dump()
    for key, value in cam_patch.items():
        if key in NAMED_CAMERA_KEYS:
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
        raise CommandError("bad_patch", validation_message(f"patch.cameras.{cid}", e)) from e


def entries(patch: dict[str, Any]) -> dict[str, Any]:
    """A validated patch as flat paths: a zone or line is one entry (null: removed)."""
    flat: dict[str, Any] = {}
    for name in ("detector", "publish"):
        for key, value in patch.get(name, {}).items():
            flat[f"{name}.{key}"] = value
    for cid, body in patch.get("cameras", {}).items():
        for key, value in body.items():
            if key in NAMED_CAMERA_KEYS:
                for item, spec in value.items():
                    flat[f"cameras.{cid}.{key}.{item}"] = spec
            else:
                flat[f"cameras.{cid}.{key}"] = value
    return flat


def patch_of(flat: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``entries``; a path it cannot place raises CommandError(bad_patch)."""
    patch: dict[str, Any] = {}
    for path, value in flat.items():
        parts = path.split(".")
        if parts[0] in ("detector", "publish") and len(parts) == 2:
            patch.setdefault(parts[0], {})[parts[1]] = value
        elif parts[0] == "cameras" and len(parts) == 3:
            patch.setdefault("cameras", {}).setdefault(parts[1], {})[parts[2]] = value
        elif parts[0] == "cameras" and len(parts) == 4 and parts[2] in NAMED_CAMERA_KEYS:
            cam = patch.setdefault("cameras", {}).setdefault(parts[1], {})
            cam.setdefault(parts[2], {})[parts[3]] = value
        else:
            raise CommandError("bad_patch", f"{path}: not a hot-reloadable setting")
    return patch


def effective(settings: AgentSettings) -> dict[str, Any]:
    """The hot-reloadable part of ``settings``, as JSON."""
    return {
        "detector": settings.detector.model_dump(mode="json", include=set(HOT_DETECTOR_KEYS)),
        "publish": settings.publish.model_dump(mode="json", include=set(HOT_PUBLISH_KEYS)),
        "cameras": {
            c.id: c.model_dump(mode="json", include=set(HOT_CAMERA_KEYS)) for c in settings.cameras
        },
    }


def reset_patch(
    current: AgentSettings, base: AgentSettings, *, objects_enabled: bool
) -> dict[str, Any]:
    """The patch that brings ``current``'s hot settings back to ``base``'s (zones replaced)."""
    now, was = effective(current), effective(base)
    cameras: dict[str, Any] = {}
    for cid, cam in now["cameras"].items():
        back = was["cameras"].get(cid)
        if back is None:
            continue
        body: dict[str, Any] = {"fps": back["fps"]}
        if objects_enabled:
            body["masks"] = back["masks"]
            for key in NAMED_CAMERA_KEYS:
                body[key] = {**dict.fromkeys(cam[key]), **back[key]}
        cameras[cid] = body
    return {"detector": was["detector"], "publish": was["publish"], "cameras": cameras}
