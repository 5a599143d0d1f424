"""Read what a YOLO ONNX model says about itself (labels, task, keypoints, input size)."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from agent.errors import ModelError

#: Metadata keys this project writes (export/quantize); Ultralytics' own keys are read too.
KEY_LABELS = "labels"
KEY_TASK = "task"
KEY_INPUT_HW = "input_hw"
KEY_NAME = "model_name"
KEY_VERSION = "model_version"
KEY_PRECISION = "precision"
KEY_ACTIVATIONS = "quant_activations"
KEY_RECIPE = "quant_recipe"

TASKS = ("detect", "pose")


@dataclass(frozen=True, slots=True)
class ModelMeta:
    """Model facts from ONNX metadata; None where the model does not say."""

    task: str | None
    labels: tuple[str, ...] | None
    kpt_shape: tuple[int, int] | None
    input_hw: tuple[int, int] | None
    name: str | None
    version: int | None
    precision: str | None


def _parse(value: str) -> Any:
    """Parse JSON, falling back to a Python literal (Ultralytics writes dict reprs)."""
    try:
        return json.loads(value)
    except ValueError:
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError) as e:
            raise ModelError(f"model metadata value is not parseable: {value[:60]!r}") from e


def _labels(raw: dict[str, str]) -> tuple[str, ...] | None:
    if KEY_LABELS in raw:
        value = _parse(raw[KEY_LABELS])
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ModelError("model metadata 'labels' must be a JSON list of strings")
    if "names" in raw:
        names = _parse(raw["names"])
        if isinstance(names, dict):
            return tuple(str(names[k]) for k in sorted(names, key=int))
        if isinstance(names, list):
            return tuple(str(n) for n in names)
    return None


def _pair(raw: dict[str, str], *keys: str) -> tuple[int, int] | None:
    for key in keys:
        if key in raw:
            value = _parse(raw[key])
            if isinstance(value, int):
                return value, value
            if isinstance(value, (list, tuple)) and len(value) == 2:
                return int(value[0]), int(value[1])
            raise ModelError(f"model metadata {key!r} must be two integers, got {value!r}")
    return None


def parse_metadata(raw: dict[str, str]) -> ModelMeta:
    """Turn an ONNX custom metadata map into ``ModelMeta``."""
    task = raw.get(KEY_TASK)
    if task is not None and task not in TASKS:
        raise ModelError(f"model task {task!r} is not supported (supported: {', '.join(TASKS)})")
    version = raw.get(KEY_VERSION)
    return ModelMeta(
        task=task,
        labels=_labels(raw),
        kpt_shape=_pair(raw, "kpt_shape"),
        input_hw=_pair(raw, KEY_INPUT_HW, "imgsz"),
        name=raw.get(KEY_NAME),
        version=int(version) if version is not None and version.isdigit() else None,
        precision=raw.get(KEY_PRECISION),
    )
