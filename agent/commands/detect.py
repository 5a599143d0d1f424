"""`edge-agent detect`: run the detector on images and print or draw the detections."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from agent.commands.common import add_config_arg, setting_type, settings_from_args
from agent.cv import cv2
from agent.detect.inputs import build_detector
from agent.errors import ConfigError
from agent.regions.tiles import detect_tiled
from agent.render.draw import draw
from agent.settings import DetectorSettings, resolve_path

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
DEFAULT_IMAGES = ("assets/bus.jpg", "assets/zidane.jpg")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("detect", help="detect objects in images (files or directories)")
    p.add_argument(
        "inputs", nargs="*", help="image files or directories (default: bundled samples)"
    )
    p.add_argument(
        "--model",
        type=Path,
        default=None,
        help="ONNX model (default: detector.model, else the bundled 640 model)",
    )
    p.add_argument(
        "--draw", type=Path, default=None, metavar="OUT_DIR", help="write annotated images"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line and image")
    p.add_argument(
        "--conf",
        type=setting_type(DetectorSettings, "conf_threshold", "detector.conf_threshold"),
        default=None,
        help="override detector.conf_threshold (0..1)",
    )
    p.add_argument(
        "--tiles",
        action="store_true",
        help="also look at overlapping tiles, magnified 2x (large photos, small objects)",
    )
    p.add_argument(
        "--tile-px",
        type=int,
        default=None,
        help="tile side in pixels (default: half the model input)",
    )
    add_config_arg(p)
    p.set_defaults(handler=run)


def iter_images(inputs: list[str]) -> Iterator[tuple[str, Path]]:
    """(path as given, path) for each input; directories expand to their images, sorted."""
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.suffix.lower() in IMAGE_SUFFIXES:
                    yield str(child), child
        else:
            yield given, path


def run(args: argparse.Namespace) -> int:
    if args.tile_px is not None and not 32 <= args.tile_px <= 8192:
        raise ConfigError(f"--tile-px {args.tile_px}: must be in 32..8192")
    settings = settings_from_args(args)
    ds = settings.detector
    if args.conf is not None:
        ds = ds.model_copy(update={"conf_threshold": args.conf})
    # A photo is one whole look: the model best at whole frames unless one is named.
    detector = build_detector(ds, args.model or ds.model_for("whole"))
    inputs = args.inputs or [str(resolve_path(p)) for p in DEFAULT_IMAGES]
    if args.draw is not None:
        args.draw.mkdir(parents=True, exist_ok=True)
    failures = 0
    for given, path in iter_images(inputs):
        image = cv2.imread(str(path), cv2.IMREAD_COLOR) if path.is_file() else None
        if image is None:
            reason = "no such file" if not path.exists() else "not a readable image"
            print(f"edge-agent detect: error: {given}: {reason}", file=sys.stderr)
            failures += 1
            continue
        if args.tiles:
            dets, times, _looks = detect_tiled(detector, image, args.tile_px)
        else:
            result = detector.detect(image)
            dets, times = result.detections, result.times
        wh = [int(image.shape[1]), int(image.shape[0])]
        if args.json:
            line = {"image": given, "image_wh": wh, "detections": dets.to_dicts()}
            print(json.dumps(line, separators=(",", ":")), flush=True)
        else:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(dets.counts().items())) or "nothing"
            print(f"{given} ({wh[0]}x{wh[1]}): {counts} in {times.inference_ms:.1f} ms")
            for d in dets.to_dicts():
                box = ", ".join(f"{v:.0f}" for v in d["xyxy"])
                print(f"  {d['label']:<12} {d['score']:.2f}  [{box}]")
        if args.draw is not None:
            cv2.imwrite(str(args.draw / f"{path.stem}.jpg"), draw(image, dets))
    return 1 if failures else 0
