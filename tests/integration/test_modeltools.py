"""Offline model tools end to end: quantize the bundled 320 model, gate it, export metadata."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from agent.cv import cv2
from agent.detect.detector import Detector, Thresholds
from agent.detect.nms import iou_matrix
from agent.detect.runtime import SessionSpec
from agent.modeltools import onnxmeta
from agent.modeltools.export import postprocess
from agent.modeltools.graph import find_head
from agent.modeltools.quantize import Recipe, load_calibration, quantize
from tests.onnx_graph import int8_convs

ROOT = Path(__file__).resolve().parents[2]
MEDIA = ROOT.parent / "shared" / "data" / "media"
FP32_320 = ROOT / "models" / "yolo11n-pose-320-fp32.onnx"
BUS = MEDIA / "bus.jpg"
VIDEO = ROOT / "assets" / "vtest.avi"


def _agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _detector(path: Path) -> Detector:
    return Detector(path, SessionSpec(providers=("cpu",), threads=2), thresholds=Thresholds())


@pytest.fixture(scope="module")
def int8_320(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The bundled 320 FP32 model quantized by the CLI on 6 real frames (1 photo + video)."""
    out = tmp_path_factory.mktemp("quant") / "m-320-int8.onnx"
    proc = _agent(
        "quantize",
        "--model",
        str(FP32_320),
        "--calib",
        str(BUS),
        str(VIDEO),
        "--calib-frames",
        "6",
        "--out",
        str(out),
        "--activations",
        "uint8",
    )
    return out, proc


@pytest.mark.timeout(180)
def test_quantize_cli_writes_int8_model(int8_320):
    """quantize exits 0 and, piped, prints exactly one summary line."""
    out, proc = int8_320
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and out.stat().st_size < FP32_320.stat().st_size / 2
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "6 calibration frames" in lines[0] and "uint8" in lines[0]


@pytest.mark.timeout(180)
def test_quantized_metadata_is_carried_over(int8_320):
    """Labels, task, input size, name, version carried; precision, activations, recipe added."""
    out, _ = int8_320
    src = onnxmeta.read_metadata(onnx.load(str(FP32_320), load_external_data=False))
    meta = onnxmeta.read_metadata(onnx.load(str(out), load_external_data=False))
    for key in ("labels", "task", "input_hw", "model_name", "model_version", "kpt_shape", "names"):
        assert meta[key] == src[key], key
    assert meta["precision"] == "int8"
    assert meta["quant_activations"] == "uint8"
    assert json.loads(meta["quant_recipe"])["format"] == "QDQ"
    prov = onnxmeta.provenance(meta)
    assert prov["checkpoint_sha256"] == onnxmeta.provenance(src)["checkpoint_sha256"]
    calib = prov["quantization"]["calibration"]
    assert calib["frames"] == 6
    assert {s["file"] for s in calib["sources"]} == {"bus.jpg", "vtest.avi"}
    assert all("/" not in s["file"] for s in calib["sources"])  # no machine paths


@pytest.mark.timeout(180)
def test_decode_stays_float(int8_320):
    """No output of the decode step is quantized; the head's box convs are, the keypoint
    convs stay float (sharp keypoints) and so do the 1-channel class convs."""
    out, _ = int8_320
    split = find_head(onnx.load(str(FP32_320)))
    model = onnx.load(str(out))
    decode = set(split.decode)
    outputs = {o for n in model.graph.node if n.name in decode for o in n.output}
    quantized_inputs = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    assert not outputs & quantized_inputs
    conv_inputs = [n for n in model.graph.node if n.name in split.boundary]
    assert len(conv_inputs) == 9
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    int8 = [n.name for n in conv_inputs if producers.get(n.input[1]) == "DequantizeLinear"]
    # The three 1-channel class convs stay float (narrower than min_conv_channels), and so
    # does the keypoint branch (recipe float_keypoints): only the three box convs are int8.
    assert len(int8) == 3 and all("/cv2." in name for name in int8)


