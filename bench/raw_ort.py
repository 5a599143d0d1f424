"""Raw onnxruntime throughput: the ceiling for the agent's pipeline on one machine.

    python bench/raw_ort.py [--model M] [--layout 2x1] [--provider cpu] [--frames 300]

Runs the agent's own session setup (``agent.detect.runtime.Runtime``: same threads, same
``allow_spinning=0``, same graph optimisations) on real vtest.avi frames letterboxed ahead
of time, so nothing but ``session.run`` is timed. Layout ``SxT``: S sessions with T
intra-op threads each, S threads keeping S frames in flight (2x1 = throughput layout,
1x2 = latency layout). Prints one JSON object (the last line of output).

Providers: cpu, openvino (run it with the OpenVINO venv's python), cuda, tensorrt.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.cv import cv2
from agent.detect.letterbox import LetterboxBuffer
from agent.detect.providers import with_defaults
from agent.detect.runtime import Runtime, SessionSpec
from agent.provider_names import canonical_provider

ROOT = Path(__file__).resolve().parent.parent
#: Short names the benchmarks pass; the agent's own ``canonical_provider`` resolves them.
PROVIDERS = ("cpu", "openvino", "cuda", "tensorrt")


def provider_options(provider: str, cache: Path) -> dict[str, dict[str, Any]]:
    """The agent's own defaults for ``provider`` (``Runtime`` adds each session's threads)."""
    return with_defaults({}, [canonical_provider(provider)], cache_dir=cache / "provider-cache")


def load_frames(video: Path, n: int, input_hw: tuple[int, int], dtype: Any) -> list[np.ndarray]:
    """``n`` frames spread over the video, letterboxed into model-input tensors."""
    cap = cv2.VideoCapture(str(video))
    total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) or 795
    want = set(np.linspace(0, total - 1, n).astype(int).tolist())
    buf = LetterboxBuffer(input_hw, dtype)
    out = []
    for i in itertools.count():
        ok, img = cap.read()
        if not ok:
            break
        if i in want:
            buf.apply(img)
            out.append(buf.tensor.copy())
    cap.release()
    if not out:
        raise SystemExit(f"no frames read from {video}")
    return out


def run(
    model: Path, provider: str, layout: str, frames: int, warmup: int, cache: Path, distinct: int
) -> dict[str, Any]:
    sessions, threads = (int(x) for x in layout.lower().split("x"))
    opts = provider_options(provider, cache)
    spec = SessionSpec(
        providers=(canonical_provider(provider),), threads=threads, provider_options=opts
    )
    t0 = time.perf_counter()
    runtimes = [Runtime(model, spec) for _ in range(sessions)]
    load_s = time.perf_counter() - t0
    shape = runtimes[0].input.shape
    hw = (int(shape[2]), int(shape[3])) if isinstance(shape[2], int) else (640, 640)
    tensors = load_frames(ROOT / "assets" / "vtest.avi", distinct, hw, runtimes[0].input.dtype)
    for rt in runtimes:
        for i in range(warmup):
            rt.run(tensors[i % len(tensors)])
    counter = itertools.count()
    lat: list[float] = []
    lock = threading.Lock()

    def drive(rt: Runtime) -> None:
        local = []
        while (k := next(counter)) < frames:
            t = time.perf_counter()
            rt.run(tensors[k % len(tensors)])
            local.append((time.perf_counter() - t) * 1e3)
        with lock:
            lat.extend(local)

    workers = [threading.Thread(target=drive, args=(rt,)) for rt in runtimes]
    start, cpu0 = time.perf_counter(), time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    lat.sort()
    return {
        "model": model.name,
        "provider": runtimes[0].provider,
        "layout": layout,
        "frames": frames,
        "fps": frames / elapsed,
        "latency_p50": lat[len(lat) // 2],
        "latency_p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "cpu_ms_per_frame": cpu / frames * 1e3,
        "load_s": load_s,
    }


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import CACHE, default_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=default_model())
    p.add_argument("--provider", choices=PROVIDERS, default="cpu")
    p.add_argument("--layout", default="2x1", help="SxT: S sessions x T threads")
    p.add_argument("--frames", type=int, default=300, help="timed inferences")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs per session")
    p.add_argument("--distinct", type=int, default=24, help="distinct video frames cycled")
    p.add_argument("--cache", type=Path, default=CACHE / "bench")
    a = p.parse_args()
    result = run(a.model, a.provider, a.layout, a.frames, a.warmup, a.cache, a.distinct)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
