"""Helpers shared by subcommands: config loading, detector construction."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from agent.detect.detector import Detector, Thresholds
from agent.detect.runtime import SessionSpec, canonical_provider
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


def provider_keys(section: str, names: Iterable[str]) -> dict[str, str]:
    """Canonical provider name for each key of ``detector.<section>``, checked.

    The runtime looks a provider's entry up by its full name, so a misspelt key would match
    no provider and its entry would silently never apply; two keys for one provider would
    silently keep the last. Both stop the start with a one-line ConfigError naming the key.
    """
    canonical: dict[str, str] = {}
    for name in names:
        provider = canonical_provider(name)
        if not provider.endswith("ExecutionProvider"):
            raise ConfigError(
                f"detector.{section}.{name}: unknown provider (use a short name such "
                "as openvino or cuda, or a full one such as OpenVINOExecutionProvider)"
            )
        if provider in canonical.values():
            raise ConfigError(
                f"detector.{section}.{name}: {provider} is named twice (keep one entry)"
            )
        canonical[name] = provider
    return canonical


def session_spec(ds: DetectorSettings, threads: int | None = None) -> SessionSpec:
    keys = provider_keys("provider_options", ds.provider_options)
    return SessionSpec(
        providers=tuple(ds.providers),
        threads=threads if threads is not None else ds.threads,
        provider_options={keys[k]: dict(v) for k, v in ds.provider_options.items()},
    )


def thresholds(ds: DetectorSettings) -> Thresholds:
    return Thresholds(
        conf=ds.conf_threshold,
        iou=ds.iou_threshold,
        max_det=ds.max_det,
        classes=tuple(ds.classes) if ds.classes is not None else None,
    )


def provider_models(ds: DetectorSettings) -> dict[str, Path]:
    """``detector.provider_models`` with canonical provider names and resolved paths."""
    keys = provider_keys("provider_models", ds.provider_models)
    models: dict[str, Path] = {}
    for name, path in ds.provider_models.items():
        provider = keys[name]
        resolved = resolve_path(path)
        if not resolved.is_file():
            raise ConfigError(
                f"detector.provider_models.{name}: {resolved} not found "
                "(name an .onnx file of the configured model, or remove the entry)"
            )
        models[provider] = resolved
    return models


def build_detector(ds: DetectorSettings, model: Path | None = None) -> Detector:
    path = resolve_path(model if model is not None else ds.model)
    return Detector(path, session_spec(ds), thresholds=thresholds(ds))