@pytest.mark.timeout(180)
def test_detections_survive_quantization(int8_320):
    """Every person the FP32 320 model finds in bus.jpg, the INT8 one finds (IoU >= 0.85)."""
    out, _ = int8_320
    image = cv2.imread(str(BUS))
    ref = _detector(FP32_320).detect(image).detections
    got = _detector(out).detect(image).detections
    assert len(ref) >= 3
    assert len(got) >= len(ref) - 1  # one borderline box may cross the threshold
    best = iou_matrix(ref.xyxy[ref.score > 0.5], got.xyxy).max(axis=1)
    assert best.min() >= 0.85, best


@pytest.mark.timeout(180)
def test_quantize_cli_openvino_recipe(tmp_path):
    """--float-activations --float-conv-outputs: recorded in the recipe, no integer conv
    writes into a QuantizeLinear, and the people in bus.jpg are still found."""
    out = tmp_path / "m-320-int8-openvino.onnx"
    proc = _agent("quantize", "--model", str(FP32_320), "--calib", str(BUS), str(VIDEO),
                  "--calib-frames", "4", "--out", str(out), "--activations", "uint8",
                  "--float-activations", "--float-conv-outputs")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    recipe = json.loads(onnxmeta.read_metadata(model)["quant_recipe"])
    assert recipe["quantize_conv_outputs"] is False and recipe["extra_ops"] == []
    int8, into_q = int8_convs(model.graph)
    assert len(int8) >= 60 and into_q == []
    image = cv2.imread(str(BUS))
    ref = _detector(FP32_320).detect(image).detections
    got = _detector(out).detect(image).detections
    assert len(got) >= len(ref) - 1 >= 2
    best = iou_matrix(ref.xyxy[ref.score > 0.5], got.xyxy).max(axis=1)
    assert best.min() >= 0.85, best


@pytest.mark.timeout(180)
def test_evaluate_cli_gate(int8_320, tmp_path):
    """evaluate passes a good INT8 model at the gate, writes JSON with keypoint agreement,
    fails it at a keypoint gate it cannot meet, and fails a broken one."""
    good, _ = int8_320
    report = tmp_path / "eval.json"
    args = ["--reference", str(FP32_320), str(BUS), str(MEDIA / "zidane.jpg"), str(VIDEO)]
    args += ["--max-frames", "8", "--threads", "2"]
    proc = _agent("evaluate", "--candidate", str(good), *args, "--json", str(report),
                  "--min-ap50", "0.8")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AP50" in proc.stdout and "vtest.avi" in proc.stdout
    data = json.loads(report.read_text())
    assert [s["name"] for s in data["sets"]] == ["images", "vtest.avi"]
    assert data["overall"]["frames"] == 10 and data["overall"]["ap50"] >= 0.8
    kp = data["overall"]["keypoints"]
    assert kp["keypoints"] > 0 and 0 < kp["mean_dist_pct"] < 5 and 0.9 < kp["mean_oks"] <= 1
    assert "kpt dist %" in proc.stdout

    # The keypoint gate: no INT8 model is within 0.001 % of the box height of FP32.
    proc = _agent("evaluate", "--candidate", str(good), *args, "--max-kpt-dist-pct", "0.001")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "mean keypoint distance" in proc.stderr

    # Naive full quantization (decode included): the final Concat puts pixel coordinates
    # and probabilities under one scale, and the gate catches what that does.
    calib = load_calibration([BUS, VIDEO], 4)
    naive = quantize(FP32_320, tmp_path / "naive.onnx", calib, Recipe(keep_decode_float=False))
    proc = _agent("evaluate", "--candidate", str(naive.output), *args, "--min-ap50", "0.8")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "below the gate" in proc.stderr


