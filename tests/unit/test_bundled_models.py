"""The bundled models: the manifest describes the files, and each INT8 recipe fits a provider."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agent.detect.detector import sha256_file
from agent.modeltools import manifest, onnxmeta
from tests.onnx_graph import int8_convs

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
#: the build's keypoint gate (models/build.sh --max-kpt-dist-pct default)
KPT_GATE_PCT = 1.5


def test_bundled_manifest_matches_the_files():
    """Every bundled .onnx is listed with its real hash; every INT8 one passed the gate."""
    data = json.loads((MODELS / "manifest.json").read_text())
    listed = {m["file"]: m for m in data["models"]}
    files = sorted(p.name for p in MODELS.glob("*.onnx"))
    assert sorted(listed) == files
    for name in files:
        m = listed[name]
        assert m["sha256"] == sha256_file(MODELS / name), name
        if m["precision"] == "int8":
            assert m["evaluation"]["sets"][-1]["ap50"] >= 0.95, name
    # The OpenVINO variants leave SiLU (Sigmoid, Mul) and conv outputs in float; the default
    # ones do not.
    recipe = {n: listed[n]["provenance"]["quantization"]["recipe"] for n in listed if "int8" in n}
    for name, r in recipe.items():
        default = not name.endswith("-int8-openvino.onnx")
        assert ("Sigmoid" in r["extra_ops"]) is default, name
        assert r.get("quantize_conv_outputs", True) is default, name
        # Every INT8 model leaves the keypoint convs in float, and its evaluation carries
        # keypoint agreement under the build's gate (models/build.sh --max-kpt-dist-pct).
        assert r["float_keypoints"] is True, name
        for figures in listed[name]["evaluation"]["sets"]:
            kp = figures["keypoints"]
            assert kp["keypoints"] > 0 and kp["mean_dist_pct"] <= KPT_GATE_PCT, (name, figures)
        # S8S8 only for the ARM file; x86's fast path is U8S8.
        want = "int8" if name.endswith("-int8-arm.onnx") else "uint8"
        assert r["activations"] == listed[name]["activations"] == want, name


def test_pi_config_names_the_arm_model():
    """configs/rpi.yaml runs the bundled S8S8 model, which the manifest lists with figures."""
    import yaml

    model = yaml.safe_load((ROOT / "configs" / "rpi.yaml").read_text())["detector"]["model"]
    assert model == "models/yolo11n-pose-320-int8-arm.onnx"
    listed = {m["file"]: m for m in json.loads((MODELS / "manifest.json").read_text())["models"]}
    assert listed[Path(model).name]["activations"] == "int8"
    assert listed[Path(model).name]["evaluation"]["sets"][-1]["ap50"] >= 0.95


def test_keypoint_and_stem_convs_of_the_bundled_int8_models():
    """The last keypoint convs (17 x 3 outputs: they set the keypoints' grid) read float
    weights in every bundled INT8 model. The finest scale's 3x3 keypoint convs are INT8
    where the recipe says ``quantize_finest_keypoints`` (the CPU provider's files), float
    elsewhere, as the coarser scales' are. The stem convs (strides 2 and 4: ``model.0``-
    ``2``) are float where the recipe says ``float_stride`` 4; ``model.3`` is INT8. The
    class branch (``cv3``) is float where the recipe says ``float_classes`` (the CPU
    provider's files), INT8 but its last 1-channel convs in the OpenVINO files; the box
    branch is INT8 everywhere."""
    import onnx

    for path in sorted(MODELS.glob("*-int8*.onnx")):
        model = onnx.load_model(str(path), load_external_data=False)
        recipe = json.loads(onnxmeta.read_metadata(model)["quant_recipe"])
        finest_int8 = recipe.get("quantize_finest_keypoints", False)
        stem_float = recipe.get("float_stride", 0) >= 4
        assert finest_int8 is stem_float is (not path.name.endswith("-openvino.onnx")), path
        graph = model.graph
        inits = {t.name for t in graph.initializer}
        # A float conv's weight is an initializer, a quantized one's a DequantizeLinear.
        is_float = {n.name: n.input[1] in inits for n in graph.node if n.op_type == "Conv"}
        kpt_convs = [n for n in is_float if "/cv4." in n]
        assert len(kpt_convs) == 9, path.name
        for name in kpt_convs:
            last = name.endswith(".2/Conv")
            want = last or not (finest_int8 and "/cv4.0/" in name)
            assert is_float[name] is want, (path.name, name)
        for name, flt in is_float.items():
            if name.startswith(("/model.1/", "/model.2/")):
                assert flt is stem_float, (path.name, name)
        assert is_float["/model.3/conv/Conv"] is False, path.name
        classes_float = recipe.get("float_classes", False)
        assert classes_float is (not path.name.endswith("-openvino.onnx")), path.name
        class_convs = [n for n in is_float if "/cv3." in n]
        assert len(class_convs) == 15, path.name
        for name in class_convs:  # the last, 1-channel ones are float as narrow convs anyway
            assert is_float[name] is (classes_float or name.endswith(".2/Conv")), name
        assert not any(is_float[n] for n in is_float if "/cv2." in n), path.name


def test_openvino_models_leave_conv_outputs_float():
    """In *-int8-openvino no integer conv writes into a QuantizeLinear (OpenVINO fuses bias,
    SiLU and the next quantization into the conv); in *-int8 every integer conv does."""
    import onnx

    for size in (640, 320):
        for name, fused in ((f"yolo11n-pose-{size}-int8-openvino.onnx", True),
                            (f"yolo11n-pose-{size}-int8.onnx", False)):  # fmt: skip
            graph = onnx.load_model(str(MODELS / name), load_external_data=False).graph
            int8, into_q = int8_convs(graph)
            assert len(int8) >= 60, (name, len(int8))
            if fused:
                assert into_q == [], name
            else:
                # all but the head's last convs, whose outputs go to the float decode step
                assert len(into_q) >= len(int8) - 9, (name, len(into_q), len(int8))


def test_regenerating_keeps_evaluations_of_unchanged_files(tmp_path):
    model = tmp_path / "m-320-int8.onnx"
    shutil.copyfile(MODELS / "yolo11n-pose-320-int8.onnx", model)
    figures = {"method": "test", "sets": [{"name": "all", "ap50": 0.97}]}
    previous = {
        "models": [{"file": model.name, "sha256": sha256_file(model), "evaluation": figures}]
    }
    kept = manifest.build(tmp_path, {}, previous)["models"][0]
    assert kept["evaluation"] == figures

    # Other bytes under the same name: the old figures no longer describe the file.
    previous["models"][0]["sha256"] = "0" * 64
    assert "evaluation" not in manifest.build(tmp_path, {}, previous)["models"][0]


def test_main_merges_with_the_manifest_it_replaces(tmp_path):
    model = tmp_path / "m-320-int8.onnx"
    shutil.copyfile(MODELS / "yolo11n-pose-320-int8.onnx", model)
    figures = {"frames": 1, "reference": 2, "candidate": 2, "ap50": 0.98, "mean_iou": 0.9}
    figures |= {"matched": 2, "missed": 0, "extra": 0}
    report = tmp_path / "eval.json"
    report.write_text(
        json.dumps(
            {
                "reference": {"file": "m-320-fp32.onnx", "sha256": "f" * 64},
                "settings": {"conf": 0.25, "ap_conf": 0.01, "iou": 0.5},
                "sets": [{"name": "photos", **figures}],
                "overall": {"name": "all", **figures},
            }
        )
    )
    assert manifest.main(["--models", str(tmp_path), "--eval", f"{model.name}={report}"]) == 0
    first = json.loads((tmp_path / "manifest.json").read_text())["models"][0]
    assert first["evaluation"]["sets"][-1]["ap50"] == 0.98
    # Rerun with no report: the figures stay, since the file did not change.
    assert manifest.main(["--models", str(tmp_path)]) == 0
    again = json.loads((tmp_path / "manifest.json").read_text())["models"][0]
    assert again["evaluation"] == first["evaluation"]


def test_openvino_recipe_on_the_cpu_provider_gets_a_hint():
    """The daemon warns when a model quantized for OpenVINO lands on the CPU provider."""
    import onnx

    from agent.detect.detector import provider_fit_hint

    def meta(name: str) -> dict[str, str]:
        proto = onnx.load_model(str(MODELS / name), load_external_data=False)
        return {p.key: p.value for p in proto.metadata_props}

    ov = meta("yolo11n-pose-320-int8-openvino.onnx")
    hint = provider_fit_hint(ov, "CPUExecutionProvider")
    assert hint is not None and "*-int8.onnx" in hint
    assert "SiLU and conv outputs in float" in hint and "2.8x" in hint
    # A model of the earlier OpenVINO recipe (SiLU alone in float) gets its own figure.
    silu_only = {"quant_recipe": json.dumps({"extra_ops": [], "format": "QDQ"})}
    hint = provider_fit_hint(silu_only, "CPUExecutionProvider")
    assert hint is not None and "(SiLU in float)" in hint and "1.3-1.8x" in hint
    assert provider_fit_hint(ov, "OpenVINOExecutionProvider") is None
    assert provider_fit_hint(meta("yolo11n-pose-320-int8.onnx"), "CPUExecutionProvider") is None
    assert provider_fit_hint(meta("yolo11n-pose-320-fp32.onnx"), "CPUExecutionProvider") is None
    assert provider_fit_hint({"quant_recipe": "not json"}, "CPUExecutionProvider") is None
