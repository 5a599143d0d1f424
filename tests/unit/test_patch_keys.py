"""config/set keys: a typo gets "did you mean", a setting that needs a restart says so."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import CommandError
from agent.service.handlers import config_patch
from agent.service.patchkeys import patch_key_error


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        ({"detector": {"conf_treshold": 0.4}}, "did you mean detector.conf_threshold?"),
        ({"detector": {"model": "x.onnx"}}, "detector.model cannot be changed at run time"),
        ({"publish": {"mdoe": "all"}}, "did you mean publish.mode?"),
        ({"cameras": {"front": {"fsp": 3}}}, "did you mean cameras.front.fps?"),
        ({"cameras": {"front": {"source": "0"}}}, "cameras.front.source cannot be changed"),
        ({"detectr": {"conf_threshold": 0.4}}, "detectr is not a setting; did you mean detector?"),
        ({"conf_threshold": 0.4}, "did you mean detector.conf_threshold?"),
        ({"mqtt": {"port": 1}}, "mqtt is not hot-reloadable"),
        ({"zzz": 1}, "zzz is not a setting (hot-reloadable: cameras, detector, publish)"),
    ],
)
def test_refused_keys_are_explained(patch: dict[str, Any], says: str) -> None:
    """Each refused key gets its reason; a close real key is suggested by its full path."""
    error = patch_key_error(patch)
    assert error is not None and says in error


def test_allowed_keys_pass() -> None:
    """Every hot key of every section passes (values are checked elsewhere)."""
    patch = {
        "detector": {"conf_threshold": 0.4, "iou_threshold": 0.5, "max_det": 5, "classes": None},
        "publish": {"mode": "all"},
        "cameras": {"front": {"fps": 2, "zones": {}, "lines": {}, "masks": []}},
    }
    assert patch_key_error(patch) is None


def test_flat_typo_suggests_the_hot_key() -> None:
    """A flat, misspelt hot key in a raw config/set body names the key it resembles."""
    with pytest.raises(CommandError, match="did you mean conf_threshold"):
        config_patch({"id": "a", "conf_treshold": 0.4}, ["front"])
