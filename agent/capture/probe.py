"""Ask a network source's server why it would not open: the cause for the camera status.

OpenCV's ``VideoCapture`` says only "not opened"; the cause (a 401, a 404, a refused
connection) exists in FFmpeg's own output, which is process-wide and cannot be tied to one
camera when several open at once. So after a failed open a cheap probe asks the server
itself: one TCP connect and one RTSP ``DESCRIBE`` (or HTTP ``GET``) with the URL's
credentials (Basic, then Digest when challenged), read up to the status line and the SDP.
"""

from __future__ import annotations

import base64
import hashlib
import re
import socket
from urllib.parse import unquote, urlsplit, urlunsplit

from agent.causes import ERROR, NO_STREAM, NOT_FOUND, REFUSED, TIMEOUT, UNAUTHORIZED

_STATUS = re.compile(rb"^(?:RTSP|HTTP)/\d\.\d (\d{3})([^\r\n]*)")
_CHALLENGE = re.compile(rb'(\w+)="([^"]*)"')
_PROBE_MAX_S = 5.0
_MAX_RESPONSE = 65536
_DEFAULT_PORTS = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443, "rtmp": 1935}


def _status_cause(code: int) -> str | None:
    if code in (401, 403):
        return UNAUTHORIZED
    if code in (404, 410):
        return NOT_FOUND
    return None if code < 400 else ERROR


def _digest(user: str, password: str, method: str, uri: str, challenge: bytes) -> str:
    """RFC 2617 Digest without qop, as IP cameras implement it."""
    f = {k.decode(): v.decode() for k, v in _CHALLENGE.findall(challenge)}
    realm, nonce = f.get("realm", ""), f.get("nonce", "")

    def md5(s: str) -> str:
        return hashlib.md5(s.encode(), usedforsecurity=False).hexdigest()

    response = md5(f"{md5(f'{user}:{realm}:{password}')}:{nonce}:{md5(f'{method}:{uri}')}")
    return (
        f'Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="{uri}", '
        f'response="{response}"'
    )


def _request(sock: socket.socket, head: str) -> bytes:
    """Send one request; the response's head and (up to Content-Length) its body."""
    sock.sendall(head.encode() + b"\r\n")
    data = b""
    while b"\r\n\r\n" not in data and len(data) < _MAX_RESPONSE:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk
    length = re.search(rb"Content-Length:\s*(\d+)", data, re.I)
    end = data.find(b"\r\n\r\n") + 4 + (int(length[1]) if length else 0)
    while len(data) < min(end, _MAX_RESPONSE):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _ask(url: str, timeout: float) -> tuple[str, str] | None:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    rtsp = scheme == "rtsp"
    port = parts.port or _DEFAULT_PORTS.get(scheme)
    if parts.hostname is None or port is None:
        return None
    if scheme not in ("rtsp", "http"):  # only the connection itself can be probed
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
        return None
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    bare = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    method = "DESCRIBE" if rtsp else "GET"
    target = bare if rtsp else urlunsplit(("", "", parts.path or "/", parts.query, ""))
    auth = ""
    if user:
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    with socket.create_connection((parts.hostname, port), timeout=timeout) as sock:
        for cseq in (1, 2):
            lines = [f"{method} {target} {'RTSP/1.0' if rtsp else 'HTTP/1.1'}", f"CSeq: {cseq}"]
            lines += [f"Host: {netloc}", "Accept: application/sdp", "User-Agent: edge-agent"]
            if auth:
                lines.append(f"Authorization: {auth}")
            response = _request(sock, "\r\n".join(lines) + "\r\n")
            if scheme != "rtsp" or cseq == 2:
                break
            m = _STATUS.match(response)
            digest = re.search(rb"WWW-Authenticate:\s*Digest ([^\r\n]+)", response, re.I)
            if not (m and m[1] == b"401" and user and digest):
                break
            auth = _digest(user, password, method, bare, digest[1])
    m = _STATUS.match(response)
    if m is None:
        return None
    code = int(m[1])
    cause = _status_cause(code)
    detail = f"{'RTSP' if rtsp else 'HTTP'} {code}{m[2].decode(errors='replace')}"
    if cause is None and rtsp and b"m=video" not in response:
        cause = NO_STREAM  # DESCRIBE's SDP may follow the headers in the same read
    return None if cause is None else (cause, detail)


def probe(url: str, timeout: float) -> tuple[str, str] | None:
    """(cause, detail) for a network source that would not open; None when it cannot tell."""
    try:
        return _ask(url, min(timeout, _PROBE_MAX_S))
    except ConnectionRefusedError:
        return REFUSED, "connection refused"
    except TimeoutError:
        return TIMEOUT, f"no answer within {min(timeout, _PROBE_MAX_S):.0f} s"
    except socket.gaierror as e:
        return NOT_FOUND, f"unknown host: {e.strerror or e}"
    except (OSError, ValueError, UnicodeError):
        return None
