"""SAHI sliced prediction on chosen frames of a video: the accuracy anchor of issue 23.

    <sahi venv>/bin/python bench/sahi_predict.py --model M --source V --frames 20,60,...

Run by bench/regions.py in a virtualenv of its own (sahi 0.12.8, Ultralytics, CPU torch;
it imports nothing of the agent). ``get_sliced_prediction`` with 320x320 slices and 0.2
overlap (plus SAHI's default whole-image pass), Ultralytics on the given ONNX model, on
the CPU. Frames are decoded in order with OpenCV (0-based index, as the agent numbers
them). Prints one JSON object: person boxes (xyxy, score) per frame and the process CPU
time and wall time per frame (prediction only; decoding is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ultra_predict import torchvision_or_stub


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--frames", required=True, help="comma-separated 0-based frame indices")
    p.add_argument("--slice", type=int, default=320)
    p.add_argument("--overlap", type=float, default=0.2)
    p.add_argument("--conf", type=float, default=0.25)
    a = p.parse_args()
    import cv2
    import sahi
    from sahi import AutoDetectionModel
    from sahi.postprocess.backends import set_postprocess_backend
    from sahi.predict import get_sliced_prediction

    # SAHI merges slices with its numpy NMM (its choice on a CPU without numba), set
    # explicitly; Ultralytics gets its own torch NMS when torchvision cannot load.
    set_postprocess_backend("numpy")
    nms = torchvision_or_stub()
    wanted = sorted({int(x) for x in a.frames.split(",") if x.strip()})
    model = AutoDetectionModel.from_pretrained(
        model_type="ultralytics",
        model_path=str(a.model),
        confidence_threshold=a.conf,
        device="cpu",
    )
    cap = cv2.VideoCapture(str(a.source))
    out: dict[str, list[list[float]]] = {}
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    idx = -1
    warmed = False
    while wanted and idx < wanted[-1]:
        ok, bgr = cap.read()
        if not ok:
            break
        idx += 1
        if idx not in wanted:
            continue
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        if not warmed:  # first call loads the session: not a frame's cost
            get_sliced_prediction(
                rgb,
                model,
                slice_height=a.slice,
                slice_width=a.slice,
                overlap_height_ratio=a.overlap,
                overlap_width_ratio=a.overlap,
                verbose=0,
            )
            warmed = True
        c0, t0 = time.process_time(), time.perf_counter()
        r = get_sliced_prediction(
            rgb,
            model,
            slice_height=a.slice,
            slice_width=a.slice,
            overlap_height_ratio=a.overlap,
            overlap_width_ratio=a.overlap,
            verbose=0,
        )
        cpu_ms.append((time.process_time() - c0) * 1e3)
        wall_ms.append((time.perf_counter() - t0) * 1e3)
        out[str(idx)] = [
            [*(round(float(v), 1) for v in o.bbox.to_xyxy()), round(float(o.score.value), 3)]
            for o in r.object_prediction_list
            if o.category.name == "person" or o.category.id == 0
        ]
    import torch

    print(
        json.dumps(
            {
                "frames": out,
                "cpu_ms": cpu_ms,
                "wall_ms": wall_ms,
                "sahi": sahi.__version__,
                "torch": torch.__version__,
                "torch_threads": torch.get_num_threads(),
                "nms": nms,
            }
        )
    )


if __name__ == "__main__":
    main()
