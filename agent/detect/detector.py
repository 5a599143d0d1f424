"""Detector: letterbox -> runtime -> decode -> NMS, with per-stage timings."""

from __future__ import annotations

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
from agent.detect.letterbox import Letterbox, LetterboxBuffer
from agent.detect.metadata import KEY_RECIPE, ModelMeta, parse_metadata
from agent.detect.nms import nms
from agent.detect.providers import CPU
from agent.detect.runtime import Runtime, SessionSpec
from agent.detect.yolo import YoloLayout, decode, detect_layout
from agent.errors import ConfigError, ModelError

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


class Detector:
    """One model loaded on one session; ``detect(image)`` is not thread-safe (own buffers).

    For several frames in flight, make several Detectors (one session each).
    """

    def __init__(
        self,
        model_path: Path,
        spec: SessionSpec,
        *,
        thresholds: Thresholds | None = None,
        name: str | None = None,
        version: int | None = None,
    ) -> None:
        if not model_path.is_file():
            raise ModelError(f"model file not found: {model_path}")
        self.runtime = Runtime(model_path, spec)
        self.meta = parse_metadata(self.runtime.metadata)
        if len(self.runtime.output_shapes) < 1:
            raise ModelError(f"model {model_path} has no outputs")
        self.layout: YoloLayout = detect_layout(self.runtime.output_shapes[0], self.meta)
        self.labels: tuple[str, ...] = self.meta.labels or tuple(
            str(i) for i in range(self.layout.num_classes)
        )
        self.input_hw = _input_hw(self.runtime.input.shape, self.meta)
        self.info = ModelInfo(
            name=name or self.meta.name or _guess_name(model_path),
            version=version if version is not None else (self.meta.version or 1),
            sha256=sha256_file(model_path),
            precision=_guess_precision(model_path, self.meta),
            task=self.layout.task,
            labels=self.labels,
            input_hw=self.input_hw,
            provider=self.runtime.provider,
            path=str(model_path),
        )
        self._buffer = LetterboxBuffer(self.input_hw, self.runtime.input.dtype)
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
        t0 = time.perf_counter()
        box = self.preprocess(image)
        t1 = time.perf_counter()
        outputs = self.runtime.run(self.input_tensor)
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
