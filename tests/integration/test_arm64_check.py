"""The arm64 check (scripts/arm64-check.sh) end to end, under qemu-user emulation.

Slow (tens of minutes) and needs root, debootstrap, qemu-user-static and network for the
first debootstrap and pip: skipped unless EDGE_AGENT_ARM64_CHECK=1 is set. Run it with
``sudo EDGE_AGENT_ARM64_CHECK=1 .venv/bin/python -m pytest -q
tests/integration/test_arm64_check.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("EDGE_AGENT_ARM64_CHECK") != "1",
        reason="emulated arm64 check: set EDGE_AGENT_ARM64_CHECK=1 (root, tens of minutes)",
    ),
]


@pytest.mark.timeout(5400)
def test_arm64_check_passes():
    """On arm64 the checkout installs, detects like x86, publishes and passes its gates."""
    proc = subprocess.run(
        [str(ROOT / "scripts" / "arm64-check.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=5300,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for step in ("install: ok", "detect: ok", "run: ok", "systemd verify: ok", "evaluate: ok"):
        assert f"== {step}" in out, step
