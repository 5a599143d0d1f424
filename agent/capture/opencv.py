"""Sources read through ``cv2.VideoCapture``: V4L2 devices, video files, URLs, GStreamer.

Measured with cv2 5.0: OpenCV serializes FFmpeg *opens* process-wide (one mutex), so an
unreachable camera holds up every other camera's (re)open for up to its
``open_timeout_s``; reads are not serialized, so streaming cameras are unaffected. Keep
``open_timeout_s`` short for LAN cameras. Missing files are checked before opening.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any

from agent import causes
from agent.capture import env as _env  # noqa: F401 (OpenCV's variables, before cv2 loads)
from agent.capture.base import Image, SourceUnavailableError, StreamFailedError
from agent.capture.probe import probe
from agent.capture.sources import SourceKind, redact
from agent.cv import cv2
from agent.settings import CameraSettings, resolve_path

#: Used when a file reports no usable frame rate (some AVI/MJPEG muxes report 0 or 1000).
DEFAULT_FILE_FPS = 25.0
_MAX_SANE_FPS = 500.0


@functools.cache
def gstreamer_available() -> bool:
    """Whether this cv2 was built with GStreamer (the PyPI wheels are not)."""
    m = re.search(r"GStreamer:\s*(\w+)", cv2.getBuildInformation())
    return m is not None and m.group(1).upper() == "YES"


def _no_gstreamer_message(camera_id: str) -> str:
    return (
        f"camera {camera_id}: a GStreamer pipeline needs OpenCV built with GStreamer, and this "
        f"cv2 {cv2.__version__} has none (the PyPI opencv-python-headless wheel never does); "
        "use the system OpenCV (JetPack's, or apt's python3-opencv) in a venv made with "
        "--system-site-packages, or give a device, file or URL source"
    )


class VideoCaptureSource:
    """One ``cv2.VideoCapture``, opened with the backend and timeouts its kind needs."""

    def __init__(self, kind: SourceKind, settings: CameraSettings) -> None:
        if kind is SourceKind.IMAGES:
            raise ValueError("image folders and globs are read by ImageSequenceSource")
        self.kind = kind
        self._settings = settings
        self._source = settings.source.strip()
        self.name = redact(self._source)
        self.is_live = kind is not SourceKind.FILE
        # Only sensors (V4L2, CSI through GStreamer) show the repeat-the-last-frame failure;
        # an encoded stream can legitimately repeat frames of a static scene.
        self.detect_frozen = kind in (SourceKind.DEVICE, SourceKind.GSTREAMER)
        self.fps: float | None = None
        self._cap: Any = None

    def _target_and_api(self) -> tuple[int | str, int, list[int]]:
        s = self._settings
        if self.kind is SourceKind.DEVICE:
            api = cv2.CAP_V4L2 if sys.platform.startswith("linux") else cv2.CAP_ANY
            index = self._source.isdigit()
            device = f"/dev/video{self._source}" if index else self._source
            # An index is checked where it names a file (Linux): "cannot open 7" says less.
            if (not index or sys.platform.startswith("linux")) and not os.path.exists(device):
                source = f" (source {self._source!r})" if index else ""
                raise StreamFailedError(f"no such video device: {device}{source}", causes.NO_DEVICE)
            return (int(self._source) if index else device), api, []
        if self.kind is SourceKind.GSTREAMER:
            if not gstreamer_available():
                raise SourceUnavailableError(_no_gstreamer_message(s.id))
            return self._source, cv2.CAP_GSTREAMER, []
        if self.kind is SourceKind.FILE:
            path = resolve_path(self._source)
            if not path.is_file():
                raise StreamFailedError(f"video file not found: {self._source}", causes.NOT_FOUND)
            return str(path), cv2.CAP_FFMPEG, []
        # Without these an FFmpeg open or read of a dead stream blocks for minutes or forever.
        params = [
            cv2.CAP_PROP_OPEN_TIMEOUT_MSEC,
            round(s.open_timeout_s * 1000),
            cv2.CAP_PROP_READ_TIMEOUT_MSEC,
            round(s.read_timeout_s * 1000),
        ]
        return self._source, cv2.CAP_FFMPEG, params

    def open(self) -> None:
        self.close()
        target, api, params = self._target_and_api()
        try:
            cap = cv2.VideoCapture(target, api, params)
        except cv2.error as e:
            message = f"cannot open {self.name}: {e}".splitlines()[0]
            raise StreamFailedError(message, causes.ERROR) from e
        if not cap.isOpened():
            cap.release()
            raise self._open_failed()
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        if 0.0 < fps <= _MAX_SANE_FPS:
            self.fps = fps
        else:
            self.fps = None if self.is_live else DEFAULT_FILE_FPS
        self._cap = cap

    def _open_failed(self) -> StreamFailedError:
        """Why the open failed: a URL's server is asked (cheap), other kinds say what they are."""
        if self.kind is SourceKind.URL:
            found = probe(self._source, self._settings.open_timeout_s)
            if found is not None:
                # The cause first: the URL may end in a redacted "?token=***".
                return StreamFailedError(f"{found[1]}: cannot open {self.name}", found[0])
            message = f"no video stream: cannot open {self.name}"
            return StreamFailedError(message, causes.NO_STREAM)
        cause = causes.ERROR if self.kind is SourceKind.DEVICE else causes.NO_STREAM
        return StreamFailedError(f"cannot open {self.name}", cause)

    def read(self, out: Image | None = None) -> Image | None:
        if self._cap is None:
            return None
        # With ``image=out`` OpenCV decodes into the caller's buffer when its shape fits
        # and allocates a new one otherwise, so a wrong-sized buffer is harmless.
        ok, img = self._cap.read() if out is None else self._cap.read(image=out)
        if not ok or img is None:
            return None
        if img.ndim == 2 or img.shape[2] != 3:
            # GStreamer pipelines may end in GRAY8 or BGRx; the pipeline expects BGR.
            code = cv2.COLOR_GRAY2BGR if img.ndim == 2 else cv2.COLOR_BGRA2BGR
            img = cv2.cvtColor(img, code)
        result: Image = img
        return result

    def skip(self) -> bool:
        return self._cap is not None and bool(self._cap.grab())

    def close(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap.release()
