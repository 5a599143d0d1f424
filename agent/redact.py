"""One redaction for every text that leaves the process: logs, retained topics, printouts.

Removes URL user info (``rtsp://user:pw@host`` -> ``rtsp://***@host``), the values of
query or header parameters whose names look secret (``?token=...``, ``api_key=...``), and
``Authorization: Basic|Digest|Bearer ...`` credentials, wherever they sit in a longer line
(FFmpeg prints whole request URLs and headers at its debug level).
"""

from __future__ import annotations

import re

MASK = "***"

_SENSITIVE_NAME = r"[A-Za-z0-9_.-]*(?:token|key|pass|auth|sig|secret)[A-Za-z0-9_.-]*"
# user info: anything up to the first '@' before the host, within one URL (no space, no '/').
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s?#]+@")
# ?name=value / &name=value / ;name=value, also "name: value" inside quoted header dumps.
_PARAM = re.compile(rf"(?P<pre>[?&;](?i:{_SENSITIVE_NAME})=)[^&;#\s\"'<>]*")
# The value runs to the end of the line, or to its closing quote when quoted (a dict dump).
_AUTH_HEADER = re.compile(
    r"""(?P<pre>\b(?:Proxy-)?Authorization["']?\s*[:=]\s*(?P<q>["'])?"""
    r"""(?:(?:Basic|Digest|Bearer)\s+)?)(?(q)[^"'\r\n]+|[^\r\n]+)""",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with URL credentials, secret-looking parameters and auth headers masked."""
    if not text:
        return text
    text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    text = _PARAM.sub(rf"\g<pre>{MASK}", text)
    return _AUTH_HEADER.sub(rf"\g<pre>{MASK}", text)


def redact_bytes(payload: bytes) -> bytes:
    """``redact`` for a UTF-8 payload (a JSON message); other bytes pass unchanged."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload
    cleaned = redact(text)
    return payload if cleaned == text else cleaned.encode("utf-8")


_SECRET_FIELD = re.compile(r"pass|secret|token|credential", re.IGNORECASE)


def is_secret_field(name: str) -> bool:
    """Whether a config field holds a secret whose value an error must never echo."""
    return bool(_SECRET_FIELD.search(name))
