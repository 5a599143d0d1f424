"""Environment variables OpenCV reads, set once before cv2 is imported.

``setenv`` is not safe while other threads call ``getenv``, so these are set when
``agent.capture`` is first imported, long before any capture thread exists. An operator's
own value always wins (``setdefault``).

- ``OPENCV_FFMPEG_CAPTURE_OPTIONS``: read at every FFmpeg open. RTSP over TCP: UDP loses
  packets on Wi-Fi and smears frames. Setting the variable replaces OpenCV's built-in
  ``rtsp_flags=prefer_tcp`` default, which is why TCP is given explicitly.
- ``OPENCV_VIDEOIO_V4L_SELECT_TIMEOUT``: seconds a V4L2 read waits for a frame (OpenCV's
  default is 10). OpenCV keeps it in a function-local static at the first V4L2 read, so it
  is one value per process: a camera's ``read_timeout_s`` cannot apply to V4L2 devices.
  5 s fails a dead camera well inside the default ``stall_timeout_s`` while still waiting
  out the long exposures some webcams use in the dark.
"""

from __future__ import annotations

import os

FFMPEG_OPTIONS = "rtsp_transport;tcp"
V4L_SELECT_TIMEOUT_S = "5"

os.environ.setdefault("OPENCV_FFMPEG_CAPTURE_OPTIONS", FFMPEG_OPTIONS)
os.environ.setdefault("OPENCV_VIDEOIO_V4L_SELECT_TIMEOUT", V4L_SELECT_TIMEOUT_S)
