"""A stand-in pipeline and reply recorder around a real ``UpdateManager``."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.detect.detector import Detector, sha256_file
from agent.settings import ModelsSettings
from agent.update.manager import UpdateManager
from agent.update.store import ModelRecord, ModelStore
from tests.update.models import SPEC

FRAME = np.random.default_rng(5).integers(0, 256, (360, 640, 3), dtype=np.uint8)


@dataclass
class Replies:
    """Collects reply(ok, result, code, message) calls."""

    got: list[tuple[bool, dict[str, Any] | None, str | None, str]] = field(default_factory=list)
    event: threading.Event = field(default_factory=threading.Event)

    def __call__(self, ok: bool, result: dict[str, Any] | None, code: str | None, msg: str) -> None:
        self.got.append((ok, result, code, msg))
        self.event.set()

    def wait(self, timeout: float = 20.0) -> tuple[bool, dict[str, Any] | None, str | None, str]:
        assert self.event.wait(timeout), "no reply"
        return self.got[0]


class Pipeline:
    """Processes frames with the active model and reports them, like the inference engine.

    ``real``: run the Detector (true latencies); else report ``latency_ms[sha]`` (default
    5 ms) and ``errors_for`` shas as failed frames, without inference.
    """

    def __init__(self, model: Path, *, real: bool = False) -> None:
        self.real = real
        self.sha = sha256_file(model)
        self.det = Detector(model, SPEC) if real else None
        self.latency_ms: dict[str, float] = {}
        self.errors_for: set[str] = set()
        self.fail_swap = False
        self.swaps: list[tuple[Path, ModelRecord]] = []
        self.frames: dict[str, int] = {}
        self.manager: UpdateManager | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self, manager: UpdateManager) -> None:
        self.manager = manager
        self._thread.start()

    def swap(self, path: Path, record: ModelRecord) -> None:
        if self.fail_swap:
            raise RuntimeError("provider exploded")
        det = Detector(path, SPEC, name=record.name, version=record.version)
        with self._lock:
            self.det, self.sha = det, record.sha256
            self.swaps.append((path, record))

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                det, sha = self.det, self.sha
            if self.real and det is not None:
                ms: float | None = det.detect(FRAME).times.inference_ms
                error = None
            else:
                time.sleep(0.005)
                error = "boom" if sha in self.errors_for else None
                ms = None if error else self.latency_ms.get(sha, 5.0)
            self.frames[sha] = self.frames.get(sha, 0) + 1
            if self.manager is not None:
                self.manager.observe(sha, ms, error)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def bundled_record(path: Path) -> ModelRecord:
    return ModelRecord.external(path, sha256_file(path), "yolo11n-pose", 1)


@contextmanager
def running(
    state_dir: Path,
    base: Path,
    settings: ModelsSettings,
    *,
    real: bool = False,
    **kwargs: Any,
) -> Iterator[tuple[UpdateManager, Pipeline]]:
    store = ModelStore(state_dir, crash_loop_starts=settings.crash_loop_starts)
    decision = store.record_start()
    pipe = Pipeline(decision.path or base, real=real)
    manager = UpdateManager(
        settings,
        store,
        bundled=bundled_record(base),
        swap=pipe.swap,
        latest_frame=lambda: FRAME,
        session_spec=SPEC,
        **kwargs,
    )
    manager.start()
    pipe.start(manager)
    try:
        yield manager, pipe
    finally:
        pipe.close()
        manager.close()


def chunks_of(path: Path, size: int) -> list[bytes]:
    data = path.read_bytes()
    return [data[i : i + size] for i in range(0, len(data), size)]


@contextmanager
def file_server(files: dict[str, Path]) -> Iterator[str]:
    """Serve ``files`` (URL path -> file) on a loopback port; yields the base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = files.get(self.path)
            if path is None:
                self.send_error(404)
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
