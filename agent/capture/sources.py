"""What a camera's ``source`` string means, and the source object for it."""

from __future__ import annotations

import enum
import re
from pathlib import Path

from agent.redact import redact
from agent.settings import resolve_path

__all__ = ["IMAGE_EXTENSIONS", "SourceKind", "classify_source", "redact"]

_URL = re.compile(r"^(rtsps?|rtmps?|https?|udp|tcp|srt)://", re.IGNORECASE)
_GSTREAMER = re.compile(r"\s!\s")
_DEVICE = re.compile(r"^(\d+|/dev/.+)$")
_GLOB = re.compile(r"[*?\[]")

#: Extensions read as still images (a directory, a glob, or a single image file).
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})


class SourceKind(enum.Enum):
    DEVICE = "device"
    FILE = "file"
    IMAGES = "images"
    URL = "url"
    GSTREAMER = "gstreamer"


def classify_source(source: str) -> SourceKind:
    """The kind of source a config string names (pure except for one directory check)."""
    s = source.strip()
    if _GSTREAMER.search(s):
        return SourceKind.GSTREAMER
    if _DEVICE.match(s):
        return SourceKind.DEVICE
    if _URL.match(s):
        return SourceKind.URL
    if _GLOB.search(s) or Path(s).suffix.lower() in IMAGE_EXTENSIONS:
        return SourceKind.IMAGES
    if resolve_path(s).is_dir():
        return SourceKind.IMAGES
    return SourceKind.FILE
