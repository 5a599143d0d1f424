"""Ultralytics' own pipeline on a video: ``YOLO(model).predict(source, stream=True)``.

    <ultralytics venv>/bin/python bench/ultra_predict.py --model M [--frames N]

Run by bench/compare.py in the Ultralytics virtualenv (it imports nothing of the agent).
Times what a user of Ultralytics gets: decode, preprocessing, inference, NMS, results
objects, one frame after another, batch 1, on the CPU. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
from pathlib import Path

# No network at run time: no update checks, no settings sync, no font downloads.
os.environ.setdefault("YOLO_OFFLINE", "1")


def torchvision_or_stub() -> str:
    """Which NMS Ultralytics will use on a video source.

    Ultralytics imports torchvision for video sources (for its C++ NMS). The torchvision
    wheel on PyPI is a CUDA build; next to the CPU-only torch wheel its kernels cannot
    load and the import raises. Then Ultralytics gets a stand-in ``torchvision.ops.nms``
    that is its own pure-torch ``TorchNMS.nms`` (what it uses for other sources; same
    results; a few dozen boxes per frame, well under a millisecond).
    """
    try:
        import torchvision  # noqa: F401 (imported for its side effect, as Ultralytics does)

        return "torchvision"
    except Exception as e:  # a half-loaded torchvision: replace it
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        from ultralytics.utils.nms import TorchNMS

        stub, ops = types.ModuleType("torchvision"), types.ModuleType("torchvision.ops")
        ops.nms = TorchNMS.nms  # type: ignore[attr-defined]
        stub.ops = ops  # type: ignore[attr-defined]
        sys.modules["torchvision"], sys.modules["torchvision.ops"] = stub, ops
        return f"ultralytics TorchNMS (torchvision unusable: {str(e)[:80]})"


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help=".onnx or .pt")
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--frames", type=int, default=None, help="stop after N frames")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--skip", type=int, default=5, help="first frames left out of latencies")
    a = p.parse_args()
    import torch
    import ultralytics
    from ultralytics import YOLO

    nms = torchvision_or_stub()
    t0 = time.perf_counter()
    model = YOLO(str(a.model), task="pose")
    stamps: list[float] = []
    speeds: list[dict[str, float]] = []
    people: list[int] = []
    cpu: list[float] = []
    for r in model.predict(
        source=str(a.source), stream=True, imgsz=a.imgsz, device="cpu", verbose=False
    ):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        speeds.append(dict(r.speed))
        people.append(len(r.boxes) if r.boxes is not None else 0)
        if a.frames is not None and len(stamps) >= a.frames:
            break
    n = len(stamps)
    lat = speeds[a.skip :] if n > 2 * a.skip else speeds
    total = [s["preprocess"] + s["inference"] + s["postprocess"] for s in lat]
    result = {
        "frames": n,
        "fps": (n - 1) / (stamps[-1] - stamps[0]) if n > 1 else None,
        "latency_p50": pct(total, 50),
        "latency_p99": pct(total, 99),
        "infer_p50": pct([s["inference"] for s in lat], 50),
        "cpu_ms_per_frame": (cpu[-1] - cpu[0]) / (n - 1) * 1e3 if n > 1 else None,
        "pre_p50": pct([s["preprocess"] for s in lat], 50),
        "post_p50": pct([s["postprocess"] for s in lat], 50),
        "people_mean": sum(people) / n if n else None,
        "startup_s": stamps[0] - t0 if stamps else None,
        "ultralytics": ultralytics.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "nms": nms,
    }
    try:
        import onnxruntime

        result["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    print(json.dumps(result))


if __name__ == "__main__":
    main()
