"""Find the parts of a YOLO graph that must stay in float when quantizing.

The rule (no hand list of node names, so it holds for any Ultralytics detect/pose export,
YOLOv5 to YOLO11, at any input size):

    Walk backwards from every graph output through the producers of each tensor. Every
    node reached is *decode* (kept in float), until the walk reaches a weight layer
    (Conv, ConvTranspose, Gemm, MatMul): that is the last layer of a head branch; it is
    quantized and the walk does not pass it. One exception: a weight layer whose input
    comes from a Softmax is the DFL integral (a fixed 1x1 Conv, or the MatMul that
    ``rewrite.rewrite_dfl`` makes of it, taking the expectation of the box-distance
    distribution): it is decode, and the walk continues through it.

What this keeps in float: the per-branch Reshapes, the box/class/keypoint Concats (whose
one tensor mixes pixel coordinates 0..640 with probabilities 0..1, which a single INT8
scale cannot hold), the DFL Softmax and conv, the anchor/stride arithmetic, the class
and keypoint Sigmoids and the final Concat. Everything before it (backbone, neck and the
head's convolutions, ~97% of the compute) is quantized.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import onnx

from agent.errors import ModelError

WEIGHT_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
UNARY_ACTIVATIONS = frozenset(
    {"Relu", "LeakyRelu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Elu"}
)


@dataclass(frozen=True, slots=True)
class HeadSplit:
    """Node names of the float decode region and of the head's last weight layers."""

    decode: tuple[str, ...]
    boundary: tuple[str, ...]


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output if out}


def _node_name(node: onnx.NodeProto, index: int) -> str:
    if not node.name:
        raise ModelError(
            f"graph node #{index} ({node.op_type}) has no name; names are needed to exclude "
            "nodes from quantization (re-export the model, or run onnxruntime's "
            "quant_pre_process, which names them)"
        )
    return node.name


def find_head(model: onnx.ModelProto) -> HeadSplit:
    """Split the graph at the head's last weight layers (see the module docstring)."""
    graph = model.graph
    producers = _producers(graph)
    index = {id(n): i for i, n in enumerate(graph.node)}
    decode: dict[str, None] = {}  # insertion-ordered set
    boundary: dict[str, None] = {}
    seen: set[int] = set()
    queue = deque(producers[o.name] for o in graph.output if o.name in producers)
    while queue:
        node = queue.popleft()
        if id(node) in seen:
            continue
        seen.add(id(node))
        name = _node_name(node, index[id(node)])
        if node.op_type in WEIGHT_OPS:
            source = producers.get(node.input[0]) if node.input else None
            if source is None or source.op_type != "Softmax":
                boundary[name] = None
                continue
        decode[name] = None
        queue.extend(producers[i] for i in node.input if i in producers)
    if not boundary:
        raise ModelError(
            "found no convolution before the model outputs: not a YOLO-style graph, "
            "cannot tell the detection head from the decode step"
        )
    order = {(n.name): i for i, n in enumerate(graph.node)}
    return HeadSplit(
        decode=tuple(sorted(decode, key=order.__getitem__)),
        boundary=tuple(sorted(boundary, key=order.__getitem__)),
    )


def keypoint_convs(
    model: onnx.ModelProto, boundary: tuple[str, ...], values: int
) -> tuple[str, ...]:
    """The head's last keypoint convs: boundary convs with ``values`` (K x 3) output channels.

    Their raw output goes through ``(raw * 2 + anchor - 0.5) * stride`` in the decode, so
    an INT8 output scale puts the keypoints on a grid of ``2 * stride * scale`` pixels
    (~7 px at stride 32): left in float, they are as sharp as FP32's. Box (4 x reg_max)
    and class convs have other widths; ``values`` <= 0 (a detect model) finds none.
    """
    return _convs_with_outputs(model, boundary, values)


