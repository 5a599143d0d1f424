"""Static checks of a model file before any session loads it: format, external data, contract.

Everything here reads the file as data (protobuf), never executes it: a pickle or a torch
``.pt`` (a zip holding a pickle) is recognised by its first bytes and refused unread.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.detect.metadata import ModelMeta, parse_metadata
from agent.detect.yolo import detect_layout
from agent.errors import ModelError, VerifyError
from agent.update import codes

#: Lowest ONNX IR version onnxruntime still loads (IR 3 = ONNX 1.0).
MIN_IR_VERSION = 3
_FLOAT_TYPES = {1: "float", 10: "float16"}  # TensorProto.FLOAT, TensorProto.FLOAT16
_HEAD_BYTES = 512

Dim = int | str | None


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What a model file says it is: I/O shapes, task, labels, input size."""

    input_name: str
    input_shape: tuple[Dim, ...]
    output_shapes: tuple[tuple[Dim, ...], ...]
    task: str
    labels: tuple[str, ...]
    input_hw: tuple[int, int]
    meta: ModelMeta


def sniff(head: bytes) -> str | None:
    """The name of a known non-ONNX format ``head`` (the first bytes) starts with, else None."""
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "a Python pickle"
    if head[:2] == b"PK":
        return "a zip archive (a PyTorch .pt/.pth checkpoint is one)"
    if head[:2] == b"\x1f\x8b":
        return "a gzip file"
    if head[:4] == b"\x89HDF":
        return "an HDF5 file (Keras)"
    if head[4:8] == b"TFL3":
        return "a TFLite flatbuffer"
    if len(head) > 262 and head[257:262] == b"ustar":
        return "a tar archive"
    if head[:1] in (b"{", b"[", b"<") or head[:2] == b"#!":
        return "a text file"
    if len(head) >= 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < 1 << 28:
        return "a safetensors file"
    if head[:4] == b"\x7fELF":
        return "an executable"
    # A serialized ModelProto begins with a protobuf field tag; every ModelProto field is a
    # varint (wire type 0) or length-delimited (2), and field number 0 does not exist.
    if not head:
        return "empty (0 bytes)"
    tag = head[0]
    if tag & 0x07 not in (0, 2) or (tag & 0x7F) >> 3 == 0:
        return f"not a protobuf message (first byte 0x{tag:02x})"
    return None


def load_proto(path: Path) -> Any:
    """The ``onnx.ModelProto`` of ``path`` (no external data loaded), or VerifyError(not_onnx).

    The caller has already bounded the file size (``models.max_bytes``).
    """
    import onnx

    with path.open("rb") as f:
        head = f.read(_HEAD_BYTES)
    kind = sniff(head)
    if kind is not None:
        raise VerifyError(codes.NOT_ONNX, f"the file is {kind}, not an ONNX model")
    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError, ValueError, ...: all mean "not ONNX"
        raise VerifyError(codes.NOT_ONNX, f"not a parseable ONNX ModelProto: {e}") from e
    if model.ir_version < MIN_IR_VERSION or not model.HasField("graph"):
        raise VerifyError(
            codes.NOT_ONNX,
            f"not an ONNX model (ir_version {model.ir_version}, graph present: "
            f"{model.HasField('graph')})",
        )
    g = model.graph
    if not g.node or not g.input or not g.output:
        raise VerifyError(codes.NOT_ONNX, "ONNX graph has no nodes, inputs or outputs")
    return model


def _graph_tensors(graph: Any, where: str) -> Iterator[tuple[str, Any]]:
    for t in graph.initializer:
        yield f"{where}initializer {t.name!r}", t
    for s in graph.sparse_initializer:
        yield f"{where}sparse initializer {s.values.name!r}", s.values
        yield f"{where}sparse initializer {s.indices.name!r}", s.indices
    for node in graph.node:
        for attr in node.attribute:
            label = f"{where}node {node.name or node.op_type!r} attribute {attr.name!r}"
            if attr.HasField("t"):
                yield label, attr.t
            for t in attr.tensors:
                yield label, t
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g, f"{label} subgraph: ")
            for sub in attr.graphs:
                yield from _graph_tensors(sub, f"{label} subgraph: ")


