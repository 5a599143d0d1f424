"""Deploy manifest and command parsing, canonical JSON and signatures."""

from __future__ import annotations

import base64
import json

import pytest

from agent.errors import VerifyError
from agent.update import codes
from agent.update.manifest import DeployCommand, canonical_json, find_signer, sign_manifest
from tests.update.signing import new_key

pytestmark = pytest.mark.timeout(20)

MANIFEST = {
    "name": "yolo11n-pose",
    "version": 4,
    "sha256": "ab" * 32,
    "size": 3712345,
    "format": "onnx",
    "task": "pose",
    "input_hw": [640, 640],
    "labels": ["person"],
    "created_at": "2026-11-22T08:00:00Z",
}


def _body(**changes):
    body = {"id": "req-42", "manifest": dict(MANIFEST), "source": {"url": "https://h/m.onnx"}}
    body.update(changes)
    return body


def test_canonical_json_is_sorted_compact_utf8():
    """Canonical JSON is json.dumps(sort_keys, (",", ":")) encoded UTF-8, per protocol v1."""
    raw = {"b": 1, "a": [1, 2], "name": "café"}
    assert canonical_json(raw) == b'{"a":[1,2],"b":1,"name":"caf\\u00e9"}'
    assert canonical_json(raw) == json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()


def test_signature_covers_unknown_fields():
    """An extra manifest field is signed: changing it breaks the signature."""
    key, trusted, _ = new_key()
    manifest = {**MANIFEST, "provenance": "ci-run-7"}
    sig = base64.b64decode(sign_manifest(manifest, key))
    assert find_signer(manifest, sig, (trusted,)) is trusted
    cmd = DeployCommand.parse(_body(manifest=manifest, signature=base64.b64encode(sig).decode()))
    assert cmd.manifest_raw["provenance"] == "ci-run-7"
    assert find_signer(cmd.manifest_raw, sig, (trusted,)) is trusted
    assert find_signer({**manifest, "provenance": "evil"}, sig, (trusted,)) is None


def test_parse_url_and_chunk_sources():
    """Both source forms parse into their models."""
    assert DeployCommand.parse(_body()).source.url == "https://h/m.onnx"
    chunked = DeployCommand.parse(
        _body(source={"transfer_id": "t-7f3a", "chunks": 15, "chunk_size": 262144})
    )
    assert chunked.source.transfer_id == "t-7f3a"
    assert chunked.signature is None


@pytest.mark.parametrize(
    ("body", "code", "fragment"),
    [
        ([], codes.BAD_COMMAND, "JSON object"),
        (_body(id=""), codes.BAD_COMMAND, "id"),
        (_body(id=7), codes.BAD_COMMAND, "id"),
        (_body(manifest=None), codes.BAD_MANIFEST, "manifest must be"),
        (_body(manifest={**MANIFEST, "version": 0}), codes.BAD_MANIFEST, "manifest.version"),
        (_body(manifest={**MANIFEST, "version": "4"}), codes.BAD_MANIFEST, "manifest.version"),
        (_body(manifest={**MANIFEST, "version": True}), codes.BAD_MANIFEST, "manifest.version"),
        (_body(manifest={**MANIFEST, "sha256": "xyz"}), codes.BAD_MANIFEST, "manifest.sha256"),
        (_body(manifest={**MANIFEST, "format": "pt"}), codes.BAD_MANIFEST, "manifest.format"),
        (_body(manifest={**MANIFEST, "task": "seg"}), codes.BAD_MANIFEST, "manifest.task"),
        (_body(manifest={**MANIFEST, "input_hw": [640]}), codes.BAD_MANIFEST, "input_hw"),
        (_body(manifest={**MANIFEST, "labels": []}), codes.BAD_MANIFEST, "manifest.labels"),
        (_body(manifest={**MANIFEST, "created_at": "noon"}), codes.BAD_MANIFEST, "created_at"),
        (
            _body(manifest={k: v for k, v in MANIFEST.items() if k != "size"}),
            codes.BAD_MANIFEST,
            "manifest.size",
        ),
        (_body(source=None), codes.BAD_SOURCE, "source must be"),
        (_body(source={"url": "file:///etc/passwd"}), codes.BAD_SOURCE, "source.url"),
        (_body(source={"url": "https://h/m", "chunks": 3}), codes.BAD_SOURCE, "source.chunks"),
        (
            _body(source={"transfer_id": "a/b", "chunks": 1, "chunk_size": 1024}),
            codes.BAD_SOURCE,
            "transfer_id",
        ),
        (
            _body(source={"transfer_id": "t", "chunks": 0, "chunk_size": 1024}),
            codes.BAD_SOURCE,
            "source.chunks",
        ),
        (_body(signature="!!"), codes.BAD_SIGNATURE, "base64"),
        (_body(signature=base64.b64encode(b"x" * 10).decode()), codes.BAD_SIGNATURE, "64 bytes"),
        (_body(signature=5), codes.BAD_SIGNATURE, "base64 string"),
    ],
)
def test_malformed_commands_get_precise_codes(body, code, fragment):
    """Each malformed command is refused with its code and the offending field named."""
    with pytest.raises(VerifyError) as e:
        DeployCommand.parse(body)
    assert e.value.code == code
    assert fragment in str(e.value)
