"""Graph work for quantization: head/decode split, narrow convs, shared scales, DFL rewrite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from agent.errors import ModelError
from agent.modeltools.graph import (
    branch_of,
    class_convs,
    concat_scale_groups,
    find_head,
    finest_scale,
    high_resolution_nodes,
    keypoint_convs,
    narrow_convs,
)
from agent.modeltools.rewrite import rewrite_dfl

ROOT = Path(__file__).resolve().parents[2]
A = 84  # anchors of the toy head: 8x8 + 4x4 + 2x2


def _w(name: str, *shape: int, seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.normal(0, 0.1, shape).astype(np.float32), name)


def _c(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def toy_yolo(dfl_conv: bool = True) -> onnx.ModelProto:
    """A tiny YOLOv8-style graph: stem, one scale's box/class convs, DFL decode, Concat.

    The box branch ends in a 64-channel conv (4 sides x 16 bins), the class branch in a
    1-channel conv; the decode mixes pixels and probabilities in the final Concat.
    """
    n = helper.make_node
    nodes = [
        n(
            "Conv",
            ["images", "w0"],
            ["f0"],
            name="stem",
            kernel_shape=[3, 3],
            pads=[1] * 4,
            strides=[2, 2],
        ),
        n("Sigmoid", ["f0"], ["s0"], name="stem_sig"),
        n("Mul", ["f0", "s0"], ["a0"], name="stem_mul"),
        n("Conv", ["a0", "w1"], ["f1"], name="body", kernel_shape=[3, 3], pads=[1] * 4),
        n("Sigmoid", ["f1"], ["s1"], name="body_sig"),
        n("Mul", ["f1", "s1"], ["a1"], name="body_mul"),
        n("Conv", ["a1", "wbox"], ["box"], name="head_box", kernel_shape=[1, 1]),
        n("Conv", ["a1", "wcls"], ["cls"], name="head_cls", kernel_shape=[1, 1]),
        n("Reshape", ["box", "shape_box"], ["box_flat"], name="box_flat"),
        n("Reshape", ["cls", "shape_cls"], ["cls_flat"], name="cls_flat"),
        n("Reshape", ["box_flat", "shape_dfl"], ["dfl_in"], name="dfl_reshape"),
        n("Transpose", ["dfl_in"], ["dfl_t"], name="dfl_transpose", perm=[0, 2, 1, 3]),
        n("Softmax", ["dfl_t"], ["dfl_p"], name="dfl_softmax", axis=1),
    ]
    if dfl_conv:
        nodes.append(n("Conv", ["dfl_p", "wdfl"], ["dfl_c"], name="dfl_conv"))
    else:
        nodes.append(n("Identity", ["dfl_p"], ["dfl_c"], name="dfl_identity"))
    nodes += [
        n("Reshape", ["dfl_c", "shape_out"], ["dist"], name="dfl_out"),
        n("Mul", ["dist", "stride"], ["pix"], name="to_pixels"),
        n("Sigmoid", ["cls_flat"], ["prob"], name="cls_sigmoid"),
        n("Concat", ["pix", "prob"], ["output0"], name="final_concat", axis=1),
    ]
    inits = [
        _w("w0", 16, 3, 3, 3, seed=1),
        _w("w1", 32, 16, 3, 3, seed=2),
        _w("wbox", 64, 32, 1, 1, seed=3),
        _w("wcls", 1, 32, 1, 1, seed=4),
        numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1), "wdfl"),
        _c("shape_box", [1, 64, 64]),
        _c("shape_cls", [1, 1, 64]),
        _c("shape_dfl", [1, 4, 16, 64]),
        _c("shape_out", [1, 4, 64]),
        numpy_helper.from_array(np.array(8.0, np.float32), "stride"),
    ]
    graph = helper.make_graph(
        nodes,
        "toy",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 5, 64])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out: np.ndarray = sess.run(None, {"images": x})[0]
    return out


def test_find_head_on_toy_graph():
    """Decode = everything after the head's last convs, the DFL conv included."""
    split = find_head(toy_yolo())
    assert split.boundary == ("head_box", "head_cls")
    assert set(split.decode) == {
        "box_flat", "cls_flat", "dfl_reshape", "dfl_transpose", "dfl_softmax", "dfl_conv",
        "dfl_out", "to_pixels", "cls_sigmoid", "final_concat",
    }  # fmt: skip