def external_tensors(model: Any) -> list[str]:
    """Where tensors with external data are, in the main graph, subgraphs and functions."""
    external = 1  # TensorProto.EXTERNAL
    found = [
        where
        for where, t in _graph_tensors(model.graph, "")
        if t.data_location == external or len(t.external_data) > 0
    ]
    for fn in model.functions:
        for node in fn.node:
            for attr in node.attribute:
                if attr.HasField("t") and (
                    attr.t.data_location == external or len(attr.t.external_data) > 0
                ):
                    found.append(f"function {fn.name!r} node attribute {attr.name!r}")
    return found


def check_no_external_data(model: Any) -> None:
    found = external_tensors(model)
    if found:
        more = f" (+{len(found) - 3} more)" if len(found) > 3 else ""
        raise VerifyError(
            codes.EXTERNAL_DATA,
            f"{len(found)} tensor(s) stored outside the file, which the agent never reads: "
            f"{', '.join(found[:3])}{more}",
        )


def _shape(value_info: Any) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(str(d.dim_param))
        else:
            dims.append(None)
    return tuple(dims)


def describe(model: Any) -> ModelFacts:
    """Read a YOLO model's contract off its proto; ModelError when it has none we can read."""
    g = model.graph
    initializers = {t.name for t in g.initializer}
    inputs = [i for i in g.input if i.name not in initializers]
    if len(inputs) != 1:
        raise ModelError(f"expected one image input, the model has {len(inputs)}")
    image = inputs[0]
    elem = image.type.tensor_type.elem_type
    if elem not in _FLOAT_TYPES:
        raise ModelError(f"input {image.name!r} has element type {elem}; expected float/float16")
    in_shape = _shape(image)
    if len(in_shape) != 4 or (isinstance(in_shape[1], int) and in_shape[1] != 3):
        raise ModelError(f"input {image.name!r} must be [N, 3, H, W], got {list(in_shape)}")
    meta = parse_metadata({p.key: p.value for p in model.metadata_props})
    h, w = in_shape[2], in_shape[3]
    if isinstance(h, int) and isinstance(w, int):
        input_hw = (h, w)
    elif meta.input_hw is not None:
        input_hw = meta.input_hw
    else:
        raise ModelError("the input size is dynamic and the metadata does not give input_hw")
    outputs = tuple(_shape(o) for o in g.output)
    layout = detect_layout(outputs[0], meta)
    labels = meta.labels or tuple(str(i) for i in range(layout.num_classes))
    return ModelFacts(image.name, in_shape, outputs, layout.task, labels, input_hw, meta)


def contract_mismatches(
    facts: ModelFacts, *, task: str, input_hw: Sequence[int], labels: Sequence[str]
) -> list[str]:
    """Differences between what the file is and what the manifest says; empty when equal."""
    problems: list[str] = []
    if facts.task != task:
        problems.append(f"task: manifest {task!r}, model {facts.task!r}")
    if tuple(input_hw) != facts.input_hw:
        problems.append(f"input_hw: manifest {list(input_hw)}, model {list(facts.input_hw)}")
    if tuple(labels) != facts.labels:
        shown = list(facts.labels[:5]) + (["..."] if len(facts.labels) > 5 else [])
        problems.append(
            f"labels: manifest has {len(labels)}, model has {len(facts.labels)} {shown}"
        )
    if facts.meta.input_hw is not None and facts.meta.input_hw != facts.input_hw:
        problems.append(
            f"model metadata input_hw {list(facts.meta.input_hw)} differs from its input "
            f"{list(facts.input_hw)}"
        )
    return problems


def check_contract(
    model: Any, *, task: str, input_hw: Sequence[int], labels: Sequence[str]
) -> ModelFacts:
    """The model's facts, or VerifyError(contract_mismatch) naming every difference."""
    try:
        facts = describe(model)
    except ModelError as e:
        raise VerifyError(codes.CONTRACT_MISMATCH, f"model contract unreadable: {e}") from e
    problems = contract_mismatches(facts, task=task, input_hw=input_hw, labels=labels)
    if problems:
        raise VerifyError(
            codes.CONTRACT_MISMATCH, "model differs from manifest: " + "; ".join(problems)
        )
    return facts
