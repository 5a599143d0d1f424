"""bench/latency.py: every file of --also is timed in the same rounds and gets its own ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_also_adds_a_ratio_per_file_and_refuses_what_it_cannot_time(tmp_path):
    out = tmp_path / "latency.json"
    cmd = [sys.executable, str(ROOT / "bench" / "latency.py"), "--rounds", "30", "--warmup",
           "1", "--sizes", "320", "--threads", "1", "--frames", "2", "--out", str(out)]  # fmt: skip
    arm = ROOT / "models" / "yolo11n-pose-320-int8-arm.onnx"
    proc = subprocess.run(
        [*cmd, "--also", str(arm)], check=False, capture_output=True, text=True, timeout=170
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    by = {r["candidate"]: r for r in report["ratios"]}
    assert set(by) == {"int8", arm.name}
    for r in by.values():
        assert r["size"] == 320 and r["threads"] == 1 and r["int8_ms"] > 0
        assert r["speedup"] == round(r["fp32_ms"] / r["int8_ms"], 2)
    assert {r["precision"] for r in report["results"]} == {"fp32", "int8", arm.name}
    assert f"320 x 1 thread(s) ({arm.name}):" in proc.stdout
    # A 640 file with only --sizes 320, and a missing file: refused, naming the file.
    big = ROOT / "models" / "yolo11n-pose-640-int8.onnx"
    for also, why in ((big, "not one of --sizes"), (tmp_path / "none.onnx", "not found")):
        bad = subprocess.run(
            [*cmd, "--also", str(also)], check=False, capture_output=True, text=True
        )
        assert bad.returncode != 0 and why in bad.stderr and str(also) in bad.stderr
