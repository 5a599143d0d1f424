"""Static INT8 (QDQ) quantization of a YOLO ONNX model, calibrated on real frames.

Calibration frames go through the inference path's own ``LetterboxBuffer``, so the
ranges are those the deployed model sees. The decode step after the head's last convs
is found from the graph (``graph.find_head``) and kept in float. Activation type: U8S8
(uint8 activations, int8 weights) on x86, where ORT fuses QDQ convs into integer kernels
only for unsigned activations; S8S8 on ARM, where signed activations are the fast path.
"""

from __future__ import annotations

import contextlib
import io
import logging
import platform
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.detect.detector import sha256_file
from agent.detect.letterbox import PAD_VALUE, LetterboxBuffer
from agent.detect.metadata import KEY_ACTIVATIONS, KEY_PRECISION, KEY_RECIPE, parse_metadata
from agent.errors import ModelError
from agent.modeltools import media, onnxmeta
from agent.modeltools.graph import (
    HeadSplit,
    branch_of,
    class_convs,
    concat_scale_groups,
    feature_sizes,
    find_head,
    finest_scale,
    high_resolution_nodes,
    keypoint_convs,
    narrow_convs,
)
from agent.modeltools.progress import Progress

ACTIVATION_CHOICES = ("auto", "uint8", "int8")
METHODS = ("minmax", "percentile", "entropy")
KEY_WEIGHTS = "quant_weights"
_ARM = ("arm", "aarch64")


def auto_activations(machine: str | None = None) -> str:
    """``int8`` (S8S8) on ARM, ``uint8`` (U8S8) elsewhere (x86)."""
    m = (machine if machine is not None else platform.machine()).lower()
    return "int8" if m.startswith(_ARM) else "uint8"