@pytest.mark.timeout(120)
def test_export_postprocess_rewrites_metadata(tmp_path):
    """Export's post-processing: our keys in, date out, outputs unchanged, same bytes twice."""
    raw_meta = {
        "description": "Ultralytics YOLO11n-pose model",
        "date": "2026-11-23T05:27:53.991645+00:00",
        "task": "pose",
        "imgsz": "[320, 320]",
        "names": "{0: 'person'}",
        "kpt_shape": "[17, 3]",
    }
    raw = tmp_path / "raw.onnx"
    onnxmeta.rewrite_file(FP32_320, raw_meta, out=raw)
    prov = {"source": {"file": "yolo11n-pose.pt"}, "opset": 17}
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for out in (a, b):
        postprocess(raw, out, name="yolo11n-pose", version=2, provenance=prov)
    assert a.read_bytes() == b.read_bytes()
    meta = onnxmeta.read_metadata(onnx.load(str(a), load_external_data=False))
    assert "date" not in meta
    assert (meta["model_name"], meta["model_version"], meta["precision"]) == (
        "yolo11n-pose",
        "2",
        "fp32",
    )
    assert json.loads(meta["labels"]) == ["person"]
    assert json.loads(meta["input_hw"]) == [320, 320]
    assert onnxmeta.provenance(meta)["source"] == {"file": "yolo11n-pose.pt"}
    image = cv2.imread(str(BUS))
    before = _detector(FP32_320).infer_raw(image)[0]
    after = _detector(a).infer_raw(image)[0]
    np.testing.assert_array_equal(before, after)


@pytest.mark.timeout(60)
def test_export_cli_fails_in_one_line(tmp_path):
    """export with an unusable --python or missing weights exits 7, the reason first."""
    proc = _agent(
        "export",
        "--python",
        sys.executable,
        "--weights",
        str(tmp_path / "missing.pt"),
        "--out",
        str(tmp_path),
        "--cache",
        str(tmp_path / "cache"),
    )
    assert proc.returncode == 7, proc.stderr
    assert proc.stderr.startswith("edge-agent export: error:")
    assert not list(tmp_path.glob("*.onnx"))


@pytest.mark.timeout(180)
def test_quantize_cli_stem_and_keypoint_options(tmp_path, int8_320):
    """The default recipe keeps the stem (strides 2 and 4) and the class branch in float
    and quantizes the finest keypoint scale but its last conv, and records all three;
    ``--float-stride 0 --all-keypoints-float --quantize-classes`` (the OpenVINO files'
    recipe) does none and records none. A negative stride is refused with a message naming
    the option."""
    default, _ = int8_320
    out = tmp_path / "m-320-legacy.onnx"
    proc = _agent("quantize", "--model", str(FP32_320), "--calib", str(BUS), str(VIDEO),
                  "--calib-frames", "4", "--out", str(out), "--activations", "uint8",
                  "--float-stride", "0", "--all-keypoints-float",
                  "--quantize-classes")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for path, new in ((default, True), (out, False)):
        model = onnx.load(str(path))
        recipe = json.loads(onnxmeta.read_metadata(model)["quant_recipe"])
        assert recipe.get("float_stride") == (4 if new else None), path
        assert recipe.get("quantize_finest_keypoints") is (True if new else None), path
        assert recipe.get("float_classes") is (True if new else None), path
        inits = {t.name for t in model.graph.initializer}
        flt = {n.name: n.input[1] in inits for n in model.graph.node if n.op_type == "Conv"}
        assert flt["/model.1/conv/Conv"] is new and flt["/model.3/conv/Conv"] is False
        assert flt["/model.23/cv4.0/cv4.0.0/conv/Conv"] is not new
        assert flt["/model.23/cv4.0/cv4.0.2/Conv"] and flt["/model.23/cv4.1/cv4.1.0/conv/Conv"]
        classes = [n for n in flt if "/cv3." in n]
        assert len(classes) == 15, path
        for name in classes:  # the last, 1-channel convs are float as narrow convs anyway
            assert flt[name] is (new or name.endswith(".2/Conv")), (path, name)
        assert flt["/model.23/cv2.0/cv2.0.0/conv/Conv"] is False  # the box branch: INT8
    bad = _agent("quantize", "--model", str(FP32_320), "--calib", str(BUS),
                 "--out", str(tmp_path / "x.onnx"), "--float-stride", "-1")  # fmt: skip
    assert bad.returncode != 0 and "--float-stride -1" in bad.stderr
    assert not (tmp_path / "x.onnx").exists()
