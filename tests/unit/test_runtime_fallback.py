"""A provider that onnxruntime lists but cannot build (TensorRT without libnvinfer, CUDA
without its libraries) makes onnxruntime quietly build the session on the CPU instead.
The runtime must see that, log it, and move on to the next provider it was asked for,
not report a GPU provider it is not using."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent.detect import runtime as rt
from agent.errors import ProviderError

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "yolo11n-pose-320-int8.onnx"


@pytest.fixture
def gpu_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """This CPU-only onnxruntime behaves as onnxruntime-gpu does on a machine whose
    CUDA/TensorRT libraries are missing (seen on an H100 machine without libnvinfer): it
    lists the GPU providers, and a session asked for one comes up on the CPU provider."""
    listed = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    real = rt.ort.InferenceSession

    def session(source: Any, sess_options: Any = None, providers: Any = None, **kw: Any) -> Any:
        return real(source, sess_options=sess_options, providers=["CPUExecutionProvider"], **kw)

    monkeypatch.setattr(rt.ort, "get_available_providers", lambda: listed)
    monkeypatch.setattr(rt.ort, "InferenceSession", session)


@pytest.mark.usefixtures("gpu_listed")
def test_silent_cpu_fallback_moves_to_the_next_requested_provider() -> None:
    with capture_logs() as logs:
        r = rt.Runtime(MODEL, rt.SessionSpec(providers=("tensorrt", "cuda", "cpu"), threads=1))
    assert r.provider == "CPUExecutionProvider"
    assert r.session.get_providers()[0] == "CPUExecutionProvider"
    failed = [e for e in logs if e["event"] == "provider_failed"]
    assert [e["provider"] for e in failed] == [
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
    ]
    assert all("fell back to CPUExecutionProvider" in e["reason"] for e in failed)


@pytest.mark.usefixtures("gpu_listed")
def test_auto_ends_on_cpu_when_no_gpu_provider_really_loads() -> None:
    r = rt.Runtime(MODEL, rt.SessionSpec(providers=("auto",), threads=1))
    assert r.provider == "CPUExecutionProvider"


@pytest.mark.usefixtures("gpu_listed")
def test_only_a_provider_that_falls_back_is_a_clear_error() -> None:
    with pytest.raises(ProviderError) as e:
        rt.Runtime(MODEL, rt.SessionSpec(providers=("cuda",), threads=1))
    msg = str(e.value)
    assert "CUDAExecutionProvider could not be created" in msg
    assert "fell back to CPUExecutionProvider" in msg
    assert "\n" not in msg
