"""Where the settings find bundled files."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.settings import DEFAULT_MODEL, resolve_path


def test_bundled_files_are_found_beside_an_installed_virtualenv(tmp_path, monkeypatch):
    """A service install (install.sh) puts the package in PREFIX/venv and the bundled
    models in PREFIX/models, and names no model: the per-look defaults resolve there."""
    (tmp_path / "models").mkdir()
    (tmp_path / DEFAULT_MODEL).write_bytes(b"onnx")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setattr("agent.settings.PROJECT_ROOT", tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path / "models")
    assert resolve_path(DEFAULT_MODEL) == tmp_path / DEFAULT_MODEL
    assert resolve_path("models/nosuch.onnx") == Path("models/nosuch.onnx")


def test_the_coarse_looks_model_is_chosen_in_one_place():
    """Region mode with no model named: coarse looks take the bundled 640 file beside the
    sheets' 320; a named model, or whole frames, leave them to the one model."""
    from agent.settings import DetectorSettings

    coarse = DetectorSettings().coarse_model
    assert coarse is not None and coarse.name == "yolo11n-pose-640-int8.onnx"
    assert DetectorSettings(model="models/yolo11n-pose-320-int8.onnx").coarse_model is None
    assert DetectorSettings(regions="full").coarse_model is None
