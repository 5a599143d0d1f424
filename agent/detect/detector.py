"""Detector: letterbox -> runtime -> decode -> NMS, with per-stage timings."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.detect.detections import Detections
from agent.detect.flexible import Flexible, flexible
from agent.detect.letterbox import Letterbox, LetterboxBuffer, SheetBuffer
from agent.detect.metadata import KEY_RECIPE, ModelMeta, parse_metadata
from agent.detect.nms import nms
from agent.detect.runtime import Runtime, SessionSpec, cpu_first
from agent.detect.yolo import YoloLayout, decode, detect_layout
from agent.errors import ConfigError, ModelError
from agent.provider_names import CPU

DEFAULT_INPUT = 640


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What a loaded model is, as the `model` topic and every DetectionMessage report it."""

    name: str
    version: int
    sha256: str
    precision: str
    task: str
    labels: tuple[str, ...]
    input_hw: tuple[int, int]
    provider: str
    path: str


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Post-processing settings; hot-reloadable (a new instance replaces the old)."""

    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 100
    classes: tuple[str | int, ...] | None = None


@dataclass(frozen=True, slots=True)
class StageTimes:
    preprocess_ms: float
    inference_ms: float
    postprocess_ms: float


@dataclass(frozen=True, slots=True)
class DetectResult:
    detections: Detections
    times: StageTimes


def model_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a model file ("not found", "is a directory", ...), or None.

    ORT's own words for these are misleading: an empty file is "No graph was found in the
    protobuf", and a directory fails the caller's is_file() as "not found".
    """
    if path.is_dir():
        return "is a directory, not an .onnx file"
    if not path.exists():
        return "not found"
    if not path.is_file():
        return "is not a regular file"
    if path.stat().st_size == 0:
        return "is empty: the file is 0 bytes"
    return None


def check_model_file(path: Path) -> None:
    """ModelError naming why ``path`` cannot be a model file, before ORT is asked."""
    problem = model_file_problem(path)
    if problem == "not found":
        raise ModelError(f"model file not found: {path}")
    if problem is not None:
        raise ModelError(f"model {path} {problem}")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _guess_precision(path: Path, meta: ModelMeta) -> str:
    if meta.precision:
        return meta.precision
    return "int8" if "int8" in path.name.lower() else "fp32"


def _guess_name(path: Path) -> str:
    stem = re.sub(r"[-_](fp32|fp16|int8)$", "", path.stem)
    return stem or "model"


def describe_model(path: Path) -> tuple[str, int, str]:
    """(name, version, sha256) of a model file from its metadata, without a session."""
    import onnx

    try:
        proto = onnx.load_model(str(path), load_external_data=False)
    except Exception as e:
        raise ModelError(f"cannot read model {path}: {str(e).splitlines()[0][:200]}") from e
    meta = parse_metadata({p.key: p.value for p in proto.metadata_props})
    return meta.name or _guess_name(path), meta.version or 1, sha256_file(path)


def provider_fit_hint(metadata: Mapping[str, str], provider: str) -> str | None:
    """Why an INT8 model made by ``edge-agent quantize`` is slow on ``provider``, if it is.

    The OpenVINO recipe (``--float-activations --float-conv-outputs``) leaves every SiLU and
    every conv output in float: OpenVINO fuses them into the convolutions, onnxruntime's CPU
    provider cannot run such a conv in integers at all (about 2.8x slower than the default
    recipe there; SiLU alone in float: about 1.3-1.8x; docs/models.md).
    """
    try:
        recipe = json.loads(metadata.get(KEY_RECIPE) or "{}")
    except ValueError:
        return None
    if provider != CPU or not isinstance(recipe, dict):
        return None
    extra = recipe.get("extra_ops")
    silu = isinstance(extra, list) and "Sigmoid" not in extra
    if recipe.get("quantize_conv_outputs") is False:
        what, slower = ("SiLU and conv outputs" if silu else "conv outputs"), "about 2.8x"
    elif silu:
        what, slower = "SiLU", "about 1.3-1.8x"
    else:
        return None
    return (
        f"this INT8 model is quantized for OpenVINO ({what} in float) and runs {slower} slower on "
        "the CPU provider than one quantized without --float-activations/--float-conv-outputs "
        "(the bundled *-int8.onnx)"
    )


def _input_hw(shape: Sequence[int | str | None], meta: ModelMeta) -> tuple[int, int]:
    if len(shape) != 4:
        raise ModelError(f"model input must be NCHW, got shape {list(shape)}")
    h, w = shape[2], shape[3]
    if isinstance(h, int) and isinstance(w, int):
        return h, w
    return meta.input_hw or (DEFAULT_INPUT, DEFAULT_INPUT)  # dynamic axes


@functools.lru_cache(maxsize=2)
def any_size_model(path: Path, sha256: str) -> Flexible | None:
    """``path``'s model made to take any input size (see ``agent.detect.flexible``), once
    per file and content (``sha256`` is the cache key's): a model's workers share it."""
    return flexible(path.read_bytes(), str(path))


