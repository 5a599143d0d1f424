"""Provider defaults, the 'auto' candidate list, and the detection comparison rule."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.detect.detections import Detections
from agent.detect.providers import cache_root, default_provider_options, with_defaults
from agent.detect.runtime import SessionSpec, resolve_providers, session_provider_options
from agent.detect.select import Tolerance, cache_key, candidate_providers, compare_detections

ORT_HERE = ["AzureExecutionProvider", "CPUExecutionProvider"]


def test_auto_never_picks_azure():
    """'auto' resolves to local providers only: Azure is not in the preference list."""
    assert resolve_providers(["auto"], ORT_HERE) == ["CPUExecutionProvider"]
    assert candidate_providers(SessionSpec(), ORT_HERE) == ("CPUExecutionProvider",)


def test_explicit_azure_is_still_not_a_benchmark_candidate():
    """Even named explicitly, Azure (remote inference) is left out of the measurement."""
    spec = SessionSpec(providers=("AzureExecutionProvider", "cpu"))
    assert candidate_providers(spec, ORT_HERE) == ("CPUExecutionProvider",)


def test_auto_orders_openvino_before_cpu():
    """With onnxruntime-openvino installed, 'auto' tries OpenVINO first."""
    avail = ["OpenVINOExecutionProvider", "CPUExecutionProvider"]
    assert resolve_providers(["auto"], avail) == avail


def test_openvino_defaults(tmp_path):
    """OpenVINO gets CPU/FP32/one stream, no thread pinning and a compiled-model cache."""
    opts = default_provider_options("OpenVINOExecutionProvider", cache_dir=tmp_path)
    assert opts == {
        "device_type": "CPU",
        "precision": "FP32",
        "num_streams": "1",
        "load_config": json.dumps({"CPU": {"ENABLE_CPU_PINNING": "NO"}}),
        "cache_dir": str(tmp_path / "openvino"),
    }
    bare = default_provider_options("OpenVINOExecutionProvider", cache_dir=None)
    assert "cache_dir" not in bare and "num_of_threads" not in bare


def test_openvino_pinning_default_only_for_the_cpu_device(tmp_path):
    """load_config holds CPU plugin properties: left out when the operator picks a GPU,
    kept as the operator wrote it when they set their own."""
    gpu = with_defaults(
        {"OpenVINOExecutionProvider": {"device_type": "GPU"}},
        ["OpenVINOExecutionProvider"],
        cache_dir=tmp_path,
    )["OpenVINOExecutionProvider"]
    assert "load_config" not in gpu and gpu["precision"] == "FP32"
    own = with_defaults(
        {"OpenVINOExecutionProvider": {"load_config": "{}"}},
        ["OpenVINOExecutionProvider"],
        cache_dir=tmp_path,
    )["OpenVINOExecutionProvider"]
    assert own["load_config"] == "{}"


def test_openvino_threads_follow_each_session():
    """Each session's thread budget reaches OpenVINO's own pool; an operator's value wins."""
    ov = "OpenVINOExecutionProvider"
    spec = SessionSpec(providers=(ov,), threads=1, provider_options={ov: {"device_type": "CPU"}})
    assert session_provider_options(spec, ov) == {"device_type": "CPU", "num_of_threads": "1"}
    two = replace(spec, threads=2)
    assert session_provider_options(two, ov)["num_of_threads"] == "2"
    own = replace(spec, provider_options={ov: {"num_of_threads": "4"}})
    assert session_provider_options(own, ov)["num_of_threads"] == "4"
    unset = replace(spec, threads=None)
    assert "num_of_threads" not in session_provider_options(unset, ov)
    cpu = SessionSpec(providers=("cpu",), threads=1)
    assert session_provider_options(cpu, "CPUExecutionProvider") == {}


def test_tensorrt_defaults_cache_engines(tmp_path):
    """TensorRT keeps built engines and timing caches across restarts."""
    opts = default_provider_options("TensorrtExecutionProvider", cache_dir=tmp_path)
    assert opts["trt_engine_cache_enable"] == "True"
    assert opts["trt_engine_cache_path"] == str(tmp_path / "tensorrt")
    assert default_provider_options("CPUExecutionProvider", cache_dir=tmp_path) == {}


