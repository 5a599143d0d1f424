"""The deploy manifest and ``model/deploy`` command of the model-update protocol v1.

The signature covers the canonical JSON of the manifest exactly as received, unknown keys
included, so a field this version does not know is still protected.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from agent.detect.detector import check_model_file, sha256_file
from agent.errors import ModelError, VerifyError
from agent.update import codes
from agent.update.keys import TrustedKey

SIGNATURE_BYTES = 64
MAX_CHUNK_SIZE = 16 * 1024 * 1024
MIN_CHUNK_SIZE = 256
MAX_ID_LEN = 128

PositiveDim = Annotated[StrictInt, Field(gt=0, le=16384)]


class Manifest(BaseModel):
    """What a deploy claims the model file is. Unknown keys are kept (they are signed)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=128, description="Model name.")
    version: StrictInt = Field(ge=1, description="Monotonic model version (anti-rollback).")
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$", description="sha256 of the .onnx file.")
    size: StrictInt = Field(ge=1, description="Size of the .onnx file in bytes.")
    format: Literal["onnx"] = Field(description="File format; only ONNX.")
    task: Literal["detect", "pose"] = Field(description="What the model outputs.")
    input_hw: tuple[PositiveDim, PositiveDim] = Field(description="Model input [h, w].")
    labels: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, max_length=100000, description="Class names by class id."
    )
    created_at: str = Field(min_length=1, max_length=64, description="ISO 8601 UTC time.")

    @field_validator("created_at")
    @classmethod
    def _iso8601(cls, v: str) -> str:
        try:
            datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError as e:
            raise ValueError(f"not an ISO 8601 time: {v!r}") from e
        return v


def canonical_json(manifest: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: sorted keys, no spaces, UTF-8 (protocol v1)."""
    return json.dumps(dict(manifest), sort_keys=True, separators=(",", ":")).encode("utf-8")


def sign_manifest(manifest: Mapping[str, Any], key: Ed25519PrivateKey) -> str:
    """Base64 Ed25519 signature of the canonical manifest JSON."""
    return base64.b64encode(key.sign(canonical_json(manifest))).decode("ascii")


def decode_signature(value: object) -> bytes:
    """Raw signature bytes from the command's base64 string, or VerifyError(bad_signature)."""
    if not isinstance(value, str):
        raise VerifyError(codes.BAD_SIGNATURE, "signature must be a base64 string")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise VerifyError(codes.BAD_SIGNATURE, "signature is not valid base64") from e
    if len(raw) != SIGNATURE_BYTES:
        raise VerifyError(
            codes.BAD_SIGNATURE, f"signature must be {SIGNATURE_BYTES} bytes, got {len(raw)}"
        )
    return raw


def find_signer(
    manifest: Mapping[str, Any], signature: bytes, keys: tuple[TrustedKey, ...]
) -> TrustedKey | None:
    """The trusted key the signature verifies with, or None."""
    message = canonical_json(manifest)
    for k in keys:
        try:
            k.public_key.verify(signature, message)
        except InvalidSignature:
            continue
        return k
    return None


# -- the command ---------------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UrlSource(_Strict):
    url: str = Field(min_length=8, max_length=4096, pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://\S+$")


class ChunkSource(_Strict):
    transfer_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    chunks: StrictInt = Field(ge=1, le=10_000_000)
    chunk_size: StrictInt = Field(ge=MIN_CHUNK_SIZE, le=MAX_CHUNK_SIZE)


Source = UrlSource | ChunkSource


@dataclass(frozen=True, slots=True)
class DeployCommand:
    """A parsed ``model/deploy`` command; ``manifest_raw`` is what the signature covers."""

    id: str
    manifest: Manifest
    manifest_raw: Mapping[str, Any]
    signature: bytes | None
    source: Source

    @classmethod
    def parse(cls, body: object) -> DeployCommand:
        """Validate a command body; VerifyError with bad_command/bad_manifest/bad_source/
        bad_signature naming the offending field."""
        if not isinstance(body, Mapping):
            raise VerifyError(codes.BAD_COMMAND, "command must be a JSON object")
        cmd_id = body.get("id")
        if not isinstance(cmd_id, str) or not 0 < len(cmd_id) <= MAX_ID_LEN:
            raise VerifyError(codes.BAD_COMMAND, f"id must be a string of 1..{MAX_ID_LEN} chars")
        raw = body.get("manifest")
        if not isinstance(raw, Mapping):
            raise VerifyError(codes.BAD_MANIFEST, "manifest must be a JSON object")
        try:
            manifest = Manifest.model_validate(dict(raw))
        except ValidationError as e:
            raise VerifyError(codes.BAD_MANIFEST, _first_error("manifest", e)) from e
        source = _parse_source(body.get("source"))
        sig = body.get("signature")
        signature = None if sig is None else decode_signature(sig)
        return cls(cmd_id, manifest, dict(raw), signature, source)


def _parse_source(value: object) -> Source:
    if not isinstance(value, Mapping):
        raise VerifyError(codes.BAD_SOURCE, "source must be {url} or {transfer_id, chunks, ...}")
    model: type[UrlSource] | type[ChunkSource] = UrlSource if "url" in value else ChunkSource
    try:
        return model.model_validate(dict(value))
    except ValidationError as e:
        raise VerifyError(codes.BAD_SOURCE, _first_error("source", e)) from e


def _first_error(prefix: str, e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    where = f"{prefix}.{loc}" if loc else prefix
    shown = repr(err.get("input"))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where} = {shown}: {err['msg']}"


def chunk_count(size: int, chunk_size: int) -> int:
    return max(1, math.ceil(size / chunk_size))


# -- building a manifest (operator side) -------------------------------------------------------
def utc_now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest_for_model(
    path: Path, *, name: str | None = None, version: int | None = None
) -> dict[str, Any]:
    """A manifest describing ``path``, read from the ONNX file (ModelError if unreadable)."""
    from agent.update.onnxfile import describe, load_proto

    check_model_file(path)
    try:
        proto = load_proto(path)
    except VerifyError as e:
        raise ModelError(f"{path}: {e}") from e
    facts = describe(proto)
    version = version if version is not None else facts.meta.version
    if version is None:
        raise ModelError(f"{path} has no model_version metadata: pass --version N")
    stem = path.stem
    for suffix in ("-fp32", "-fp16", "-int8", "_fp32", "_fp16", "_int8"):
        stem = stem.removesuffix(suffix)
    fields = {
        "name": name or facts.meta.name or stem or "model",
        "version": version,
        "sha256": sha256_file(path),
        "size": path.stat().st_size,
        "format": "onnx",
        "task": facts.task,
        "input_hw": list(facts.input_hw),
        "labels": list(facts.labels),
        "created_at": utc_now_iso(),
    }
    try:
        return Manifest.model_validate(fields).model_dump(mode="json")
    except ValidationError as e:
        raise ModelError(f"{path}: {_first_error('manifest', e)}") from e