class Detector:
    """One model loaded on one session; ``detect(image)`` is not thread-safe (own buffers).

    For several frames in flight, make several Detectors (one session each). ``any_size``
    (region mode, CPU provider): the session takes sheets of any size that is a multiple
    of the model's stride (``detect_exact``), where the model allows it.
    """

    def __init__(
        self,
        model_path: Path,
        spec: SessionSpec,
        *,
        thresholds: Thresholds | None = None,
        name: str | None = None,
        version: int | None = None,
        any_size: bool = False,
    ) -> None:
        check_model_file(model_path)
        sha256 = sha256_file(model_path)
        flex = any_size_model(model_path, sha256) if any_size and cpu_first(spec) else None
        #: Sides of the images ``detect_exact`` takes are multiples of this (None: it
        #: takes the model's own input size only).
        self.sheet_stride = flex.stride if flex is not None else None
        self.runtime = Runtime(flex.model if flex is not None else model_path, spec)
        self.meta = parse_metadata(self.runtime.metadata)
        if len(self.runtime.output_shapes) < 1:
            raise ModelError(f"model {model_path} has no outputs")
        out_shape = flex.output_shape if flex is not None else self.runtime.output_shapes[0]
        self.layout: YoloLayout = detect_layout(out_shape, self.meta)
        self.labels: tuple[str, ...] = self.meta.labels or tuple(
            str(i) for i in range(self.layout.num_classes)
        )
        shape = self.runtime.input.shape if flex is None else (1, 3, *flex.input_hw)
        self.input_hw = _input_hw(shape, self.meta)
        self.info = ModelInfo(
            name=name or self.meta.name or _guess_name(model_path),
            version=version if version is not None else (self.meta.version or 1),
            sha256=sha256,
            precision=_guess_precision(model_path, self.meta),
            task=self.layout.task,
            labels=self.labels,
            input_hw=self.input_hw,
            provider=self.runtime.provider,
            path=str(model_path),
        )
        self._buffer = LetterboxBuffer(self.input_hw, self.runtime.input.dtype)
        self._sheets = SheetBuffer(self.runtime.input.dtype)
        self.thresholds = thresholds or Thresholds()

    @property
    def thresholds(self) -> Thresholds:
        return self._thresholds

    @thresholds.setter
    def thresholds(self, value: Thresholds) -> None:
        self._allowed = self._resolve_classes(value.classes)
        self._thresholds = value

    def check_thresholds(self, value: Thresholds) -> None:
        """Raise ConfigError if ``value`` names classes this model does not have."""
        self._resolve_classes(value.classes)

    def _resolve_classes(
        self, classes: tuple[str | int, ...] | None
    ) -> npt.NDArray[np.int32] | None:
        if classes is None:
            return None
        ids: list[int] = []
        for c in classes:
            if isinstance(c, int):
                if not 0 <= c < len(self.labels):
                    raise ConfigError(
                        f"detector.classes: class id {c} out of range 0..{len(self.labels) - 1}"
                    )
                ids.append(c)
            elif c in self.labels:
                ids.append(self.labels.index(c))
            else:
                known = ", ".join(self.labels[:10]) + ("..." if len(self.labels) > 10 else "")
                raise ConfigError(f"detector.classes: unknown label {c!r} (model has: {known})")
        return np.array(sorted(set(ids)), dtype=np.int32)

    def warmup(self, runs: int = 2) -> None:
        image = np.full((self.input_hw[0], self.input_hw[1], 3), 114, np.uint8)
        for _ in range(runs):
            self.detect(image)

    def infer_raw(self, image: npt.NDArray[np.uint8]) -> list[npt.NDArray[np.float32]]:
        """The model's raw outputs for one BGR image (letterboxed), before any decoding."""
        self.preprocess(image)
        return self.runtime.run(self.input_tensor)

    def preprocess(self, image: npt.NDArray[np.uint8]) -> Letterbox:
        """Letterbox one BGR image into ``input_tensor``; how it was fitted."""
        return self._buffer.apply(image)

    @property
    def input_tensor(self) -> npt.NDArray[np.floating]:
        """The model-input tensor ``preprocess`` writes (reused: one per detector)."""
        return self._buffer.tensor

    def detect(self, image: npt.NDArray[np.uint8]) -> DetectResult:
        """Detections on one BGR uint8 image, in its own pixel coordinates."""
        return self._detect(image, self._buffer)

    def detect_exact(self, image: npt.NDArray[np.uint8]) -> DetectResult:
        """Detections on an image the model takes at its own size (a region sheet): its
        sides are multiples of ``sheet_stride``, or it has the model's input size."""
        hw = (int(image.shape[0]), int(image.shape[1]))
        stride = self.sheet_stride
        if hw != self.input_hw and (stride is None or hw[0] % stride or hw[1] % stride):
            raise ValueError(f"this model cannot take a {hw[0]}x{hw[1]} input")
        return self._detect(image, self._sheets)

    def _detect(
        self, image: npt.NDArray[np.uint8], buffer: LetterboxBuffer | SheetBuffer
    ) -> DetectResult:
        t0 = time.perf_counter()
        box = buffer.apply(image)
        t1 = time.perf_counter()
        outputs = self.runtime.run(buffer.tensor)
        t2 = time.perf_counter()
        dets = self.postprocess(outputs, box)
        t3 = time.perf_counter()
        return DetectResult(dets, StageTimes((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3))

    def postprocess(self, outputs: list[npt.NDArray[np.float32]], box: Letterbox) -> Detections:
        """YOLO decode, NMS and the mapping back to source pixels of one frame's outputs."""
        th = self._thresholds
        cand = decode(
            outputs[0],
            self.layout,
            conf_threshold=th.conf,
            allowed_classes=self._allowed,
        )
        keep = nms(cand.xyxy, cand.score, cand.class_id, iou_threshold=th.iou, max_det=th.max_det)
        kp = None
        if cand.keypoints is not None:
            kp = cand.keypoints[keep]
            kp[..., :2] = box.xy_to_source(kp[..., :2])
        class_id = cand.class_id[keep]
        return Detections(
            xyxy=box.xyxy_to_source(cand.xyxy[keep]),
            score=cand.score[keep],
            class_id=class_id,
            labels=tuple(self.labels[i] for i in class_id.tolist()),
            keypoints=kp,
        )
