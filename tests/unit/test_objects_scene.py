"""SceneWatch: a cut or a moved camera is a global change; lighting and walkers are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.cv import cv2
from agent.objects.scene import SceneWatch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def street() -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(ROOT / "assets" / "vtest.avi"))
    frames = []
    while len(frames) < 300:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame)
    cap.release()
    return frames


def _changed(a: np.ndarray, b: np.ndarray) -> bool:
    watch = SceneWatch()
    assert watch.update(a) is False  # the first frame compares with nothing
    return watch.update(b)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("zoomed crop", True),
        ("another photo", True),
        ("camera turned", True),
        ("darker", False),
        ("brighter", False),
        ("same", False),
    ],
)
def test_global_changes(street, name, expected):
    """Cuts and a turned camera are global changes; a gain change or nothing is not."""
    f = street[100]
    h, w = f.shape[:2]
    other = {
        "zoomed crop": lambda: cv2.resize(f[100:388, 200:584], (w, h)),
        "another photo": lambda: cv2.resize(cv2.imread(str(ROOT / "assets" / "bus.jpg")), (w, h)),
        "camera turned": lambda: np.ascontiguousarray(np.roll(f, w // 6, axis=1)[:, ::-1]),
        "darker": lambda: (f * 0.6).astype(np.uint8),
        "brighter": lambda: np.clip(f * 1.3, 0, 255).astype(np.uint8),
        "same": f.copy,
    }[name]()
    assert _changed(f, other) is expected


def test_a_busy_street_is_no_global_change(street):
    """vtest.avi at 5 fps (every 2nd frame): walkers never make a global change."""
    watch = SceneWatch()
    assert not any(watch.update(f) for f in street[::2])
    assert watch.share < 0.2
