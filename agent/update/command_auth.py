"""Signed commands: the envelope an operator wraps a command in, and the device's checks.

A signed command on ``<p>/<d>/cmd/<name>`` (or a fleet topic) is the command's body with
``signed`` beside it (or only ``id`` and ``signed``)::

    {"id": "req-42", ...,
     "signed": {"v": 1, "key": "<key id>", "data": "<base64 of UTF-8 JSON>", "sig": "<base64>"}}

``data`` decodes to ``{"topic": ..., "ts": <Unix seconds>, "nonce": ..., "command": {"id":
"req-42", ...}}`` and ``sig`` is the Ed25519 signature of exactly those decoded bytes, so
no canonical form is needed: a verifier checks the bytes it got. The topic inside names the
device (or fleet group) and the command, so a signed command moved to another device or
another command topic fails; ``ts`` bounds how long it is good for, and the nonce makes a
second delivery of the same bytes a replay. ``key`` is the signer's key id (sha256 prefix of
the raw public key, as ``edge-agent keygen`` logs it), a hint: every trusted key is tried.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.errors import CommandError
from agent.log import get_logger
from agent.update.keys import TrustedKey, key_id

log = get_logger("command_auth")

ENVELOPE_VERSION = 1
NONCE_MIN, NONCE_MAX = 16, 128
NONCE_RE = re.compile(rf"[A-Za-z0-9_-]{{{NONCE_MIN},{NONCE_MAX}}}")
MAX_NONCES = 100_000  # a flood of signed commands cannot grow the book without bound

# Reply codes (public contract, docs/mqtt.md).
UNSIGNED = "unsigned_command"
BAD_SIGNATURE = "bad_signature"
STALE = "stale_command"
REPLAYED = "replayed_command"
REJECT_CODES = (UNSIGNED, BAD_SIGNATURE, STALE, REPLAYED)


@dataclass(frozen=True, slots=True)
class Opened:
    """A verified command: its body (with ``id``), who signed it, and its nonce."""

    body: dict[str, Any]
    key_id: str
    nonce: str
    ts: float


def sign_command(
    key: Ed25519PrivateKey,
    topic: str,
    body: dict[str, Any],
    *,
    now: float | None = None,
    nonce: str | None = None,
) -> dict[str, Any]:
    """The signed payload of command ``body`` (which holds its ``id``) for ``topic``."""
    data = json.dumps(
        {
            "topic": topic,
            "ts": round(time.time() if now is None else now, 3),
            "nonce": nonce or secrets.token_hex(16),
            "command": body,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    # The body stays readable beside its signature (and an agent from before signed
    # commands still runs it); a verifier runs the signed copy and refuses a difference.
    return {
        **body,
        "signed": {
            "v": ENVELOPE_VERSION,
            "key": key_id(raw),
            "data": base64.b64encode(data).decode("ascii"),
            "sig": base64.b64encode(key.sign(data)).decode("ascii"),
        },
    }


def is_signed(body: dict[str, Any]) -> bool:
    return "signed" in body


def _field(obj: dict[str, Any], name: str, kind: type, code: str = BAD_SIGNATURE) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CommandError(code, f"signed.{name} is missing or not a {kind.__name__}")
    return value


def _b64(text: str, name: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise CommandError(BAD_SIGNATURE, f"signed.{name} is not base64") from e


def open_command(
    body: dict[str, Any],
    topic: str,
    keys: Iterable[TrustedKey],
    *,
    now: float,
    max_skew_s: float,
) -> Opened:
    """Verify a signed command received on ``topic``; CommandError with a reply code if not.

    The nonce is not checked here (``NonceBook`` does, once the rest holds).
    """
    env = body["signed"]
    if not isinstance(env, dict):
        raise CommandError(BAD_SIGNATURE, "signed must be an object")
    if env.get("v") != ENVELOPE_VERSION:
        raise CommandError(BAD_SIGNATURE, f"signed.v must be {ENVELOPE_VERSION}")
    data = _b64(_field(env, "data", str), "data")
    sig = _b64(_field(env, "sig", str), "sig")
    hint = env.get("key")
    trusted = list(keys)
    if not trusted:
        raise CommandError(
            BAD_SIGNATURE, "this device trusts no key (commands.trusted_keys, models.trusted_keys)"
        )
    ordered = sorted(trusted, key=lambda k: k.key_id != hint)
    signer = next((k for k in ordered if _verifies(k, sig, data)), None)
    if signer is None:
        raise CommandError(
            BAD_SIGNATURE, f"signature does not verify with any trusted key (signer {hint!r})"
        )
    try:
        inner = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CommandError(BAD_SIGNATURE, "signed.data is not UTF-8 JSON") from e
    if not isinstance(inner, dict):
        raise CommandError(BAD_SIGNATURE, "signed.data must be a JSON object")
    if inner.get("topic") != topic:
        # A command signed for another device, group or command is not this one.
        raise CommandError(
            BAD_SIGNATURE, f"signed for topic {str(inner.get('topic'))[:200]!r}, not {topic!r}"
        )
    ts = _field(inner, "ts", (int, float))  # type: ignore[arg-type]  # a tuple of types
    if abs(now - float(ts)) > max_skew_s:
        raise CommandError(
            STALE,
            f"signed {now - float(ts):+.0f} s from this device's clock, outside "
            f"commands.max_skew_s {max_skew_s:g} (check both clocks, or re-send)",
        )
    nonce = _field(inner, "nonce", str)
    if not NONCE_RE.fullmatch(nonce):
        raise CommandError(
            BAD_SIGNATURE, f"nonce must be {NONCE_MIN}..{NONCE_MAX} of [A-Za-z0-9_-]"
        )
    command = inner.get("command")
    if not isinstance(command, dict) or command.get("id") != body["id"]:
        raise CommandError(BAD_SIGNATURE, "signed command's id differs from the outer id")
    beside = {k: v for k, v in body.items() if k != "signed"}
    if beside != {"id": body["id"]} and beside != command:
        # What a reader of the payload sees must be what runs.
        raise CommandError("bad_request", "the fields beside 'signed' differ from the signed ones")
    return Opened(command, signer.key_id, nonce, float(ts))


def _verifies(key: TrustedKey, sig: bytes, data: bytes) -> bool:
    try:
        key.public_key.verify(sig, data)
    except InvalidSignature:
        return False
    return True


class NonceBook:
    """Nonces of signed commands seen within the clock-skew window, kept on disk.

    Kept across restarts (``path``) so a command captured before a restart cannot be played
    again after it. A disk that cannot be written costs only that: the book stays in memory.
    """

    def __init__(self, path: Path | None, window_s: float, now: float) -> None:
        self._path = path
        self._window = window_s
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        if path is not None:
            self._load(path, now)

    def _load(self, path: Path, now: float) -> None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as e:
            log.warning("nonce_book_unreadable", path=str(path), error=str(e))
            return
        for line in lines:
            nonce, _, ts = line.partition(" ")
            try:
                t = float(ts)
            except ValueError:
                continue  # a line torn by a crash mid-write
            if now - t <= self._window:
                self._seen[nonce] = t
        self._rewrite()

    def check_and_add(self, nonce: str, ts: float, now: float) -> bool:
        """True if ``nonce`` is new (and is now recorded); False for a replay."""
        with self._lock:
            if nonce in self._seen:
                return False
            if len(self._seen) >= MAX_NONCES:
                self._prune(now)
            self._seen[nonce] = ts
            self._append(nonce, ts)
            return True

    def _prune(self, now: float) -> None:
        # Anything older than the window is refused as stale anyway.
        self._seen = {n: t for n, t in self._seen.items() if now - t <= self._window}
        while len(self._seen) >= MAX_NONCES:
            self._seen.pop(next(iter(self._seen)))
        self._rewrite()

    def _append(self, nonce: str, ts: float) -> None:
        if self._path is None:
            return
        try:
            with self._path.open("a", encoding="utf-8") as f:
                f.write(f"{nonce} {ts}\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            log.warning("nonce_book_write_failed", path=str(self._path), error=str(e))

    def _rewrite(self) -> None:
        if self._path is None:
            return
        tmp = self._path.with_name(self._path.name + ".tmp")
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text("".join(f"{n} {t}\n" for n, t in self._seen.items()), "utf-8")
            os.replace(tmp, self._path)
        except OSError as e:
            log.warning("nonce_book_write_failed", path=str(self._path), error=str(e))
