"""`edge-agent quantize`: static INT8 (QDQ) quantization calibrated on real frames."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from agent.modeltools.quantize import ACTIVATION_CHOICES, METHODS, Recipe

    d = Recipe()
    p = sub.add_parser(
        "quantize",
        help="quantize an FP32 ONNX model to INT8 (static QDQ, calibrated on real frames)",
        description="Static QDQ quantization with onnxruntime. Calibration frames go through "
        "the detector's own letterbox; the decode step after the head's last convs is found "
        "from the graph and kept in float. Labels, task, input size, name and version are "
        "carried over; precision=int8 and the activation type are written to the metadata.",
    )
    p.add_argument("--model", type=Path, required=True, help="FP32 ONNX model")
    p.add_argument(
        "--calib",
        nargs="+",
        required=True,
        metavar="DIR_OR_VIDEO",
        help="calibration images, directories of images, or videos (frames sampled evenly)",
    )
    p.add_argument("--out", type=Path, required=True, help="INT8 ONNX model to write")
    p.add_argument(
        "--activations",
        choices=ACTIVATION_CHOICES,
        default="auto",
        help="uint8 (U8S8, fast on x86), int8 (S8S8, fast on ARM), auto: by this machine",
    )
    p.add_argument(
        "--per-channel",
        action=argparse.BooleanOptionalAction,
        default=d.per_channel,
        help="per-channel weight scales (default: on)",
    )
    p.add_argument(
        "--calib-frames",
        type=int,
        default=64,
        metavar="N",
        help="calibration frames in all: every image, the rest spread over the videos (default 64)",
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        default=d.method,
        help=f"calibration method (default {d.method}, at the {d.percentile} percentile)",
    )
    p.add_argument("--reduce-range", action="store_true", help="7-bit weights (x86 without VNNI)")
    p.add_argument(
        "--preprocess", action="store_true", help="run onnxruntime's quant_pre_process first"
    )
    p.add_argument(
        "--min-conv-channels",
        type=int,
        default=d.min_conv_channels,
        metavar="C",
        help=f"convs with fewer input or output channels stay float (default "
        f"{d.min_conv_channels}: the 3-channel stem)",
    )
    p.add_argument(
        "--float-activations",
        action="store_true",
        help="leave Sigmoid/Mul/Add/Concat in float (ORT's default op set): slower on "
        "onnxruntime's CPU provider, faster on OpenVINO (the recipe of the *-int8-openvino "
        "models)",
    )
    p.add_argument(
        "--float-conv-outputs",
        action="store_true",
        help="leave each conv's output in float so OpenVINO fuses bias, SiLU and the next "
        "quantization into the conv (with --float-activations: the recipe of the "
        "*-int8-openvino models); far slower on onnxruntime's CPU provider",
    )
    p.add_argument(
        "--float-stride",
        type=int,
        default=d.float_stride,
        metavar="S",
        help=f"nodes whose output is at a stride of at most S stay float: the high-resolution "
        f"stem (default {d.float_stride}; 0 quantizes them)",
    )
    p.add_argument(
        "--all-keypoints-float",
        action="store_true",
        help="keep the whole keypoint branch in float, the finest scale's too (default: that "
        "scale is quantized but for its last conv)",
    )
    p.add_argument(
        "--quantize-classes",
        action="store_true",
        help="quantize the head's class branch too (default: float, so INT8 keeps the same "
        "anchors, and their keypoints, as FP32)",
    )
    p.add_argument(
        "--no-share-concat-scales",
        action="store_true",
        help="let Concat inputs keep their own scales (requantizing copies)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from agent.errors import ConfigError
    from agent.modeltools.progress import Progress
    from agent.modeltools.quantize import Recipe, auto_activations, load_calibration, quantize

    if args.calib_frames < 1:
        raise ConfigError("--calib-frames must be at least 1")
    if args.float_stride < 0:
        raise ConfigError(f"--float-stride {args.float_stride}: must be 0 or more")
    activations = auto_activations() if args.activations == "auto" else args.activations
    recipe = Recipe(
        activations=activations,
        per_channel=args.per_channel,
        method=args.method,
        reduce_range=args.reduce_range,
        preprocess=args.preprocess,
        min_conv_channels=args.min_conv_channels,
        extra_ops=() if args.float_activations else Recipe().extra_ops,
        quantize_conv_outputs=not args.float_conv_outputs,
        share_concat_scales=not args.no_share_concat_scales,
        quantize_finest_keypoints=not args.all_keypoints_float,
        float_classes=not args.quantize_classes,
        float_stride=args.float_stride,
    )
    # One progress line: reading the frames, then running them through the model.
    progress = Progress("quantize", 2 * args.calib_frames)
    calibration = load_calibration(args.calib, args.calib_frames, progress=progress)
    progress.total = 2 * len(calibration.frames)
    report = quantize(args.model, args.out, calibration, recipe, progress=progress)
    progress.close(
        f"quantize: wrote {report.output} ({recipe.activations} activations, "
        f"{'per-channel' if recipe.per_channel else 'per-tensor'} int8 weights, {recipe.method}, "
        f"{report.frames} calibration frames, {len(report.excluded)} nodes kept float) "
        f"in {report.seconds:.0f} s"
    )
    sys.stderr.flush()
    return 0
