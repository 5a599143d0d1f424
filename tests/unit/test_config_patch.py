"""config/set bodies: the documented ``patch`` object, top-level sections, flat hot keys."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import CommandError
from agent.service.handlers import config_patch

CAMERAS = ["front", "back"]


@pytest.mark.parametrize(
    ("body", "patch"),
    [
        (
            {"id": "a", "patch": {"detector": {"conf_threshold": 0.4}}},
            {"detector": {"conf_threshold": 0.4}},
        ),
        (
            {"id": "b", "detector": {"iou_threshold": 0.5}, "publish": {"mode": "on_change"}},
            {"detector": {"iou_threshold": 0.5}, "publish": {"mode": "on_change"}},
        ),
        (
            {"id": "c", "conf_threshold": 0.4, "classes": ["person"], "mode": "on_change"},
            {
                "detector": {"conf_threshold": 0.4, "classes": ["person"]},
                "publish": {"mode": "on_change"},
            },
        ),
        ({"id": "d", "fps": 5}, {"cameras": {"front": {"fps": 5}, "back": {"fps": 5}}}),
        ({"id": "e", "fps": None, "camera": "back"}, {"cameras": {"back": {"fps": None}}}),
        (
            {"id": "f", "detector": {"max_det": 5}, "conf_threshold": 0.3},
            {"detector": {"max_det": 5, "conf_threshold": 0.3}},
        ),
        (
            {"id": "g", "cameras": {"front": {"fps": 2}}, "fps": 3, "camera": "back"},
            {"cameras": {"front": {"fps": 2}, "back": {"fps": 3}}},
        ),
    ],
)
def test_spellings(body: dict[str, Any], patch: dict[str, Any]) -> None:
    before = repr(body)
    assert config_patch(body, CAMERAS) == patch
    assert repr(body) == before  # the request body is not modified


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"id": "a"}, "non-empty 'patch'"),
        ({"id": "b", "patch": {}}, "non-empty object"),
        ({"id": "c", "patch": [1]}, "non-empty object"),
        ({"id": "d", "patch": {"detector": {}}, "conf_threshold": 0.3}, "not both"),
        ({"id": "e", "port": 1884}, "port is not a hot-reloadable setting"),
        ({"id": "f", "camera": "front"}, "without 'fps'"),
        ({"id": "g", "detector": {"conf_threshold": 0.2}, "conf_threshold": 0.3}, "twice"),
        ({"id": "h", "detector": 3, "conf_threshold": 0.3}, "patch.detector must be an object"),
        ({"id": "i", "cameras": {"front": {"fps": 1}}, "fps": 2}, "twice"),
    ],
)
def test_refused(body: dict[str, Any], says: str) -> None:
    with pytest.raises(CommandError) as e:
        config_patch(body, CAMERAS)
    assert e.value.code == "bad_patch"
    assert says in str(e.value)
