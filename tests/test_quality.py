"""Lint, format and strict typing are part of the test suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "argv",
    [
        (sys.executable, "-m", "ruff", "check", "."),
        (sys.executable, "-m", "ruff", "format", "--check", "."),
        (sys.executable, "-m", "mypy", "--strict", "agent"),
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_tool_passes(argv):
    """The tool reports no problems on the whole tree."""
    proc = _run(*argv)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
