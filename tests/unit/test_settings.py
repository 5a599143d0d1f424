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