def test_operator_options_win_and_cache_dirs_exist(tmp_path):
    """Keys set in detector.provider_options override defaults; cache dirs are created."""
    merged = with_defaults(
        {"OpenVINOExecutionProvider": {"device_type": "GPU"}, "CUDAExecutionProvider": {"x": 1}},
        ["OpenVINOExecutionProvider", "CPUExecutionProvider"],
        cache_dir=tmp_path,
    )
    assert merged["OpenVINOExecutionProvider"]["device_type"] == "GPU"
    assert merged["OpenVINOExecutionProvider"]["precision"] == "FP32"
    assert merged["CUDAExecutionProvider"] == {"x": 1}
    assert "CPUExecutionProvider" not in merged
    assert (tmp_path / "openvino").is_dir()


def test_cache_root_prefers_systemd_cache_directory(tmp_path):
    """$CACHE_DIRECTORY (systemd CacheDirectory=) wins over <state_dir>/cache."""
    assert cache_root(tmp_path, env={}) == tmp_path / "cache"
    assert cache_root(tmp_path, env={"CACHE_DIRECTORY": "/var/cache/x:/y"}) == Path("/var/cache/x")


def test_cache_key_covers_every_condition():
    """The cache key changes with model, provider set, onnxruntime version and options."""
    spec = SessionSpec(threads=2)
    base = cache_key("aa", ["CPUExecutionProvider", "X"], "1.0", spec)
    assert base == cache_key("aa", ["X", "CPUExecutionProvider"], "1.0", spec)
    variants = [
        cache_key("bb", ["CPUExecutionProvider", "X"], "1.0", spec),
        cache_key("aa", ["CPUExecutionProvider"], "1.0", spec),
        cache_key("aa", ["CPUExecutionProvider", "X"], "1.1", spec),
        cache_key("aa", ["CPUExecutionProvider", "X"], "1.0", SessionSpec(threads=4)),
        cache_key(
            "aa",
            ["CPUExecutionProvider", "X"],
            "1.0",
            SessionSpec(threads=2, provider_options={"X": {"precision": "FP16"}}),
        ),
    ]
    assert len({base, *variants}) == len(variants) + 1


def _dets(rows: list[tuple[str, float, tuple[float, float, float, float]]]) -> Detections:
    labels = tuple(r[0] for r in rows)
    ids = {"person": 0, "car": 2}
    return Detections(
        xyxy=np.array([r[2] for r in rows], np.float32).reshape(-1, 4),
        score=np.array([r[1] for r in rows], np.float32),
        class_id=np.array([ids[n] for n in labels], np.int32),
        labels=labels,
    )


BOX = (100.0, 50.0, 300.0, 450.0)
NEAR = (104.0, 52.0, 303.0, 455.0)  # IoU ~0.95 with BOX
FAR = (160.0, 50.0, 360.0, 450.0)  # IoU ~0.54 with BOX


@pytest.mark.parametrize(
    ("ref", "got", "why"),
    [
        ([("person", 0.9, BOX)], [("person", 0.9, BOX)], None),
        ([("person", 0.9, BOX)], [("person", 0.85, NEAR)], None),
        ([], [], None),
        # within score_abs of the 0.25 threshold: may exist on one side only
        ([("person", 0.9, BOX), ("car", 0.28, FAR)], [("person", 0.9, BOX)], None),
        ([("person", 0.9, BOX)], [("person", 0.9, BOX), ("car", 0.3, FAR)], None),
        ([("person", 0.9, BOX)], [("car", 0.9, BOX)], "reference detection person"),
        ([("person", 0.9, BOX)], [("person", 0.9, FAR)], "best IoU 0.54"),
        ([("person", 0.9, BOX)], [("person", 0.7, BOX)], "reference detection person"),
        ([("person", 0.9, BOX)], [], "reference detection person 0.90"),
        ([], [("car", 0.8, BOX)], "candidate detection car"),
    ],
)
def test_compare_detections(ref, got, why):
    """Boxes must pair up by class, IoU and score; edge-of-threshold ones may be unpaired."""
    result = compare_detections(_dets(ref), _dets(got), conf_threshold=0.25, tol=Tolerance())
    if why is None:
        assert result is None
    else:
        assert result is not None and why in result, result


@pytest.mark.parametrize(("iou_min", "score_abs"), [(0.0, 0.1), (1.5, 0.1), (0.8, -0.1)])
def test_tolerance_validates(iou_min, score_abs):
    """Nonsensical tolerances are refused."""
    with pytest.raises(ValueError, match="invalid tolerance"):
        Tolerance(iou_min=iou_min, score_abs=score_abs)
