"""Reading quantized ONNX graphs in tests (the bundled models, models the tests quantize)."""

from __future__ import annotations

import onnx


def int8_convs(graph: onnx.GraphProto) -> tuple[list[str], list[str]]:
    """(integer convs, those of them whose output a QuantizeLinear reads), by node name.

    A conv runs in integers when its input comes from a DequantizeLinear.
    """
    producer = {o: n.op_type for n in graph.node for o in n.output}
    quantized = {n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    convs = [
        n for n in graph.node
        if n.op_type == "Conv" and producer.get(n.input[0]) == "DequantizeLinear"
    ]  # fmt: skip
    return [n.name for n in convs], [n.name for n in convs if n.output[0] in quantized]
