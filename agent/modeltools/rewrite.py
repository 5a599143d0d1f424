"""Exact graph rewrites of the float decode step, applied to exported models.

Ultralytics exports the DFL (distribution focal loss) box decode as
``Reshape(b,4,16,A) -> Transpose(0,2,1,3) -> Softmax(axis=1) -> Conv 1x1 (16->1)``.
ONNX Runtime's CPU Softmax over a non-last axis transposes internally and runs one tiny
16-wide row at a time: this block alone took ~4-9 ms of a ~45 ms YOLO11n-pose run at 640
(ORT 1.32, x86), in the FP32 and the INT8 model alike. The same arithmetic as
``Transpose(0,1,3,2) -> Softmax(axis=-1) -> MatMul (16x1)`` takes ~0.5 ms and gives
bit-identical outputs (the sum is over the same 16 products): the (b,1,4,A) conv output
and the (b,4,A,1) matmul output have the same element order, so the following Reshape is
unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

#: Opset from which Softmax normalizes along one axis (earlier: flattened 2-D).
_SOFTMAX_PER_AXIS_OPSET = 13


def _opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            out.setdefault(name, []).append(node)
    return out


def _is_pointwise_conv(node: onnx.NodeProto, weight: np.ndarray, channels: int) -> bool:
    a = _attrs(node)
    ones = [1, 1]
    return (
        len(node.input) == 2  # no bias
        and weight.shape == (1, channels, 1, 1)
        and list(a.get("kernel_shape", ones)) in (ones, [])
        and list(a.get("strides", ones)) == ones
        and list(a.get("dilations", ones)) == ones
        and not any(a.get("pads", [0, 0, 0, 0]))
        and a.get("group", 1) == 1
        and a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
    )


def _static_reshape(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> bool:
    """A Reshape to a constant shape without 0 ("copy this input dim") entries."""
    if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in constants:
        return False
    return bool(np.all(constants[node.input[1]] != 0))


def rewrite_dfl(model: onnx.ModelProto) -> int:
    """Rewrite every DFL block in place (see the module docstring); returns how many."""
    if _opset(model) < _SOFTMAX_PER_AXIS_OPSET:
        return 0
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    constants = {k: numpy_helper.to_array(v) for k, v in inits.items()}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    consumers = _consumers(graph)
    outputs = {o.name for o in graph.output}
    changed: set[str] = set()
    count = 0
    for transpose in graph.node:
        if transpose.op_type != "Transpose" or _attrs(transpose).get("perm") != [0, 2, 1, 3]:
            continue
        nxt = consumers.get(transpose.output[0], [])
        if len(nxt) != 1 or nxt[0].op_type != "Softmax" or _attrs(nxt[0]).get("axis") != 1:
            continue
        softmax = nxt[0]
        nxt = consumers.get(softmax.output[0], [])
        if len(nxt) != 1 or nxt[0].op_type != "Conv" or nxt[0].input[1] not in inits:
            continue
        conv = nxt[0]
        weight = constants[conv.input[1]]
        if not _is_pointwise_conv(conv, weight, weight.shape[1] if weight.ndim == 4 else -1):
            continue
        after = consumers.get(conv.output[0], [])
        hidden = {transpose.output[0], softmax.output[0], conv.output[0]}
        if hidden & outputs or not after or not all(_static_reshape(n, constants) for n in after):
            continue
        # Transpose(0,1,3,2): (b,4,c,A) -> (b,4,A,c); Softmax over the last axis; MatMul (c,1).
        del transpose.attribute[:]
        transpose.attribute.append(onnx.helper.make_attribute("perm", [0, 1, 3, 2]))
        del softmax.attribute[:]
        softmax.attribute.append(onnx.helper.make_attribute("axis", -1))
        w_name = conv.input[1] + "_matmul"
        graph.initializer.append(
            numpy_helper.from_array(weight.reshape(weight.shape[1], 1).astype(weight.dtype), w_name)
        )
        matmul = onnx.helper.make_node(
            "MatMul", [softmax.output[0], w_name], [conv.output[0]], name=conv.name + "_matmul"
        )
        index = list(graph.node).index(conv)
        graph.node.remove(conv)
        graph.node.insert(index, matmul)
        changed |= hidden
        count += 1
    if changed:
        keep = [v for v in graph.value_info if v.name not in changed]
        del graph.value_info[:]
        graph.value_info.extend(keep)
        used = {i for n in graph.node for i in n.input}
        unused = [t for t in graph.initializer if t.name not in used]
        for t in unused:
            graph.initializer.remove(t)
    return count
