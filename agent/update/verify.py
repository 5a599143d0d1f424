"""The verification steps of the model-update protocol v1, one function each, in order.

Each raises ``VerifyError(code, message)`` (codes in ``agent.update.codes``) and leaves
everything untouched; the manager calls them in protocol order and stops at the first.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.detect.detector import Detector, ModelInfo
from agent.detect.runtime import SessionSpec
from agent.errors import VerifyError
from agent.log import get_logger
from agent.update import codes
from agent.update.keys import TrustedKey
from agent.update.manifest import ChunkSource, Manifest, chunk_count, find_signer
from agent.update.onnxfile import ModelFacts, check_contract, check_no_external_data, load_proto

log = get_logger("update.verify")


# -- 1. signature ------------------------------------------------------------------------------
def check_signature(
    manifest_raw: Mapping[str, Any],
    signature: bytes | None,
    keys: tuple[TrustedKey, ...],
    *,
    allow_unsigned: bool,
) -> TrustedKey | None:
    """The key that signed the manifest; None only for an accepted unsigned deploy.

    Ed25519 signatures do not name their key, so a tampered manifest and a signature by an
    unknown key look the same: both are ``bad_signature``. A present signature is always
    checked when keys are configured, even with ``allow_unsigned``.
    """
    if signature is None:
        if allow_unsigned:
            log.warning("unsigned_model_accepted", reason="models.allow_unsigned is true")
            return None
        raise VerifyError(
            codes.UNSIGNED_NOT_ALLOWED,
            "the deploy is not signed and models.allow_unsigned is false "
            "(sign it with `edge-agent sign`)",
        )
    if not keys:
        if allow_unsigned:
            log.warning("signature_not_checked", reason="no models.trusted_keys configured")
            return None
        raise VerifyError(
            codes.UNTRUSTED_KEY,
            "the deploy is signed but no trusted key is configured "
            "(models.trusted_keys or models.trusted_keys_file)",
        )
    signer = find_signer(manifest_raw, signature, keys)
    if signer is None:
        raise VerifyError(
            codes.BAD_SIGNATURE,
            f"the signature verifies with none of the {len(keys)} trusted key(s): the "
            "manifest was changed after signing, or it was signed by an untrusted key",
        )
    return signer


# -- 2. version --------------------------------------------------------------------------------
def check_version(manifest: Manifest, active_version: int | None) -> None:
    """Anti-rollback: only a version above the active one deploys."""
    if active_version is not None and manifest.version <= active_version:
        raise VerifyError(
            codes.VERSION_NOT_NEWER,
            f"version {manifest.version} is not newer than the active version "
            f"{active_version} (use model/rollback to go back)",
        )


# -- 3. size cap -------------------------------------------------------------------------------
def check_declared_size(manifest: Manifest, max_bytes: int) -> None:
    if manifest.size > max_bytes:
        raise VerifyError(
            codes.TOO_LARGE,
            f"model size {manifest.size} bytes is over models.max_bytes ({max_bytes})",
        )


def check_chunk_layout(manifest: Manifest, source: ChunkSource) -> None:
    """``chunks`` x ``chunk_size`` must be exactly the manifest size's layout."""
    want = chunk_count(manifest.size, source.chunk_size)
    if source.chunks != want:
        raise VerifyError(
            codes.SIZE_MISMATCH,
            f"{source.chunks} chunks of {source.chunk_size} bytes cannot hold exactly "
            f"{manifest.size} bytes (that takes {want})",
        )


# -- 4. size and sha256 of what arrived --------------------------------------------------------
def check_size(actual: int, manifest: Manifest) -> None:
    if actual != manifest.size:
        raise VerifyError(
            codes.SIZE_MISMATCH, f"received {actual} bytes, the manifest says {manifest.size}"
        )


