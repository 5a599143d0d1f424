"""Read and rewrite ONNX custom metadata (the ``metadata_props`` key/value strings)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import onnx

from agent.detect.metadata import (
    KEY_INPUT_HW,
    KEY_LABELS,
    KEY_NAME,
    KEY_PRECISION,
    KEY_TASK,
    KEY_VERSION,
    parse_metadata,
)
from agent.errors import ModelError

#: JSON object describing where the model came from (source, versions, calibration).
KEY_PROVENANCE = "provenance"
#: Keys that change on every export and would make two builds of the same model differ.
VOLATILE_KEYS = ("date",)


def read_metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def write_metadata(model: onnx.ModelProto, values: Mapping[str, str]) -> None:
    """Replace the model's metadata with ``values`` (in their order)."""
    del model.metadata_props[:]
    for key, value in values.items():
        entry = model.metadata_props.add()
        entry.key = key
        entry.value = value


def merge(
    existing: Mapping[str, str], updates: Mapping[str, str], remove: Iterable[str] = ()
) -> dict[str, str]:
    """``existing`` with ``updates`` applied (new keys appended) and ``remove`` dropped."""
    out = {k: v for k, v in existing.items() if k not in set(remove)}
    out.update(updates)
    return out


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON: equal values give equal bytes (reproducible builds)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def project_keys(
    raw: Mapping[str, str],
    *,
    name: str,
    version: int,
    precision: str,
    input_hw: tuple[int, int] | None = None,
) -> dict[str, str]:
    """Our metadata keys, derived from what the model already says (Ultralytics' keys).

    Labels come from ``labels`` or Ultralytics' ``names``; the task from ``task``; the
    input size from ``input_hw``/``imgsz`` unless given. Missing facts are an error: a
    model without labels or task cannot be published under the MQTT contract.
    """
    meta = parse_metadata(dict(raw))
    if meta.labels is None:
        raise ModelError("model metadata has no class names ('labels' or Ultralytics' 'names')")
    if meta.task is None:
        raise ModelError("model metadata has no 'task' (detect or pose)")
    hw = input_hw or meta.input_hw
    if hw is None:
        raise ModelError("model metadata has no input size ('input_hw' or 'imgsz')")
    return {
        KEY_LABELS: dumps(list(meta.labels)),
        KEY_TASK: meta.task,
        KEY_INPUT_HW: dumps([int(hw[0]), int(hw[1])]),
        KEY_NAME: name,
        KEY_VERSION: str(int(version)),
        KEY_PRECISION: precision,
    }


def provenance(raw: Mapping[str, str]) -> dict[str, Any]:
    """The provenance object of a model (empty when it has none)."""
    text = raw.get(KEY_PROVENANCE)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ModelError(f"model metadata {KEY_PROVENANCE!r} is not JSON") from e
    if not isinstance(value, dict):
        raise ModelError(f"model metadata {KEY_PROVENANCE!r} must be a JSON object")
    return value


def load(path: Path) -> onnx.ModelProto:
    try:
        return onnx.load_model(str(path))
    except Exception as e:  # onnx raises DecodeError, OSError, ValueError...
        raise ModelError(f"cannot read ONNX model {path}: {str(e).splitlines()[0][:200]}") from e


def rewrite_file(path: Path, values: Mapping[str, str], out: Path | None = None) -> None:
    """Replace the metadata of the ONNX file at ``path`` (in place, or into ``out``)."""
    model = load(path)
    write_metadata(model, values)
    target = out or path
    tmp = target.with_name(target.name + ".tmp")
    onnx.save_model(model, str(tmp))
    tmp.replace(target)
