"""Ed25519 signing keys: generate, write, load; trusted public keys from config and file.

Public keys travel as base64 of the raw 32 bytes (config, ``<name>.pub``); private keys
are PEM PKCS#8 files readable by their owner only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agent.errors import ConfigError
from agent.settings import ModelsSettings

PUBLIC_KEY_BYTES = 32


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """A publisher key the agent accepts; ``key_id`` is for logs (sha256 prefix)."""

    public_key: Ed25519PublicKey
    key_id: str
    origin: str


@dataclass(frozen=True, slots=True)
class KeyFiles:
    private: Path
    public: Path
    public_b64: str


def public_key_b64(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def key_id(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:12]


def parse_public_key(text: str, origin: str) -> TrustedKey:
    """A ``TrustedKey`` from base64 of a raw 32-byte Ed25519 key; ConfigError names ``origin``."""
    value = text.strip()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ConfigError(f"{origin}: trusted key {value[:16]!r}... is not valid base64") from e
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ConfigError(
            f"{origin}: trusted key must be base64 of {PUBLIC_KEY_BYTES} raw Ed25519 bytes "
            f"(what `edge-agent keygen` prints), got {len(raw)} bytes"
        )
    return TrustedKey(Ed25519PublicKey.from_public_bytes(raw), key_id(raw), origin)


def read_keys_file(path: Path) -> list[TrustedKey]:
    """Keys from a file: one base64 key per line; blank lines and ``#`` comments ignored."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"models.trusted_keys_file {path}: cannot read: {e}") from e
    keys: list[TrustedKey] = []
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if content:
            keys.append(parse_public_key(content, f"{path}:{number}"))
    return keys


def load_trusted_keys(settings: ModelsSettings) -> tuple[TrustedKey, ...]:
    """Every trusted key of the config (``trusted_keys`` then ``trusted_keys_file``), deduped."""
    keys = [
        parse_public_key(k, f"models.trusted_keys[{i}]")
        for i, k in enumerate(settings.trusted_keys)
    ]
    if settings.trusted_keys_file is not None:
        keys += read_keys_file(settings.trusted_keys_file)
    return _unique(keys)


def _unique(keys: Iterable[TrustedKey]) -> tuple[TrustedKey, ...]:
    seen: dict[str, TrustedKey] = {}
    for k in keys:
        seen.setdefault(k.key_id, k)
    return tuple(seen.values())


def write_keypair(out_dir: Path, name: str, *, force: bool = False) -> KeyFiles:
    """Generate a key pair: ``NAME.key`` (PEM PKCS#8, mode 0600) and ``NAME.pub`` (base64)."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"key name {name!r} must be a plain file name")
    out_dir.mkdir(parents=True, exist_ok=True)
    private_path, public_path = out_dir / f"{name}.key", out_dir / f"{name}.pub"
    if not force:
        for p in (private_path, public_path):
            if p.exists():
                raise ConfigError(f"{p} exists; refusing to overwrite a key (use --force)")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_b64 = public_key_b64(key.public_key())
    _write_private(private_path, pem)
    public_path.write_text(public_b64 + "\n", encoding="ascii")
    return KeyFiles(private_path, public_path, public_b64)


def _write_private(path: Path, data: bytes) -> None:
    # Created 0600 from the start: a chmod after writing would leave a readable window.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # umask cannot widen it, but an existing tmp might be wider
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in a PEM (PKCS#8) file; ConfigError says what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read private key {path}: {e.strerror or e}") from e
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise ConfigError(
            f"{path} is not an unencrypted PEM private key (made by `edge-agent keygen`): "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key
