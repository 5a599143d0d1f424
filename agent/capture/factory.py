"""Which source class reads a camera's ``source``: the worker's default factory."""

from __future__ import annotations

from agent.capture.base import FrameSource
from agent.capture.images import ImageSequenceSource
from agent.capture.opencv import VideoCaptureSource
from agent.capture.sources import SourceKind, classify_source
from agent.settings import CameraSettings


def make_source(settings: CameraSettings) -> FrameSource:
    """An unopened source for ``settings.source``."""
    kind = classify_source(settings.source)
    if kind is SourceKind.IMAGES:
        return ImageSequenceSource(settings.source.strip())
    return VideoCaptureSource(kind, settings)