def class_convs(
    model: onnx.ModelProto, boundary: tuple[str, ...], classes: int, skip: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The head's last class convs: boundary convs with ``classes`` output channels, but
    those in ``skip`` (the keypoint convs, should a model have as many classes as values).

    Their scores decide which anchor's box and keypoints survive NMS; ``classes`` <= 0
    (no labels in the metadata) finds none. A model with 4 x reg_max (64) classes gets its
    box convs too, which only keeps more of it in float.
    """
    return _convs_with_outputs(model, tuple(b for b in boundary if b not in skip), classes)


def _convs_with_outputs(
    model: onnx.ModelProto, names: tuple[str, ...], channels: int
) -> tuple[str, ...]:
    """Those of the Convs ``names`` with ``channels`` output channels; none for <= 0."""
    if channels <= 0:
        return ()
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    wanted = set(names)
    out: list[str] = []
    for node in model.graph.node:
        if node.name not in wanted or node.op_type != "Conv" or len(node.input) < 2:
            continue
        w = dims.get(node.input[1])
        if w is not None and len(w) >= 1 and w[0] == channels:
            out.append(node.name)
    return tuple(out)


def branch_of(model: onnx.ModelProto, ends: tuple[str, ...]) -> tuple[str, ...]:
    """``ends`` and every node whose outputs feed only them (transitively): the branches
    that end in ``ends``, back to where they fork off shared features.

    For the keypoint convs of a YOLO pose head: the keypoint branch (two 3x3 convs with
    their SiLUs and the last 1x1 conv per scale), not the neck output the box and class
    branches read too.
    """
    graph = model.graph
    producers = _producers(graph)
    consumers: dict[str, list[str]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node.name)
    outputs = {o.name for o in graph.output}
    inside = set(ends)
    changed = True
    while changed:
        changed = False
        for node in graph.node:
            if node.name not in inside:
                continue
            for i in node.input:
                p = producers.get(i)
                if p is None or p.name in inside or p.op_type in WEIGHT_OPS - {"Conv"}:
                    continue
                users = [u for o in p.output for u in consumers.get(o, [])]
                if users and all(u in inside for u in users) and not set(p.output) & outputs:
                    inside.add(p.name)
                    changed = True
    return tuple(n.name for n in graph.node if n.name in inside)


def activation_after(model: onnx.ModelProto, conv: onnx.NodeProto) -> tuple[str, ...]:
    """The activation nodes right after ``conv``: SiLU (Sigmoid + Mul) or one unary op."""
    out = conv.output[0]
    users = [n for n in model.graph.node if out in n.input]
    if len(users) == 2:
        sig = next((n for n in users if n.op_type == "Sigmoid"), None)
        mul = next((n for n in users if n.op_type == "Mul"), None)
        if sig is not None and mul is not None and set(mul.input) == {out, sig.output[0]}:
            return (sig.name, mul.name)
    if len(users) == 1 and users[0].op_type in UNARY_ACTIVATIONS:
        return (users[0].name,)
    return ()


def narrow_convs(model: onnx.ModelProto, min_channels: int) -> tuple[str, ...]:
    """Names of the Convs with fewer than ``min_channels`` input or output channels, and
    of their activations (a float conv's SiLU is cheaper in float than requantized).

    Input channels count all groups (a depthwise conv over 64 channels has 64).
    """
    if min_channels <= 0:
        return ()
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    out: list[str] = []
    for node in model.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in dims:
            continue
        w = dims[node.input[1]]
        if len(w) < 2:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
        if min(w[0], w[1] * group) < min_channels:
            out += (node.name, *activation_after(model, node))
    return tuple(out)


#: Ops whose quantized output ORT gives the scale of their input (they move bytes only).
SAME_SCALE_OPS = frozenset(
    {
        "Split",
        "MaxPool",
        "Resize",
        "Reshape",
        "Transpose",
        "Slice",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Gather",
    }
)


def concat_scale_groups(model: onnx.ModelProto, quantized: set[str]) -> list[list[str]]:
    """Tensors that must share one quantization scale for the quantized Concats to be copies.

    ORT's QLinearConcat copies bytes when every input has the output's scale and zero
    point, and otherwise requantizes each input through a lookup table (a full pass over
    the data). Groups join each quantized Concat's inputs and output, closed over the
    byte-moving ops (Split, MaxPool, Resize, ...) that ORT already forces onto their
    input's scale. ``quantized``: names of the nodes that will be quantized.
    """
    initializers = {t.name for t in model.graph.initializer}
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(names: list[str]) -> None:
        names = [n for n in names if n and n not in initializers]
        for other in names[1:]:
            parent[find(other)] = find(names[0])

    concat_roots: list[str] = []
    for node in model.graph.node:
        if node.name not in quantized:
            continue
        if node.op_type == "Concat":
            union([*node.input, *node.output])
            concat_roots.append(node.output[0])
        elif node.op_type in SAME_SCALE_OPS and node.input:
            union([node.input[0], *node.output])
    groups: dict[str, list[str]] = {}
    for name in parent:
        groups.setdefault(find(name), []).append(name)
    wanted = {find(c) for c in concat_roots}
    return [sorted(groups[r]) for r in sorted(wanted) if len(groups[r]) > 1]


def feature_sizes(model: onnx.ModelProto, input_hw: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """(H, W) of every node output that is a feature map for an input of ``input_hw``: 4-D,
    no larger than the input on either axis (an attention or DFL tensor, e.g. (1, 2, 400,
    32), is not one), from ONNX shape inference on a copy whose input has that size."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    inits = {t.name for t in work.graph.initializer}
    images = [i for i in work.graph.input if i.name not in inits]
    if len(images) != 1:
        raise ModelError(f"expected one image input, the model has {len(images)}")
    dims = images[0].type.tensor_type.shape.dim
    if len(dims) != 4:
        raise ModelError(f"expected an NCHW image input, got {len(dims)} dimensions")
    for d, v in zip(dims, (1, 3, *input_hw), strict=True):
        d.Clear()
        d.dim_value = v
    del work.graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(work)
    out: dict[str, tuple[int, int]] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        shape = vi.type.tensor_type.shape.dim
        if len(shape) != 4 or not all(d.HasField("dim_value") for d in shape[2:]):
            continue
        h, w = int(shape[2].dim_value), int(shape[3].dim_value)
        if h <= input_hw[0] and w <= input_hw[1]:
            out[vi.name] = (h, w)
    return out


def high_resolution_nodes(
    model: onnx.ModelProto,
    input_hw: tuple[int, int],
    max_stride: int,
    sizes: dict[str, tuple[int, int]] | None = None,
) -> tuple[str, ...]:
    """The stem: nodes reached from the image input only through feature maps at a stride
    of at most ``max_stride`` (the input's size divided by a whole number up to it, on
    both axes), the layers that run at the highest resolution on few channels. A walk
    from the input, so a deep tensor of a matching size (an attention map) is never one.
    ``max_stride`` < 2 finds none. ``sizes``: ``feature_sizes`` if already computed."""
    if max_stride < 2:
        return ()
    sizes = feature_sizes(model, input_hw) if sizes is None else sizes
    inits = {t.name for t in model.graph.initializer}
    images = [i.name for i in model.graph.input if i.name not in inits]
    reached = set(images) | inits

    def shallow(name: str) -> bool:
        hw = sizes.get(name)
        if hw is None or hw[0] < 1 or hw[1] < 1:
            return False
        stride = input_hw[0] // hw[0]
        return stride <= max_stride and hw == (input_hw[0] // stride, input_hw[1] // stride)

    out = []
    for node in model.graph.node:  # ONNX graphs are topologically sorted
        inputs = [i for i in node.input if i]
        outputs = [o for o in node.output if o]
        if (
            inputs
            and outputs
            and all(i in reached for i in inputs)
            and all(shallow(o) for o in outputs)
        ):
            reached.update(outputs)
            out.append(node.name)
    return tuple(out)


def finest_scale(
    model: onnx.ModelProto,
    nodes: tuple[str, ...],
    input_hw: tuple[int, int],
    sizes: dict[str, tuple[int, int]] | None = None,
) -> tuple[str, ...]:
    """Those of ``nodes`` whose outputs are at the highest resolution among them (for the
    keypoint branch of a YOLO pose head: the stride-8 scale, 3/4 of the branch's work).
    ``sizes``: ``feature_sizes`` if already computed."""
    sizes = feature_sizes(model, input_hw) if sizes is None else sizes
    by_name = {n.name: n for n in model.graph.node}
    top: dict[str, int] = {}
    for name in nodes:
        hs = [sizes[o][0] * sizes[o][1] for o in by_name[name].output if o in sizes]
        if hs:
            top[name] = max(hs)
    if not top:
        return ()
    finest = max(top.values())
    return tuple(n for n in nodes if top.get(n) == finest)
