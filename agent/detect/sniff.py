"""Which known non-ONNX format a model file is, from its first bytes (read as data only).

In ``detect`` because loading a model names what a file that is not ONNX is instead; the
model-update checks (``agent.update.onnxfile``) refuse such files with it too.
"""

from __future__ import annotations

#: How many leading bytes ``sniff`` needs (a tar header's magic is at 257).
HEAD_BYTES = 512


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
