"""Error codes of model-update replies: a public API, documented in docs/model-updates.md.

Listed in the order the protocol checks them; a deploy stops at the first failure.
"""

from __future__ import annotations

from typing import Final

# -- the command itself ------------------------------------------------------------------------
BAD_COMMAND: Final = "bad_command"  # not an object, no/invalid id, unknown keys
BAD_MANIFEST: Final = "bad_manifest"  # manifest missing or a field invalid
BAD_SOURCE: Final = "bad_source"  # source neither {url} nor {transfer_id, chunks, chunk_size}
BUSY: Final = "busy"  # another deploy or rollback is in progress
# -- signature, version, size cap (before any byte is transferred) -----------------------------
UNSIGNED_NOT_ALLOWED: Final = "unsigned_not_allowed"  # no signature, allow_unsigned false
UNTRUSTED_KEY: Final = "untrusted_key"  # signed, but no trusted key is configured
BAD_SIGNATURE: Final = "bad_signature"  # verifies with no trusted key (tampered or other key)
VERSION_NOT_NEWER: Final = "version_not_newer"  # anti-rollback: use model/rollback instead
TOO_LARGE: Final = "too_large"  # declared size or received bytes over models.max_bytes
# -- transfer ----------------------------------------------------------------------------------
DOWNLOAD_FAILED: Final = "download_failed"  # HTTP error status, DNS, refused, TLS verification
TRANSFER_TIMEOUT: Final = "transfer_timeout"  # URL stalled or chunks missing at the deadline
TRANSFER_INCOMPLETE: Final = "transfer_incomplete"  # the stream ended early / was cancelled
# -- file checks -------------------------------------------------------------------------------
SIZE_MISMATCH: Final = "size_mismatch"  # received size != manifest.size
SHA256_MISMATCH: Final = "sha256_mismatch"  # received bytes hash != manifest.sha256
NOT_ONNX: Final = "not_onnx"  # pickle, zip (.pt), other formats, or unparseable protobuf
EXTERNAL_DATA: Final = "external_data"  # tensors stored outside the file
CONTRACT_MISMATCH: Final = "contract_mismatch"  # input/output/task/labels differ from manifest
# -- validation in a fresh session -------------------------------------------------------------
LOAD_FAILED: Final = "load_failed"  # onnxruntime cannot load or run it
NON_FINITE_OUTPUT: Final = "non_finite_output"  # NaN or inf in the raw output on a real frame
# -- persist, swap, health window --------------------------------------------------------------
PERSIST_FAILED: Final = "persist_failed"  # writing to the state dir failed (disk full, ...)
SWAP_FAILED: Final = "swap_failed"  # the pipeline could not switch to the model
HEALTH_ERRORS: Final = "health_errors"  # inference errors in the health window: rolled back
HEALTH_LATENCY: Final = "health_latency"  # median latency over budget: rolled back
HEALTH_TIMEOUT: Final = "health_timeout"  # window not filled in time: rolled back
# -- model/rollback ----------------------------------------------------------------------------
NO_PREVIOUS: Final = "no_previous"  # nothing to roll back to
SHUTTING_DOWN: Final = "shutting_down"  # the agent stopped before the deploy finished
INTERNAL_ERROR: Final = "internal_error"  # a bug: logged with a traceback
