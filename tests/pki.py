"""A throw-away CA with a server certificate for ``localhost`` and a client certificate."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _cert(name: str, key: Any, issuer: str, issuer_key: Any, *, ca: bool, san: str | None) -> Any:
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(root: Path, ca_name: str = "test-ca") -> Path:
    """``root``/{ca,server,client}.{crt,key}; the server certificate names ``localhost``."""
    root.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    items = [("ca", ca_key, _cert(ca_name, ca_key, ca_name, ca_key, ca=True, san=None))]
    for name, san in (("server", "localhost"), ("client", None)):
        key = ec.generate_private_key(ec.SECP256R1())
        items.append((name, key, _cert(name, key, ca_name, ca_key, ca=False, san=san)))
    for name, key, cert in items:
        (root / f"{name}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (root / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return root


def tls_listener(pki: Path, *, require_certificate: bool = False) -> tuple[str, ...]:
    """mosquitto lines that turn the test broker's listener into TLS with ``pki``."""
    lines = [
        f"cafile {pki / 'ca.crt'}",
        f"certfile {pki / 'server.crt'}",
        f"keyfile {pki / 'server.key'}",
    ]
    if require_certificate:
        lines.append("require_certificate true")
    return tuple(lines)
