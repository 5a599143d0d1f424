"""Camera capture: sources, short frame slots, and a reconnecting worker per camera.

Wiring (see ``CameraWorker`` and ``RoundRobinFeed``)::

    feed = RoundRobinFeed()
    workers = [CameraWorker(cam, feed.add(cam.id), stop, on_status) for cam in cameras]
    for w in workers:
        w.start()
    frame = feed.get(timeout=0.2)  # inference thread: next camera's oldest waiting frame, or None
"""

from agent.capture import env as _env  # noqa: F401 (OpenCV's variables, before cv2 loads)
from agent.capture.backoff import Backoff
from agent.capture.base import (
    CameraState,
    CameraStatus,
    FrameSource,
    SourceUnavailableError,
    StatusCallback,
)
from agent.capture.camera import CameraStats, CameraWorker
from agent.capture.exitgate import close_capture, open_capture
from agent.capture.factory import make_source
from agent.capture.latest import LatestFrameSlot, RoundRobinFeed
from agent.capture.sources import SourceKind, classify_source, redact

__all__ = [
    "Backoff",
    "CameraState",
    "CameraStats",
    "CameraStatus",
    "CameraWorker",
    "FrameSource",
    "LatestFrameSlot",
    "RoundRobinFeed",
    "SourceKind",
    "SourceUnavailableError",
    "StatusCallback",
    "classify_source",
    "close_capture",
    "make_source",
    "open_capture",
    "redact",
]