def check_sha256(actual: str, manifest: Manifest) -> None:
    if actual.lower() != manifest.sha256.lower():
        raise VerifyError(
            codes.SHA256_MISMATCH,
            f"sha256 of the received file is {actual[:16]}..., the manifest says "
            f"{manifest.sha256[:16]}...",
        )


# -- 5. ONNX checks ----------------------------------------------------------------------------
def check_onnx(path: Path, manifest: Manifest) -> ModelFacts:
    """Format (magic, parse), no external data, and the I/O contract of the manifest."""
    model = load_proto(path)
    check_no_external_data(model)
    return check_contract(
        model, task=manifest.task, input_hw=manifest.input_hw, labels=manifest.labels
    )


# -- 6. validation in a fresh session ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Validation:
    """How the candidate did on a real frame in its own session."""

    info: ModelInfo
    load_ms: float
    latency_ms: float
    detections: int

    def summary(self) -> dict[str, Any]:
        return {
            "provider": self.info.provider,
            "load_ms": round(self.load_ms, 1),
            "latency_ms": round(self.latency_ms, 2),
            "detections": self.detections,
        }


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


def _load(path: Path, spec: SessionSpec, name: str | None, version: int | None) -> Detector:
    try:
        return Detector(path, spec, name=name, version=version)
    except Exception as e:  # ORT raises assorted types; all mean "cannot load"
        raise VerifyError(codes.LOAD_FAILED, f"cannot load the model: {_first_line(e)}") from e


def _timed_runs(det: Detector, frame: npt.NDArray[np.uint8], runs: int) -> tuple[float, int]:
    """Median inference ms of ``runs`` full detections, and the last detection count."""
    times: list[float] = []
    count = 0
    try:
        for _ in range(max(1, runs)):
            r = det.detect(frame)
            times.append(r.times.inference_ms)
            count = len(r.detections)
    except Exception as e:  # decode/NMS failure: outputs are not what the contract says
        raise VerifyError(codes.LOAD_FAILED, f"detection failed: {_first_line(e)}") from e
    return float(statistics.median(times)), count


def validate_candidate(
    path: Path,
    manifest: Manifest,
    frame_image: npt.NDArray[np.uint8],
    session_spec: SessionSpec,
    *,
    runs: int = 2,
) -> Validation:
    """Load in a fresh Detector, warm up on ``frame_image``, check outputs are finite, time it.

    Blocks for a model load plus ``runs + 1`` inferences: call it off the inference thread.
    """
    t0 = time.perf_counter()
    det = _load(path, session_spec, manifest.name, manifest.version)
    load_ms = (time.perf_counter() - t0) * 1e3
    info = det.info
    if info.task != manifest.task or info.input_hw != tuple(manifest.input_hw):
        raise VerifyError(
            codes.CONTRACT_MISMATCH,
            f"the loaded session is a {info.task} model with input {list(info.input_hw)}; "
            f"the manifest says {manifest.task} {list(manifest.input_hw)}",
        )
    try:
        outputs = det.infer_raw(frame_image)  # also the warm-up run
    except Exception as e:  # a failure to run is a failure to load for the operator
        raise VerifyError(codes.LOAD_FAILED, f"inference failed: {_first_line(e)}") from e
    for i, out in enumerate(outputs):
        bad = int(out.size - np.count_nonzero(np.isfinite(out)))
        if bad:
            raise VerifyError(
                codes.NON_FINITE_OUTPUT,
                f"output {i} has {bad} of {out.size} values NaN or infinite on a real frame",
            )
    latency_ms, count = _timed_runs(det, frame_image, runs)
    return Validation(info, load_ms, latency_ms, count)


def measure_latency(
    path: Path, frame_image: npt.NDArray[np.uint8], session_spec: SessionSpec, *, runs: int = 2
) -> float:
    """Median inference ms of a model in a fresh session, measured like ``validate_candidate``
    (the reference when the pipeline has no latency history of the running model)."""
    det = _load(path, session_spec, None, None)
    det.infer_raw(frame_image)
    return _timed_runs(det, frame_image, runs)[0]
