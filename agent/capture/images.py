"""Still images as a frame source: a directory, a glob, or one image file."""

from __future__ import annotations

import glob
import re
from pathlib import Path

from agent.capture import env as _env  # noqa: F401 (OpenCV's variables, before cv2 loads)
from agent.capture.base import Image, log
from agent.capture.sources import IMAGE_EXTENSIONS
from agent.cv import cv2
from agent.errors import SourceError
from agent.settings import PROJECT_ROOT, resolve_path


def _natural_key(path: str) -> list[object]:
    # frame2.jpg before frame10.jpg, as a person numbering files expects.
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", path)]


def list_images(pattern: str) -> list[str]:
    """Image files named by ``pattern`` (directory, glob or file), in natural order.

    A relative pattern that matches nothing from the working directory is tried against
    the project root, like other bundled paths.
    """
    candidates = [pattern]
    if not Path(pattern).expanduser().is_absolute():
        candidates.append(str(PROJECT_ROOT / pattern))
    for cand in candidates:
        path = resolve_path(cand)
        if path.is_dir():
            names = [str(p) for p in path.iterdir()]
        else:
            names = glob.glob(str(Path(cand).expanduser()))
        files = [n for n in names if Path(n).suffix.lower() in IMAGE_EXTENSIONS]
        files = [n for n in files if Path(n).is_file()]
        if files:
            return sorted(files, key=_natural_key)
    return []


class ImageSequenceSource:
    """Reads the listed images in order; ``open`` lists them again (new files join a loop).

    ``cv2.imread`` cannot decode into a caller's buffer, so ``read`` ignores ``out``.
    """

    fps: float | None = None
    is_live = False
    detect_frozen = False

    def __init__(self, pattern: str) -> None:
        self.name = pattern
        self._files: list[str] = []
        self._index = 0

    def open(self) -> None:
        self._files = list_images(self.name)
        self._index = 0
        if not self._files:
            raise SourceError(f"no images found at {self.name}")

    def read(self, out: Image | None = None) -> Image | None:
        while self._index < len(self._files):
            path = self._files[self._index]
            self._index += 1
            img = cv2.imread(path, cv2.IMREAD_COLOR)
            if img is not None:
                result: Image = img
                return result
            log.warning("image_unreadable", path=path)
        return None

    def skip(self) -> bool:
        if self._index >= len(self._files):
            return False
        self._index += 1
        return True

    def close(self) -> None:
        self._files = []
        self._index = 0
