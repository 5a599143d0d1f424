"""Fixed-size YOLO models made to take any input size (``agent.detect.flexible``), on the
bundled models and real onnxruntime: the same outputs at the original size, outputs of the
right shape elsewhere, the same people found on a sheet cut to size, and a model it does
not understand is left as it is."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from agent.detect.detector import Detector
from agent.detect.flexible import flexible
from agent.detect.runtime import SessionSpec

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
SPEC = SessionSpec(("CPUExecutionProvider",), threads=1)


def session(model: bytes) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def vtest_frame(index: int = 100) -> np.ndarray:
    cap = cv2.VideoCapture(str(ROOT / "assets" / "vtest.avi"))
    cap.set(cv2.CAP_PROP_POS_FRAMES, index)
    ok, image = cap.read()
    cap.release()
    assert ok
    return image


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "anchors"),
    [("yolo11n-pose-320-int8.onnx", 2100), ("yolo11n-pose-640-fp32.onnx", 8400)],
)
def test_bundled_models_take_any_size(name, anchors):
    raw = (MODELS / name).read_bytes()
    flex = flexible(raw, name)
    assert flex is not None
    side = 320 if "320" in name else 640
    assert (flex.stride, flex.input_hw, flex.output_shape) == (32, (side, side), (1, 56, anchors))
    fixed, rewritten = session(raw), session(flex.model)
    image = cv2.resize(vtest_frame(), (side, side))
    x = (image[:, :, ::-1].transpose(2, 0, 1)[None] / 255.0).astype(np.float32)
    want = fixed.run(None, {"images": x})[0]
    got = rewritten.run(None, {"images": x})[0]
    np.testing.assert_array_equal(got, want)  # the same graph where the sizes agree
    y = rewritten.run(None, {"images": x[:, :, :160, :96]})[0]
    assert y.shape == (1, 56, 20 * 12 + 10 * 6 + 5 * 3)  # anchors of a 160x96 input


@pytest.mark.timeout(120)
def test_a_sheet_cut_to_size_finds_what_the_whole_sheet_finds():
    # Frame 100: people walking along the street; a 160x320 strip of it holds several.
    strip = vtest_frame()[150:310, 200:520]
    whole = Detector(MODELS / "yolo11n-pose-320-int8.onnx", SPEC)
    cut = Detector(MODELS / "yolo11n-pose-320-int8.onnx", SPEC, any_size=True)
    assert (whole.sheet_stride, cut.sheet_stride) == (None, 32)
    assert cut.info.input_hw == whole.info.input_hw == (320, 320)
    assert cut.info.sha256 == whole.info.sha256  # the file's identity, not the rewrite's
    sheet = np.full((320, 320, 3), 114, np.uint8)
    sheet[:160] = strip
    a = whole.detect(sheet).detections
    b = cut.detect_exact(strip).detections
    people_a = [a.xyxy[k] for k in range(len(a)) if a.labels[k] == "person"]
    people_b = [b.xyxy[k] for k in range(len(b)) if b.labels[k] == "person"]
    assert len(people_a) >= 3
    for box in people_a:  # each person of the whole sheet is found on the cut one, in place
        assert any(np.abs(np.asarray(box) - np.asarray(o)).max() < 6 for o in people_b), box
    with pytest.raises(ValueError, match="cannot take a 100x320 input"):
        cut.detect_exact(strip[:100])
    with pytest.raises(ValueError, match="cannot take"):
        whole.detect_exact(strip)


def _matmul_model() -> bytes:
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 64, 64])
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.eye(64, dtype=np.float32).ravel())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["images", "w"], ["out"])], "g", [x], [y], [w]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_model_it_does_not_understand_keeps_its_size():
    assert flexible(_matmul_model(), "matmul.onnx") is None
