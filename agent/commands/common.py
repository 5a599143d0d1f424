"""Helpers shared by subcommands: config loading, detector construction."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.detect.detector import Detector, Thresholds
from agent.detect.runtime import SessionSpec
from agent.errors import ConfigError
from agent.settings import AgentSettings, DetectorSettings, load_settings, resolve_path


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML config (default: configs/agent.yaml); env EDGE_AGENT__* overrides it",
    )


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    return load_settings(args.config)


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
        if not resolved.is_file():
            raise ConfigError(
                f"detector.provider_models.{provider}: {resolved} not found "
                "(name an .onnx file of the configured model, or remove the entry)"
            )
        models[provider] = resolved
    return models


def build_detector(ds: DetectorSettings, model: Path | None = None) -> Detector:
    path = resolve_path(model if model is not None else ds.model)
    return Detector(path, session_spec(ds), thresholds=thresholds(ds))
