"""From detector settings to what a detector is built with: session spec, thresholds, files.

Shared by the running process and the one-shot commands, so both read the settings alike.
"""

from __future__ import annotations

from pathlib import Path

from agent.detect.detector import Detector, Thresholds, model_file_problem
from agent.detect.runtime import SessionSpec
from agent.errors import ConfigError
from agent.settings import DetectorSettings, resolve_path


def session_spec(ds: DetectorSettings, threads: int | None = None) -> SessionSpec:
    return SessionSpec(
        providers=tuple(ds.providers),
        threads=threads if threads is not None else ds.threads,
        provider_options={k: dict(v) for k, v in ds.provider_options.items()},
    )


def thresholds(ds: DetectorSettings) -> Thresholds:
    return Thresholds(
        conf=ds.conf_threshold,
        iou=ds.iou_threshold,
        max_det=ds.max_det,
        classes=tuple(ds.classes) if ds.classes is not None else None,
    )


def provider_models(ds: DetectorSettings) -> dict[str, Path]:
    """``detector.provider_models`` (keys are full provider names) with resolved paths."""
    models: dict[str, Path] = {}
    for provider, path in ds.provider_models.items():
        resolved = resolve_path(path)
        problem = model_file_problem(resolved)
        if problem is not None:
            raise ConfigError(
                f"detector.provider_models.{provider}: {resolved} {problem} "
                "(name an .onnx file of the configured model, or remove the entry)"
            )
        models[provider] = resolved
    return models


def build_detector(
    ds: DetectorSettings, model: Path | None = None, *, any_size: bool = False
) -> Detector:
    """The detector of ``model``, else the one the agent runs (``any_size``: region sheets)."""
    path = resolve_path(model if model is not None else ds.live_model)
    return Detector(path, session_spec(ds), thresholds=thresholds(ds), any_size=any_size)
