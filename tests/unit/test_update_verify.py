"""Verification steps of the model-update protocol, each with its error code."""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pytest

from agent.detect.sniff import sniff
from agent.errors import VerifyError
from agent.update import codes
from agent.update.manifest import Manifest, sign_manifest
from agent.update.verify import (
    check_declared_size,
    check_onnx,
    check_sha256,
    check_signature,
    check_size,
    check_version,
    validate_candidate,
)
from tests.update import models
from tests.update.signing import manifest_of, new_key

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def base():
    return models.base_model()


@pytest.fixture(scope="module")
def built(tmp_path_factory, base):
    d = tmp_path_factory.mktemp("verify-models")
    return {
        "nan": models.nan_model(base, d / "nan.onnx"),
        "external": models.external_data_model(base, d / "ext.onnx"),
        "pickle": models.pickle_file(d / "model.pkl"),
        "pt": models.torch_pt_file(d / "model.pt"),
    }


def _code(fn, *args, **kwargs):
    with pytest.raises(VerifyError) as e:
        fn(*args, **kwargs)
    return e.value.code


MANIFEST = {
    "name": "m",
    "version": 3,
    "sha256": "ab" * 32,
    "size": 100,
    "format": "onnx",
    "task": "pose",
    "input_hw": [640, 640],
    "labels": ["person"],
    "created_at": "2026-11-22T08:00:00Z",
}


def test_signature_cases():
    """Good signature passes; tampered, other key, unsigned and no-keys cases have codes."""
    key, trusted, _ = new_key()
    other_key, other_trusted, _ = new_key()
    sig = base64.b64decode(sign_manifest(MANIFEST, key))
    by_other = base64.b64decode(sign_manifest(MANIFEST, other_key))
    tampered = {**MANIFEST, "version": 4}
    assert check_signature(MANIFEST, sig, (other_trusted, trusted), allow_unsigned=False) is trusted
    assert _code(check_signature, tampered, sig, (trusted,), allow_unsigned=False) == (
        codes.BAD_SIGNATURE
    )
    assert _code(check_signature, MANIFEST, by_other, (trusted,), allow_unsigned=False) == (
        codes.BAD_SIGNATURE
    )
    assert _code(check_signature, MANIFEST, None, (trusted,), allow_unsigned=False) == (
        codes.UNSIGNED_NOT_ALLOWED
    )
    assert _code(check_signature, MANIFEST, sig, (), allow_unsigned=False) == codes.UNTRUSTED_KEY
    # allow_unsigned accepts a missing signature, never a wrong one.
    assert check_signature(MANIFEST, None, (trusted,), allow_unsigned=True) is None
    assert _code(check_signature, tampered, sig, (trusted,), allow_unsigned=True) == (
        codes.BAD_SIGNATURE
    )


@pytest.mark.parametrize(
    ("version", "active", "ok"),
    [(4, 3, True), (3, 3, False), (2, 3, False), (1, None, True)],
)
def test_version_must_be_newer(version, active, ok):
    """Anti-rollback: only a version above the active one is accepted."""
    m = Manifest.model_validate({**MANIFEST, "version": version})
    if ok:
        check_version(m, active)
    else:
        assert _code(check_version, m, active) == codes.VERSION_NOT_NEWER


def test_size_cap_size_and_sha256():
    """Declared size over the cap, received size and sha256 differences have their codes."""
    m = Manifest.model_validate(MANIFEST)
    assert _code(check_declared_size, m, 99) == codes.TOO_LARGE
    check_declared_size(m, 100)
    assert _code(check_size, 101, m) == codes.SIZE_MISMATCH
    check_size(100, m)
    assert _code(check_sha256, "cd" * 32, m) == codes.SHA256_MISMATCH
    check_sha256(("AB" * 32).lower(), m)


