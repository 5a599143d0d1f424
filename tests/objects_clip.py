"""A small clip with known truth for the objects tests: one real person walks across.

The person is cut from the shared photo bus.jpg (a real person, so the real model finds
them) and pasted on a plain textured background, walking left to right over
``WALK_FRAMES`` frames, then the scene stays empty for ``EMPTY_FRAMES`` frames. Played in a
loop, every cycle is one object: one ``new``, one ``in`` crossing of a vertical line through
the middle, one stay in the right-half zone, one ``end`` (lost) while the scene is empty.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BUS = ROOT / "assets" / "bus.jpg"
#: A person in bus.jpg (xyxy, px), found by the FP32 model.
PERSON_XYXY = (221, 404, 345, 859)
SIZE_WH = (640, 480)
WALK_FRAMES = 30
EMPTY_FRAMES = 25
FPS = 10.0

LINE = {"points": [[0.5, 0.0], [0.5, 1.0]]}
RIGHT_HALF = {"polygon": [[0.5, 0.0], [1.0, 0.0], [1.0, 1.0], [0.5, 1.0]], "inertia": 2}


def background() -> np.ndarray:
    rng = np.random.default_rng(7)
    w, h = SIZE_WH
    base = np.full((h, w, 3), 120.0, np.float32)
    noise = rng.integers(-12, 12, (h // 8, w // 8, 3)).astype(np.float32)
    base = np.clip(base + cv2.resize(noise, (w, h), interpolation=cv2.INTER_LINEAR), 0, 255)
    return base.astype(np.uint8)


def person() -> np.ndarray:
    x1, y1, x2, y2 = PERSON_XYXY
    crop = cv2.imread(str(BUS))[y1:y2, x1:x2]
    scale = 240 / crop.shape[0]
    return cv2.resize(crop, (round(crop.shape[1] * scale), 240), interpolation=cv2.INTER_AREA)


def frames() -> list[tuple[np.ndarray, tuple[int, int, int, int] | None]]:
    """(frame, truth xyxy or None) of one cycle."""
    bg, p = background(), person()
    ph, pw = p.shape[:2]
    w, h = SIZE_WH
    out: list[tuple[np.ndarray, tuple[int, int, int, int] | None]] = []
    for i in range(WALK_FRAMES):
        x = round(10 + i * (w - pw - 20) / (WALK_FRAMES - 1))
        y = h - ph - 20
        img = bg.copy()
        img[y : y + ph, x : x + pw] = p
        out.append((img, (x, y, x + pw, y + ph)))
    out += [(bg.copy(), None) for _ in range(EMPTY_FRAMES)]
    return out


def write_folder(folder: Path) -> Path:
    """The cycle as numbered JPEGs in ``folder`` (an image-folder camera source)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (img, _) in enumerate(frames()):
        cv2.imwrite(str(folder / f"{i:04d}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 92])
    return folder
