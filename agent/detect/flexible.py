"""A fixed-size YOLO model made to take any input size (multiples of its largest stride).

YOLO's network is convolutional: only its head's anchor grid and stride tensors, a few
reshape shapes (the attention block's, the box decoder's) and the declared input size are
tied to the size it was exported at. ``flexible`` rewrites those into tensors computed from
the input's own size at run time, so one session runs a 320x320 sheet and a
128x224 one alike, each at the cost of its own pixels (region mode: a sheet holding one
person needs a quarter of a 320 model run). What PyTorch computes at another size is what
the rewritten graph computes; ``flexible`` checks the rewrite by running both graphs on the
original size, where they must agree exactly, and returns None for any model it does not
understand (the caller keeps the fixed size).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from agent.log import get_logger

log = get_logger("flexible")

#: Input sizes (in strides) the rewritten graph is tried at before it is used.
_CHECK_SIZES = ((2, 4), (5, 3))


class FixedSizeError(Exception):
    """The model's graph is not one ``flexible`` knows how to rewrite."""


@dataclass(frozen=True, slots=True)
class _Level:
    stride: int
    h: int  # its grid at the original size
    w: int


def _constants(graph: onnx.GraphProto) -> dict[str, npt.NDArray[Any]]:
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return consts


def _levels(hw: tuple[int, int], n: int) -> list[_Level]:
    """The detection levels (strides) whose grids add up to the output's ``n`` anchors."""
    h0, w0 = hw
    for strides in ((8, 16, 32), (8, 16, 32, 64), (16, 32)):
        if all(h0 % s == 0 and w0 % s == 0 for s in strides) and n == sum(
            (h0 // s) * (w0 // s) for s in strides
        ):
            return [_Level(s, h0 // s, w0 // s) for s in strides]
    raise FixedSizeError(f"no anchor grid of strides 8-64 gives {n} anchors at {h0}x{w0}")


class _Builder:
    """New nodes for the rewritten graph, named uniquely."""

    def __init__(self, image: str) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._k = 0
        self._image = image
        self._hw: str | None = None

    def input_hw(self) -> str:
        """int64 [height, width] of the model input at run time."""
        if self._hw is None:
            self._hw = self.op("Shape", [self._image], start=2, end=4)
        return self._hw

    def name(self, what: str) -> str:
        self._k += 1
        return f"/flexible/{what}_{self._k}"

    def const(self, value: npt.NDArray[Any]) -> str:
        name = self.name("const")
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def _i64(*v: int) -> npt.NDArray[np.int64]:
    return np.array(v, np.int64)


def _grid_hw(b: _Builder, level: _Level) -> str:
    """int64 [h, w] of a level's grid at run time: the input's size over its stride.

    (Read off the input, not the feature map: a second reader of a quantized tensor would
    keep ONNX Runtime from fusing the quantized convolution that reads it.)
    """
    return b.op("Div", [b.input_hw(), b.const(_i64(level.stride))])


def _anchor_tensors(b: _Builder, levels: list[_Level]) -> tuple[str, str]:
    """(cells (2, N): each anchor's grid x and y; strides (1, N)) at run time."""
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    row = b.const(_i64(1, -1))
    cells, strides = [], []
    for lv in levels:
        hw = _grid_hw(b, lv)
        h = b.op("Gather", [hw, b.const(_i64(0))])
        w = b.op("Gather", [hw, b.const(_i64(1))])
        xs = b.op("Range", [zero, b.op("Squeeze", [w]), one])
        ys = b.op("Range", [zero, b.op("Squeeze", [h]), one])
        shape = b.op("Concat", [h, w], axis=0)
        gx = b.op("Expand", [b.op("Unsqueeze", [xs, b.const(_i64(0))]), shape])
        gy = b.op("Expand", [b.op("Unsqueeze", [ys, b.const(_i64(1))]), shape])
        x_row = b.op("Cast", [b.op("Reshape", [gx, row])], to=TensorProto.FLOAT)
        y_row = b.op("Cast", [b.op("Reshape", [gy, row])], to=TensorProto.FLOAT)
        cells.append(b.op("Concat", [x_row, y_row], axis=0))
        nothing = b.op("Mul", [x_row, b.const(np.float32(0))])
        strides.append(b.op("Add", [nothing, b.const(np.float32(lv.stride))]))
    return b.op("Concat", cells, axis=1), b.op("Concat", strides, axis=1)


def _static_grid(levels: list[_Level]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    cells, strides = [], []
    for lv in levels:
        gy, gx = np.meshgrid(np.arange(lv.h), np.arange(lv.w), indexing="ij")
        cells.append(np.stack([gx.ravel(), gy.ravel()]).astype(np.float32))
        strides.append(np.full((1, lv.h * lv.w), lv.stride, np.float32))
    return np.concatenate(cells, 1), np.concatenate(strides, 1)


def _grid_replacement(
    value: npt.NDArray[Any],
    n: int,
    grid: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]],
    dynamic: Callable[[], tuple[str, str]],
    b: _Builder,
) -> str | None:
    """A run-time tensor for a float constant made of the anchor grid (cells plus an
    offset, or the strides), in the constant's own rank; None if it is none of those."""
    if value.dtype != np.float32 or value.ndim == 0 or value.shape[-1] != n:
        return None
    cells, strides = grid
    rows = value.reshape(-1, n)
    lead = [int(d) for d in value.shape[:-1]]
    if rows.shape[0] == 1 and np.array_equal(rows, strides):
        _, run_strides = dynamic()
        return b.op("Reshape", [run_strides, b.const(_i64(*lead, -1))])
    if rows.shape[0] == 2:
        offset = rows[:, :1] - cells[:, :1]
        if np.allclose(rows - cells, offset, atol=1e-6):
            run_cells, _ = dynamic()
            moved = b.op("Add", [run_cells, b.const(offset.astype(np.float32))])
            return b.op("Reshape", [moved, b.const(_i64(*lead, -1))])
    raise FixedSizeError(f"a constant of shape {value.shape} is tied to the anchors")


def _shape_replacement(
    value: npt.NDArray[Any], n: int, levels: list[_Level], b: _Builder
) -> str | None:
    """A run-time shape for a Reshape's constant shape that names a grid size; None when it
    names none."""
    v = [int(x) for x in value.tolist()]
    for lv in levels:
        if len(v) == 4 and v[2:] == [lv.h, lv.w]:
            return b.op("Concat", [b.const(_i64(*v[:2])), _grid_hw(b, lv)], axis=0)
    sizes = {n} | {lv.h * lv.w for lv in levels}
    tied = [i for i, x in enumerate(v) if x in sizes]
    if not tied:
        return None
    if len(tied) > 1 or -1 in v:
        raise FixedSizeError(f"reshape to {v} has more than one size tied to the input")
    v[tied[0]] = -1
    return b.const(_i64(*v))


def _io(graph: onnx.GraphProto) -> tuple[tuple[int, int], int]:
    """The input's fixed (height, width) and the output's anchor count."""
    if len(graph.input) != 1 or len(graph.output) < 1:
        raise FixedSizeError("expected one input")
    dims = graph.input[0].type.tensor_type.shape.dim
    out_dims = graph.output[0].type.tensor_type.shape.dim
    if len(dims) != 4 or not all(d.HasField("dim_value") for d in dims[2:]):
        raise FixedSizeError("the input has no fixed height and width")
    if len(out_dims) != 3 or not out_dims[2].HasField("dim_value"):
        raise FixedSizeError("the output is not (batch, channels, anchors)")
    for o in graph.output[1:]:
        if any(d.HasField("dim_value") and d.dim_value > 1 for d in o.type.tensor_type.shape.dim):
            raise FixedSizeError("more than one output")
    return (dims[2].dim_value, dims[3].dim_value), out_dims[2].dim_value


def _replace_constants(graph: onnx.GraphProto, levels: list[_Level], n: int, b: _Builder) -> None:
    """Point every reader of a size-tied constant at its run-time replacement."""
    consts = _constants(graph)
    grid = _static_grid(levels)
    made: list[tuple[str, str]] = []

    def dynamic() -> tuple[str, str]:
        if not made:
            made.append(_anchor_tensors(b, levels))
        return made[0]

    replaced: dict[str, str | None] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name not in consts:
                continue
            if name not in replaced:
                value = consts[name]
                if node.op_type == "Reshape" and k == 1:
                    replaced[name] = _shape_replacement(value, n, levels, b)
                elif node.op_type in ("Add", "Sub", "Mul", "Div"):
                    replaced[name] = _grid_replacement(value, n, grid, dynamic, b)
                elif value.size > 1 and n in value.shape:
                    raise FixedSizeError(f"{node.op_type} {node.name} reads a size-tied constant")
                else:
                    replaced[name] = None
            new = replaced[name]
            if new is not None:
                node.input[k] = new
    if not any(replaced.values()):
        raise FixedSizeError("nothing in the graph is tied to the input size")


def _rewrite(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[_Level], tuple[int, int]]:
    graph = model.graph
    hw, n = _io(graph)
    levels = _levels(hw, n)
    b = _Builder(graph.input[0].name)
    _replace_constants(graph, levels, n, b)
    graph.initializer.extend(b.inits)
    nodes = list(graph.node) + b.nodes
    used = {i for node in nodes for i in node.input} | {o.name for o in graph.output}
    nodes = [x for x in nodes if x.op_type != "Constant" or x.output[0] in used]
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del graph.node[:]
    graph.node.extend(_topological(nodes, graph))
    dims = graph.input[0].type.tensor_type.shape.dim
    for d, param in ((dims[2], "height"), (dims[3], "width")):
        d.ClearField("dim_value")
        d.dim_param = param
    anchors = graph.output[0].type.tensor_type.shape.dim[2]
    anchors.ClearField("dim_value")
    anchors.dim_param = "anchors"
    del graph.value_info[:]
    return model, levels, hw


def _topological(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    ready = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(nodes)
    ordered: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for node in pending:
            if all(i in ready for i in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise FixedSizeError("the rewritten graph has a cycle or a missing input")
        pending = rest
    return ordered


def _check(
    original: bytes, rewritten: bytes, hw: tuple[int, int], levels: list[_Level]
) -> tuple[int, int, int]:
    """Both graphs agree on the original size, and the rewritten one runs at other sizes;
    the output's shape at the original size."""
    import onnxruntime as ort  # throwaway sessions: the caller builds its own

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    a = ort.InferenceSession(original, opts, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(rewritten, opts, providers=["CPUExecutionProvider"])
    name = a.get_inputs()[0].name
    rng = np.random.default_rng(0)
    x = rng.random((1, 3, *hw), dtype=np.float32)
    want, got = a.run(None, {name: x})[0], b.run(None, {name: x})[0]
    if want.shape != got.shape or not np.allclose(want, got, atol=1e-4, rtol=1e-4):
        raise FixedSizeError("the rewritten graph does not match the original")
    top = max(lv.stride for lv in levels)
    for kh, kw in _CHECK_SIZES:
        h, w = kh * top, kw * top
        y = b.run(None, {name: rng.random((1, 3, h, w), dtype=np.float32)})[0]
        cells = sum((h // lv.stride) * (w // lv.stride) for lv in levels)
        if y.shape != (1, want.shape[1], cells):
            raise FixedSizeError(f"at {h}x{w} the rewritten graph gives {y.shape}")
    return (int(want.shape[0]), int(want.shape[1]), int(want.shape[2]))


@dataclass(frozen=True, slots=True)
class Flexible:
    """A model that takes any input size that is a multiple of ``stride``; ``input_hw``
    and ``output_shape``: the original's (its nominal size, and the output there)."""

    model: bytes
    stride: int
    input_hw: tuple[int, int]
    output_shape: tuple[int, int, int]


def flexible(model: bytes, label: str = "<model>") -> Flexible | None:
    """The model rewritten to take any input size that is a multiple of its largest
    stride; None (logged) if the model is not one this knows how to rewrite."""
    try:
        rewritten, levels, hw = _rewrite(onnx.load_from_string(model))
        out = rewritten.SerializeToString()
        shape = _check(model, out, hw, levels)
    except FixedSizeError as e:
        log.info("fixed_input_size", model=label, reason=str(e))
        return None
    except Exception as e:  # an unexpected graph: keep the fixed size, say why
        log.warning("fixed_input_size", model=label, reason=f"{type(e).__name__}: {e}"[:200])
        return None
    return Flexible(out, max(lv.stride for lv in levels), hw, shape)
