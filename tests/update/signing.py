"""Keys and signed ``model/deploy`` bodies for tests."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.update.keys import TrustedKey, parse_public_key, public_key_b64
from agent.update.manifest import manifest_for_model, sign_manifest


def new_key() -> tuple[Ed25519PrivateKey, TrustedKey, str]:
    """(private key, trusted key, base64 public key)."""
    key = Ed25519PrivateKey.generate()
    b64 = public_key_b64(key.public_key())
    return key, parse_public_key(b64, "test"), b64


def manifest_of(path: Path, version: int = 2, **overrides: Any) -> dict[str, Any]:
    """A manifest for any file: ONNX facts when it is a model, else plausible defaults."""
    try:
        manifest = manifest_for_model(path, version=version)
    except Exception:  # not an ONNX model: pickle, zip, ... describe the bytes only
        data = path.read_bytes()
        manifest = {
            "name": "not-a-model",
            "version": version,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "format": "onnx",
            "task": "pose",
            "input_hw": [640, 640],
            "labels": ["person"],
            "created_at": "2026-11-22T08:00:00Z",
        }
    manifest.update(overrides)
    return manifest


def deploy_body(
    manifest: dict[str, Any],
    key: Ed25519PrivateKey | None,
    source: dict[str, Any],
    cmd_id: str = "req-1",
) -> dict[str, Any]:
    body: dict[str, Any] = {"id": cmd_id, "manifest": manifest, "source": source}
    if key is not None:
        body["signature"] = sign_manifest(manifest, key)
    return body