def test_tampered_byte_changes_sha256(tmp_path, base):
    """One flipped bit in the model makes its sha256 differ from the signed manifest."""
    m = Manifest.model_validate(manifest_of(base))
    data = bytearray(base.read_bytes())
    data[len(data) // 2] ^= 0x01
    assert _code(check_sha256, hashlib.sha256(data).hexdigest(), m) == codes.SHA256_MISMATCH


def test_real_model_passes_onnx_checks(base):
    """The real model passes format, external-data and contract checks against its manifest."""
    facts = check_onnx(base, Manifest.model_validate(manifest_of(base)))
    assert facts.task == "pose"


@pytest.mark.parametrize("kind", ["pickle", "pt"])
def test_pickle_and_torch_zip_are_not_onnx(built, kind):
    """A pickle and a torch .pt zip are refused by their first bytes, never unpickled."""
    path = built[kind]
    m = Manifest.model_validate(manifest_of(path))
    with pytest.raises(VerifyError) as e:
        check_onnx(path, m)
    assert e.value.code == codes.NOT_ONNX
    assert ("pickle" if kind == "pickle" else "zip") in str(e.value)


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"\x80\x04\x95", "pickle"),
        (b"PK\x03\x04", "zip"),
        (b"\x1f\x8b\x08", "gzip"),
        (b"\x89HDF\r\n", "HDF5"),
        (b"", "empty"),
        (b"\x07\x00", "not a protobuf"),
        (b"\x08\x08\x12\x07pytorch", None),
    ],
)
def test_sniff_table(head, kind):
    """Known non-ONNX formats are named from their first bytes; an ONNX header passes."""
    got = sniff(head)
    assert (got is None) if kind is None else (kind in got)


def test_garbage_protobuf_is_not_onnx(tmp_path):
    """Bytes that start like protobuf but do not parse as a ModelProto are not_onnx."""
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x08" + bytes(range(256)) * 4)
    assert _code(check_onnx, path, Manifest.model_validate(manifest_of(path))) == codes.NOT_ONNX


def test_external_data_is_rejected(built):
    """An ONNX whose tensors live in a side file is refused (external_data)."""
    path = built["external"]
    assert (path.parent / (path.name + ".data")).is_file()
    m = Manifest.model_validate(manifest_of(path))
    with pytest.raises(VerifyError) as e:
        check_onnx(path, m)
    assert e.value.code == codes.EXTERNAL_DATA
    assert "initializer" in str(e.value)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"input_hw": [320, 416]}, "input_hw"),
        ({"labels": ["person", "cat"]}, "labels"),
        ({"task": "detect"}, "task"),
    ],
)
def test_contract_mismatch(base, override, fragment):
    """A model whose contract differs from its manifest is refused, naming the field."""
    m = Manifest.model_validate(manifest_of(base, **override))
    with pytest.raises(VerifyError) as e:
        check_onnx(base, m)
    assert e.value.code == codes.CONTRACT_MISMATCH
    assert fragment in str(e.value)


def _frame():
    return np.random.default_rng(3).integers(0, 256, (360, 480, 3), dtype=np.uint8)


def test_validate_candidate_on_real_model(base):
    """The real model loads, runs finite on a frame, and reports its latency."""
    v = validate_candidate(base, Manifest.model_validate(manifest_of(base)), _frame(), models.SPEC)
    assert v.latency_ms > 0
    assert v.info.provider == "CPUExecutionProvider"


def test_nan_output_is_rejected(built, base):
    """A model emitting NaN fails validation with non_finite_output."""
    path = built["nan"]
    m = Manifest.model_validate(manifest_of(path))
    with pytest.raises(VerifyError) as e:
        validate_candidate(path, m, _frame(), models.SPEC)
    assert e.value.code == codes.NON_FINITE_OUTPUT


def test_unloadable_model_is_load_failed(tmp_path, base):
    """A model ORT cannot load (truncated protobuf that still parses) is load_failed."""
    import onnx

    model = onnx.load(str(base))
    del model.graph.initializer[0]  # a weight the graph needs is gone
    path = tmp_path / "broken.onnx"
    onnx.save_model(model, str(path))
    m = Manifest.model_validate(manifest_of(path))
    assert _code(validate_candidate, path, m, _frame(), models.SPEC) == codes.LOAD_FAILED