@dataclass(frozen=True, slots=True)
class Recipe:
    """How to quantize. The defaults are the recipe the bundled models are built with."""

    activations: str = "uint8"
    per_channel: bool = True
    method: str = "percentile"
    percentile: float = 99.999
    reduce_range: bool = False
    #: convs with fewer input or output channels stay float (ORT's int8 GEMM loses to its
    #: FP32 NCHWc conv at such narrow shapes, e.g. the 3-channel stem); 0 quantizes all.
    min_conv_channels: int = 4
    preprocess: bool = False
    symmetric_activations: bool = False
    #: op types quantized beyond ORT's QDQ defaults (Conv, MatMul, Resize, MaxPool, ...):
    #: without them every SiLU runs DequantizeLinear -> float Sigmoid, Mul -> QuantizeLinear.
    extra_ops: tuple[str, ...] = ("Sigmoid", "Mul", "Add", "Concat")
    #: False leaves every Conv's output in float (quantized only where the next op reads
    #: it), so OpenVINO fuses bias, SiLU and the next quantization into the convolution:
    #: the OpenVINO recipe. onnxruntime's CPU provider only runs a conv in integers when its
    #: output is quantized too, so there such a model is slower than FP32.
    quantize_conv_outputs: bool = True
    #: op types left in float: ORT's uint8 Resize is slower than its float kernel plus the
    #: Dequantize/Quantize around it. (Softmax would not stay float: ORT fuses the
    #: DequantizeLinear -> Softmax -> QuantizeLinear it leaves into QLinearSoftmax anyway.)
    float_ops: tuple[str, ...] = ("Resize",)
    #: give each quantized Concat's inputs and output one scale (byte copies, no requantize)
    share_concat_scales: bool = True
    #: keep the decode step (after the head's last convs) in float. False only to show
    #: what naive full quantization does (every detection lost); never for a real model.
    keep_decode_float: bool = True
    #: leave the head's keypoint branch in float (but what ``quantize_finest_keypoints``
    #: quantizes): quantized, its last convs' INT8 output scale put keypoints on a ~7 px
    #: grid (1.5 % of the box height from FP32 at 640). Pose models only.
    float_keypoints: bool = True
    #: with ``float_keypoints``: the finest scale's keypoint branch (stride 8, 3/4 of the
    #: branch's work) is quantized but for its last conv, which alone sets the grid;
    #: measured as sharp as the whole branch in float, and 9 % faster (docs/models.md).
    quantize_finest_keypoints: bool = True
    #: leave the head's class branch in float: its scores decide which of neighbouring
    #: anchors (near-equal scores) survives NMS, and with it whose keypoints are published;
    #: quantized, INT8 often keeps another anchor than FP32, with its own pose. About 3 %
    #: of the compute; keypoints 25 % closer to FP32 (docs/models.md).
    float_classes: bool = True
    #: nodes whose output is at a stride of at most this stay float: the stem layers at
    #: the highest resolution on few channels (YOLO11: ``model.0``-``2``, strides 2 and 4),
    #: where quantization noise enters every later feature. Keypoints 20 % closer to FP32
    #: for 5 % of the INT8 time (docs/models.md); 0 quantizes them.
    float_stride: int = 4
    #: max frames per calibration pass (bounds the memory of collected activations).
    stride: int = 8

    def __post_init__(self) -> None:
        if self.activations not in ("uint8", "int8"):
            raise ValueError(f"activations must be uint8 or int8, got {self.activations!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.float_stride < 0:
            raise ValueError(f"float_stride must be >= 0, got {self.float_stride}")
        if self.stride < 1:
            raise ValueError(f"stride must be >= 1, got {self.stride}")

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra_ops"] = list(self.extra_ops)
        d["float_ops"] = list(self.float_ops)
        d["weights"] = "int8"
        d["format"] = "QDQ"
        if self.method != "percentile":
            del d["percentile"]
        if self.quantize_conv_outputs:  # the default: recorded only when off, so models
            del d["quantize_conv_outputs"]  # built before the option keep their bytes
        del d["stride"]
        # Recorded only when on, so files built before these options keep their bytes.
        if not (self.float_keypoints and self.quantize_finest_keypoints):
            del d["quantize_finest_keypoints"]
        if self.float_stride < 2:
            del d["float_stride"]
        if not self.float_classes:
            del d["float_classes"]
        return d


@dataclass(frozen=True, slots=True)
class CalibrationSet:
    """The calibration frames (BGR uint8, any size) and a path-free description of them."""

    frames: list[npt.NDArray[np.uint8]]
    description: dict[str, Any] = field(default_factory=dict)


def load_calibration(
    inputs: Sequence[str | Path], frames: int, *, progress: Progress | None = None
) -> CalibrationSet:
    """Up to ``frames`` frames: every still image, the rest spread evenly over the videos."""
    files = media.collect(inputs)
    images = [f for f in files if not f.is_video][:frames]
    videos = [f for f in files if f.is_video]
    budget = frames - len(images)
    per_video = [budget // len(videos) + (i < budget % len(videos)) for i in range(len(videos))]
    planned = [(f, [0]) for f in images] + [
        (f, media.even_indices(media.video_frame_count(f.path), n))
        for f, n in zip(videos, per_video, strict=True)
    ]
    out: list[npt.NDArray[np.uint8]] = []
    used: dict[Path, int] = {}
    for frame in media.iter_frames(planned):
        out.append(frame.image)
        used[frame.source] = used.get(frame.source, 0) + 1
        if progress is not None:
            progress.update()
    if not out:
        raise ModelError("no calibration frames could be read from the inputs")
    sources = [
        {
            "file": f.path.name,
            "sha256": sha256_file(f.path),
            "frames": used.get(f.path, 0),
            "sampling": "evenly spaced" if f.is_video else "whole image",
        }
        for f, _ in planned
    ]
    return CalibrationSet(out, {"frames": len(out), "sources": sources})


class FrameReader:
    """onnxruntime ``CalibrationDataReader`` over letterboxed frames (random access ranges).

    Duck-typed rather than subclassed: the ORT base class is untyped.
    """

    def __init__(
        self,
        frames: Sequence[npt.NDArray[np.uint8]],
        input_name: str,
        input_hw: tuple[int, int],
        progress: Progress | None = None,
    ) -> None:
        self._frames = frames
        self._input = input_name
        self._buffer = LetterboxBuffer(input_hw)
        self._progress = progress
        self._range: Iterator[int] = iter(range(len(frames)))

    def __len__(self) -> int:
        return len(self._frames)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._range = iter(range(start_index, min(end_index, len(self._frames))))

    def get_next(self) -> dict[str, npt.NDArray[np.float32]] | None:
        i = next(self._range, None)
        if i is None:
            return None
        self._buffer.apply(self._frames[i])
        if self._progress is not None:
            self._progress.update()
        # A copy: ORT may keep the input (a graph input can also be a calibrated output).
        return {self._input: self._buffer.tensor.astype(np.float32, copy=True)}


def _stride(total: int, limit: int) -> int:
    """Largest divisor of ``total`` not above ``limit`` (ORT wants equal passes)."""
    return max(d for d in range(1, min(total, limit) + 1) if total % d == 0)


@dataclass(frozen=True, slots=True)
class QuantizeReport:
    source: Path
    output: Path
    recipe: Recipe
    frames: int
    excluded: tuple[str, ...]
    boundary: tuple[str, ...]
    seconds: float


def _static_input(model: Any) -> tuple[str, tuple[int, int]]:
    inputs = [
        i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}
    ]
    if len(inputs) != 1:
        raise ModelError(f"expected one image input, the model has {len(inputs)}")
    dims = inputs[0].type.tensor_type.shape.dim
    if len(dims) != 4 or not all(d.HasField("dim_value") for d in dims[2:]):
        meta = parse_metadata(onnxmeta.read_metadata(model))
        if meta.input_hw is None:
            raise ModelError("model input has dynamic H/W and no input size in its metadata")
        return inputs[0].name, meta.input_hw
    return inputs[0].name, (int(dims[2].dim_value), int(dims[3].dim_value))


def _classes(model: Any) -> int:
    """The number of labels in the model's metadata; 0 when it names none."""
    labels = parse_metadata(onnxmeta.read_metadata(model)).labels
    return 0 if labels is None else len(labels)


def _keypoint_values(model: Any) -> int:
    """K x 3 (or K x 2) from the model's ``kpt_shape`` metadata; 0 for a detect model."""
    shape = parse_metadata(onnxmeta.read_metadata(model)).kpt_shape
    return 0 if shape is None else shape[0] * shape[1]


def _ort_arguments(
    model: Any, recipe: Recipe, frames: int, cache: Path, input_hw: tuple[int, int]
) -> tuple[dict[str, Any], list[str], HeadSplit]:
    """``quantize_static`` keyword arguments for ``recipe``, the float nodes, the head split."""
    from onnxruntime import quantization as q
    from onnxruntime.quantization.registry import QDQRegistry

    split = find_head(model)
    exclude = list(split.decode) if recipe.keep_decode_float else []
    exclude += narrow_convs(model, recipe.min_conv_channels)
    sizes = feature_sizes(model, input_hw)  # one shape inference for both rules below
    ends = keypoint_convs(model, split.boundary, _keypoint_values(model))
    if recipe.float_classes:
        scores = branch_of(model, class_convs(model, split.boundary, _classes(model), ends))
        exclude += [n for n in scores if n not in exclude]
    if recipe.float_keypoints:
        branch = branch_of(model, ends)
        if recipe.quantize_finest_keypoints:
            finest = set(finest_scale(model, branch, input_hw, sizes)) - set(ends)
            branch = tuple(n for n in branch if n not in finest)
        exclude += [n for n in branch if n not in exclude]
    stem = high_resolution_nodes(model, input_hw, recipe.float_stride, sizes)
    exclude += [n for n in stem if n not in exclude and n not in split.decode]
    present = {n.op_type for n in model.graph.node}
    op_types = sorted((present & set(QDQRegistry)) | set(recipe.extra_ops))
    extra: dict[str, Any] = {
        "ActivationSymmetric": recipe.symmetric_activations,
        "CalibStridedMinMax": _stride(frames, recipe.stride),
    }
    if recipe.method == "percentile":
        extra["CalibPercentile"] = recipe.percentile
    if not recipe.quantize_conv_outputs:
        extra["OpTypesToExcludeOutputQuantization"] = ["Conv"]
    methods = {
        "minmax": q.CalibrationMethod.MinMax,
        "percentile": q.CalibrationMethod.Percentile,
        "entropy": q.CalibrationMethod.Entropy,
    }
    kwargs = {
        "quant_format": q.QuantFormat.QDQ,
        "op_types_to_quantize": [t for t in op_types if t not in recipe.float_ops],
        "per_channel": recipe.per_channel,
        "reduce_range": recipe.reduce_range,
        "activation_type": (
            q.QuantType.QUInt8 if recipe.activations == "uint8" else q.QuantType.QInt8
        ),
        "weight_type": q.QuantType.QInt8,
        "nodes_to_exclude": exclude,
        "calibrate_method": methods[recipe.method],
        "extra_options": extra,
        "calibration_cache_path": str(cache),
    }
    return kwargs, exclude, split


def _int8_metadata(
    raw: dict[str, str],
    recipe: Recipe,
    calibration: CalibrationSet,
    input_hw: tuple[int, int],
    float_nodes: int,
) -> dict[str, str]:
    """The source model's metadata plus precision, activation type, recipe and provenance."""
    import onnx
    import onnxruntime

    prov = onnxmeta.provenance(raw)
    prov["quantization"] = {
        "recipe": recipe.describe(),
        "calibration": calibration.description,
        "preprocessing": f"letterbox to {input_hw[0]}x{input_hw[1]} (pad {PAD_VALUE}), "
        "BGR->RGB, /255",
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "float_nodes": float_nodes,
    }
    updates = {
        KEY_PRECISION: "int8",
        KEY_ACTIVATIONS: recipe.activations,
        KEY_WEIGHTS: "int8",
        KEY_RECIPE: onnxmeta.dumps(recipe.describe()),
        onnxmeta.KEY_PROVENANCE: onnxmeta.dumps(prov),
    }
    return onnxmeta.merge(raw, updates)


def quantize(
    model_path: Path,
    out_path: Path,
    calibration: CalibrationSet,
    recipe: Recipe,
    *,
    progress: Progress | None = None,
) -> QuantizeReport:
    """Quantize ``model_path`` into ``out_path`` (QDQ, head decode in float, metadata kept)."""
    import onnx
    from onnxruntime.quantization import quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    raw_meta = onnxmeta.read_metadata(onnxmeta.load(model_path))
    if raw_meta.get(KEY_PRECISION) == "int8":
        raise ModelError(f"{model_path} is already an INT8 model; quantize the FP32 one")
    name, input_hw = _static_input(onnxmeta.load(model_path))
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="edge-quant-")))
        work = model_path
        if recipe.preprocess:
            work = tmp / "pre.onnx"
            quant_pre_process(str(model_path), str(work), skip_symbolic_shape=True)
        model = onnx.load_model(str(work))
        cache = tmp / "ranges.json"
        kwargs, exclude, split = _ort_arguments(
            model, recipe, len(calibration.frames), cache, input_hw
        )
        reader = FrameReader(calibration.frames, name, input_hw, progress)
        raw_out = tmp / "int8.onnx"
        t0 = time.monotonic()
        stack.enter_context(_quiet_ort_hints())
        # The histogram calibrators print their progress to stdout; ours is on stderr.
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        quantize_static(str(work), str(raw_out), reader, **kwargs)
        if recipe.share_concat_scales:
            # Second pass from the cached ranges, widened so each Concat is a byte copy.
            in_int8 = {
                n.name
                for n in model.graph.node
                if n.op_type in kwargs["op_types_to_quantize"] and n.name not in exclude
            }
            _share_ranges(cache, concat_scale_groups(model, in_int8))
            quantize_static(str(work), str(raw_out), None, **kwargs)
        seconds = time.monotonic() - t0
        quantized = onnx.load_model(str(raw_out))
        meta = _int8_metadata(raw_meta, recipe, calibration, input_hw, len(exclude))
        onnxmeta.write_metadata(quantized, meta)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        partial = out_path.with_name(out_path.name + ".tmp")
        onnx.save_model(quantized, str(partial))
        partial.replace(out_path)
    return QuantizeReport(
        source=model_path,
        output=out_path,
        recipe=recipe,
        frames=len(calibration.frames),
        excluded=tuple(exclude),
        boundary=split.boundary,
        seconds=seconds,
    )


class _DropHints(logging.Filter):
    """Drops onnxruntime.quantization's "consider pre-processing" advice (root logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-process" not in record.getMessage()


@contextlib.contextmanager
def _quiet_ort_hints() -> Iterator[None]:
    root = logging.getLogger()
    hint = _DropHints()
    root.addFilter(hint)
    try:
        yield
    finally:
        root.removeFilter(hint)


def _share_ranges(cache: Path, groups: list[list[str]]) -> None:
    """Widen every tensor of each group to the group's union range in the ORT cache."""
    from onnxruntime.quantization.calibrate import load_tensors_data, save_tensors_data

    ranges = load_tensors_data(cache)
    for group in groups:
        members = [t for t in group if t in ranges]
        if len(members) < 2:
            continue
        low = min(float(np.min(ranges[t].range_value[0])) for t in members)
        high = max(float(np.max(ranges[t].range_value[1])) for t in members)
        for t in members:
            data = ranges[t]
            data.lowest = np.array(low, dtype=np.asarray(data.lowest).dtype)
            data.highest = np.array(high, dtype=np.asarray(data.highest).dtype)
    save_tensors_data(ranges, cache)
