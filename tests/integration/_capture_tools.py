"""Helpers for capture tests: a status recorder and a killable MJPEG-over-HTTP server."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import cv2
import numpy as np

from agent.capture.base import CameraState, CameraStatus

ROOT = Path(__file__).resolve().parents[2]
VTEST = ROOT / "assets" / "vtest.avi"
SHARED_MEDIA = ROOT.parent / "shared" / "data" / "media"


class StatusLog:
    """Records every status a camera publishes; waits for a given state."""

    def __init__(self) -> None:
        self.items: list[CameraStatus] = []
        self._cond = threading.Condition()

    def __call__(self, status: CameraStatus) -> None:
        with self._cond:
            self.items.append(status)
            self._cond.notify_all()

    def states(self) -> list[CameraState]:
        with self._cond:
            return [s.state for s in self.items]

    def wait_for(self, state: CameraState, timeout: float, after: int = 0) -> CameraStatus | None:
        """The first status in ``state`` at index >= ``after``, waiting up to ``timeout``."""

        def find() -> CameraStatus | None:
            return next((s for s in self.items[after:] if s.state is state), None)

        with self._cond:
            self._cond.wait_for(lambda: find() is not None, timeout)
            return find()


def wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def vtest_jpegs(n: int) -> list[bytes]:
    """The first ``n`` frames of vtest.avi as JPEG files."""
    cap = cv2.VideoCapture(str(VTEST))
    out = []
    for _ in range(n):
        ok, img = cap.read()
        assert ok
        out.append(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 80])[1].tobytes())
    cap.release()
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class MjpegServer:
    """``multipart/x-mixed-replace`` JPEG stream on 127.0.0.1, like IP cameras serve.

    ``kill`` closes the listening socket and every client connection (a camera losing
    power); ``start`` again serves on the same port.
    """

    BOUNDARY = "frame"

    def __init__(self, jpegs: list[bytes], fps: float = 20.0, port: int | None = None) -> None:
        self.jpegs = jpegs
        self.period = 1.0 / fps
        self.port = port or free_port()
        self._server: ThreadingHTTPServer | None = None
        self._alive = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/stream.mjpg"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner._lock:
                    owner._conns.add(self.connection)
                self.send_response(200)
                self.send_header(
                    "Content-Type", f"multipart/x-mixed-replace; boundary={owner.BOUNDARY}"
                )
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                i = 0
                try:
                    while owner._alive.is_set():
                        jpg = owner.jpegs[i % len(owner.jpegs)]
                        i += 1
                        head = (
                            f"--{owner.BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                            f"Content-Length: {len(jpg)}\r\n\r\n"
                        ).encode()
                        self.wfile.write(head + jpg + b"\r\n")
                        time.sleep(owner.period)
                except OSError:
                    pass  # the client or the test closed the connection

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def start(self) -> MjpegServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._alive.set()
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def kill(self) -> None:
        self._alive.clear()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):  # already closed by the client
                    conn.shutdown(socket.SHUT_RDWR)
            self._conns.clear()


def noise_image(rng: np.random.Generator, hw: tuple[int, int] = (120, 160)) -> np.ndarray:
    return rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
