"""Execution provider names: the full onnxruntime names and the short ones config accepts.

A base module: ``settings`` checks ``detector.provider_options`` keys with it and
``detect`` picks providers by it, so neither imports the other for a name.
"""

from __future__ import annotations

CPU = "CPUExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"

#: Fastest first. ``auto`` intersects this with what the installed onnxruntime offers.
PREFERENCE = (
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "OpenVINOExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
    "CoreMLExecutionProvider",
    "NnapiExecutionProvider",
    "ACLExecutionProvider",
    "ArmNNExecutionProvider",
    "XnnpackExecutionProvider",
    "CPUExecutionProvider",
)

_SHORT = {p.removesuffix("ExecutionProvider").lower(): p for p in PREFERENCE}


def canonical_provider(name: str) -> str:
    """'cuda' or 'CUDA' or 'CUDAExecutionProvider' -> 'CUDAExecutionProvider'."""
    if name.endswith("ExecutionProvider"):
        return name
    return _SHORT.get(name.lower(), name)
