"""Which keys ``config/set`` may change, and what to say about one it may not.

Shared by the device (agent/service/handlers.py refuses the patch) and the operator's
``config set`` (refuses it before sending): a key that is no setting at all gets "did you
mean", a real setting that needs a restart says so. Imports only the settings models, so
the CLI can use it without loading the running agent's parts.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from agent.settings import AgentSettings, CameraSettings, DetectorSettings, PublishSettings

#: config/set may change these keys without a restart; anything else is refused.
HOT_DETECTOR_KEYS = frozenset({"conf_threshold", "iou_threshold", "max_det", "classes"})
HOT_PUBLISH_KEYS = frozenset({"mode"})
HOT_CAMERA_KEYS = frozenset({"fps", "zones", "lines", "masks"})
SECTIONS = ("detector", "publish", "cameras")
_SECTION_KEYS: dict[str, tuple[frozenset[str], type[BaseModel]]] = {
    "detector": (HOT_DETECTOR_KEYS, DetectorSettings),
    "publish": (HOT_PUBLISH_KEYS, PublishSettings),
}


def did_you_mean(name: str, choices: Iterable[str], where: str) -> str:
    match = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean {where}{match[0]}?" if match else ""


def key_error(
    where: str, keys: Iterable[str], allowed: frozenset[str], model: type[BaseModel]
) -> str | None:
    """Why the first of ``keys`` outside ``allowed`` is refused (``where``: its path, e.g.
    ``patch.detector.``), or None when all are allowed."""
    extra = sorted(set(keys) - allowed)
    if not extra:
        return None
    key = extra[0]
    if key not in model.model_fields:
        hint = did_you_mean(key, model.model_fields, where)
        return f"{where}{key} is not a setting{hint or f' (hot-reloadable: {_list(allowed)})'}"
    return f"{where}{key} cannot be changed at run time (hot-reloadable: {_list(allowed)})"


def section_error(where: str, keys: Iterable[str]) -> str | None:
    """Why the first top-level key of a patch that is not a hot section is refused."""
    extra = sorted(set(keys) - set(SECTIONS))
    if not extra:
        return None
    key = extra[0]
    for name, (allowed, _) in _SECTION_KEYS.items():
        if key in allowed:
            return f"{where}{key} belongs in a section; did you mean {where}{name}.{key}?"
    if key in AgentSettings.model_fields:
        return f"{where}{key} is not hot-reloadable ({', '.join(SECTIONS)})"
    hint = did_you_mean(key, SECTIONS, where)
    return f"{where}{key} is not a setting{hint or f' (hot-reloadable: {_list(SECTIONS)})'}"


def patch_key_error(patch: dict[str, Any], where: str = "") -> str | None:
    """The first key of a nested patch that config/set would refuse, or None. Camera ids
    are not checked (only the device knows its cameras); values are checked there too."""
    error = section_error(where, patch)
    if error is not None:
        return error
    for name, (allowed, model) in _SECTION_KEYS.items():
        section = patch.get(name)
        if isinstance(section, dict):
            error = key_error(f"{where}{name}.", section, allowed, model)
            if error is not None:
                return error
    cameras = patch.get("cameras")
    for cid, cam in (cameras or {}).items() if isinstance(cameras, dict) else ():
        if isinstance(cam, dict):
            error = key_error(f"{where}cameras.{cid}.", cam, HOT_CAMERA_KEYS, CameraSettings)
            if error is not None:
                return error
    return None


def _list(keys: Iterable[str]) -> str:
    return ", ".join(sorted(keys))