def test_find_head_without_convs_is_an_error():
    """A graph with no weight layer before its output cannot be split."""
    n = helper.make_node
    graph = helper.make_graph(
        [n("Sigmoid", ["x"], ["y"], name="s")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    with pytest.raises(ModelError, match="no convolution"):
        find_head(helper.make_model(graph))


@pytest.mark.parametrize("size", [320, 640])
def test_find_head_on_bundled_model(size):
    """On YOLO11n-pose: 3 scales x (box, class, keypoint) convs; decode holds no other conv."""
    model = onnx.load(str(ROOT / "models" / f"yolo11n-pose-{size}-fp32.onnx"))
    split = find_head(model)
    ops = {n.name: n.op_type for n in model.graph.node}
    assert len(split.boundary) == 9
    assert all(ops[b] == "Conv" for b in split.boundary)
    decode_ops = [ops[d] for d in split.decode]
    assert decode_ops.count("Softmax") == 1  # the DFL
    assert "Conv" not in decode_ops and decode_ops.count("MatMul") == 1  # rewritten DFL
    assert model.graph.output[0].name in {
        o for n in model.graph.node if n.name in split.decode for o in n.output
    }


@pytest.mark.parametrize("size", [320, 640])
def test_keypoint_branch_on_bundled_model(size):
    """The keypoint convs are the 3 head convs with 17 x 3 outputs; their branch is the two
    3x3 convs + SiLUs before each (21 nodes) and stops where box and class branches fork."""
    model = onnx.load(str(ROOT / "models" / f"yolo11n-pose-{size}-fp32.onnx"))
    split = find_head(model)
    ends = keypoint_convs(model, split.boundary, 17 * 3)
    assert len(ends) == 3 and all("cv4" in e for e in ends)
    assert keypoint_convs(model, split.boundary, 0) == ()  # a detect model has none
    branch = branch_of(model, ends)
    ops = [n.op_type for n in model.graph.node if n.name in branch]
    assert (len(branch), ops.count("Conv"), ops.count("Sigmoid")) == (21, 9, 6)
    assert all("/cv4." in b for b in branch)  # nothing of the box/class branches or neck


@pytest.mark.parametrize("size", [320, 640])
def test_class_branch_on_bundled_model(size):
    """The class convs are the 3 head convs with one output (YOLO11n-pose: one class);
    their branch is two depthwise-separable blocks (4 convs + SiLUs) before each (39
    nodes), nothing of the box or keypoint branches. A keypoint conv is never a class conv,
    even for a model with as many classes as keypoint values; no labels find none."""
    model = onnx.load(str(ROOT / "models" / f"yolo11n-pose-{size}-fp32.onnx"))
    split = find_head(model)
    ends = class_convs(model, split.boundary, 1)
    assert len(ends) == 3 and all("/cv3." in e for e in ends)
    branch = branch_of(model, ends)
    ops = [n.op_type for n in model.graph.node if n.name in branch]
    assert (len(branch), ops.count("Conv"), ops.count("Sigmoid")) == (39, 15, 12)
    assert all("/cv3." in b for b in branch)
    kpts = keypoint_convs(model, split.boundary, 17 * 3)
    assert class_convs(model, split.boundary, 17 * 3, kpts) == ()
    assert class_convs(model, split.boundary, 17 * 3) == kpts
    assert class_convs(model, split.boundary, 0) == ()


@pytest.mark.parametrize("size", [320, 640])
def test_stem_and_finest_keypoint_scale_on_bundled_model(size):
    """Stride <= 4: the stem (model.0-2, 21 nodes), found by walking from the input, so
    C2PSA's 400x400 attention map (model.10, as large as a stride-4 map at 640) is not in
    it; stride 8 adds model.3-4. The keypoint branch's finest scale is its stride-8 part."""
    model = onnx.load(str(ROOT / "models" / f"yolo11n-pose-{size}-fp32.onnx"))
    hw = (size, size)
    stem = high_resolution_nodes(model, hw, 4)
    assert len(stem) == 21
    assert {n.split("/")[1] for n in stem} == {"model.0", "model.1", "model.2"}
    deeper = {n.split("/")[1] for n in high_resolution_nodes(model, hw, 8)}
    assert deeper == {"model.0", "model.1", "model.2", "model.3", "model.4"}
    assert high_resolution_nodes(model, hw, 0) == high_resolution_nodes(model, hw, 1) == ()
    ends = keypoint_convs(model, find_head(model).boundary, 17 * 3)
    finest = finest_scale(model, branch_of(model, ends), hw)
    assert len(finest) == 7 and all("/cv4.0/" in n for n in finest)
    assert set(finest) & set(ends) == {"/model.23/cv4.0/cv4.0.2/Conv"}


def test_branch_of_stops_at_shared_tensors():
    """A node whose output another branch also reads is not part of the branch."""
    model = toy_yolo()
    assert branch_of(model, ("head_cls",)) == ("head_cls",)


def test_narrow_convs_take_their_activation():
    """Convs under the channel limit are listed with their SiLU; wide ones are not."""
    model = toy_yolo()
    assert narrow_convs(model, 0) == ()
    # The 1-output-channel DFL conv is listed too (it is float as decode anyway).
    assert narrow_convs(model, 4) == ("stem", "stem_sig", "stem_mul", "head_cls", "dfl_conv")
    assert "body" in narrow_convs(model, 17)


def test_concat_scale_groups_follow_byte_moving_ops():
    """A quantized Concat's inputs and output form one group, closed over Split/Reshape."""
    n = helper.make_node
    graph = helper.make_graph(
        [
            n("Reshape", ["x", "shape"], ["r"], name="reshape"),
            n("Split", ["r"], ["a", "b"], name="split", axis=1),
            n("Conv", ["b", "w"], ["c"], name="conv"),
            n("Concat", ["a", "c"], ["y"], name="concat", axis=1),
            n("Sigmoid", ["y"], ["z"], name="sigmoid"),
        ],
        "c2f",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 4, 4])],
        [_w("w", 4, 4, 1, 1), _c("shape", [1, 8, 4, 4])],
    )
    model = helper.make_model(graph)
    everything = {"reshape", "split", "conv", "concat", "sigmoid"}
    assert concat_scale_groups(model, everything) == [["a", "b", "c", "r", "x", "y"]]
    # Split left in float: its outputs are not tied to its input any more.
    assert concat_scale_groups(model, everything - {"split"}) == [["a", "c", "y"]]
    assert concat_scale_groups(toy_yolo(), {"final_concat"}) == [["output0", "pix", "prob"]]
    assert concat_scale_groups(toy_yolo(), {"box_flat"}) == []


def test_rewrite_dfl_is_exact():
    """The DFL rewrite gives bit-identical outputs and leaves no Conv after the Softmax."""
    model = toy_yolo()
    x = np.random.default_rng(0).random((1, 3, 16, 16), dtype=np.float32)
    before = _run(model, x)
    assert rewrite_dfl(model) == 1
    onnx.checker.check_model(model)
    after = _run(model, x)
    np.testing.assert_array_equal(before, after)
    ops = {n.name: n for n in model.graph.node}
    assert ops["dfl_softmax"].attribute[0].i == -1
    assert ops["dfl_conv_matmul"].op_type == "MatMul"
    assert "wdfl" not in {t.name for t in model.graph.initializer}
    assert rewrite_dfl(model) == 0  # idempotent: nothing left to rewrite


def test_rewrite_dfl_leaves_other_graphs_alone():
    """Without the Softmax -> 1x1 Conv pattern nothing changes."""
    model = toy_yolo(dfl_conv=False)
    before = model.SerializeToString()
    assert rewrite_dfl(model) == 0
    assert model.SerializeToString() == before
