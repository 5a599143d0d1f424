"""Model transfers: chunk assembly and URL downloads from a loopback HTTP server."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import random
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from agent.errors import VerifyError
from agent.update import codes
from agent.update.transfer import PART_PREFIX, ChunkAssembler, download

pytestmark = pytest.mark.timeout(30)

DATA = os.urandom(10 * 1024 + 123)
CHUNK = 1024
N = 11  # ceil(len(DATA) / CHUNK)


def _parts(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.iterdir() if p.name.startswith(PART_PREFIX)]


def _assembler(tmp_path, **kw):
    args = {
        "max_bytes": 1 << 20,
        "deadline": time.monotonic() + 60,
        "tmp_dir": tmp_path,
        "total_size": len(DATA),
    }
    args.update(kw)
    return ChunkAssembler("t-1", N, CHUNK, **args)


def _chunk(i: int) -> bytes:
    return DATA[i * CHUNK : (i + 1) * CHUNK]


def test_out_of_order_and_duplicate_chunks(tmp_path):
    """Chunks in random order with duplicates assemble to the exact file."""
    asm = _assembler(tmp_path)
    order = [*list(range(N)), 3, 0, N - 1]
    random.Random(1).shuffle(order)
    for i in order:
        asm.add(i, _chunk(i))
    assert asm.complete and asm.duplicates == 3
    got = asm.finish()
    assert got.path.read_bytes() == DATA
    assert got.sha256 == hashlib.sha256(DATA).hexdigest() and got.size == len(DATA)


@pytest.mark.parametrize(
    ("index", "data"),
    [
        (0, b"x" * (CHUNK - 1)),  # short chunk that is not the last
        (2, b"x" * (CHUNK + 1)),  # long chunk
        (N - 1, b"x" * 5),  # last chunk of the wrong length
        (N, b"x" * CHUNK),  # index past the end
        (-1, b"x" * CHUNK),
    ],
)
def test_wrong_chunks_are_rejected(tmp_path, index, data):
    """A chunk of the wrong size or index is rejected and counted, not written."""
    asm = _assembler(tmp_path)
    assert asm.add(index, data) is False
    assert asm.rejected == 1 and asm.count == 0
    asm.abort()


def test_missing_chunks_time_out_and_clean_up(tmp_path):
    """At the deadline with chunks missing: transfer_timeout naming them; abort deletes."""
    t0 = time.monotonic()
    asm = _assembler(tmp_path, deadline=t0 + 5)
    for i in range(N):
        if i not in (4, 7):
            asm.add(i, _chunk(i))
    assert not asm.expired(t0 + 4) and asm.expired(t0 + 5)
    assert asm.missing() == [4, 7]
    err = asm.timeout_error()
    assert err.code == codes.TRANSFER_TIMEOUT and "[4, 7]" in str(err)
    with pytest.raises(VerifyError) as e:
        asm.finish()
    assert e.value.code == codes.TRANSFER_INCOMPLETE
    asm.abort()
    assert _parts(tmp_path) == []


def test_over_cap_layout_is_refused_before_writing(tmp_path):
    """A transfer announced bigger than max_bytes is refused before any file is made."""
    with pytest.raises(VerifyError) as e:
        ChunkAssembler("t", 100, CHUNK, 50 * CHUNK, time.monotonic() + 9, tmp_path)
    assert e.value.code == codes.TOO_LARGE
    assert _parts(tmp_path) == []


def test_layout_inconsistent_with_size(tmp_path):
    """chunks x chunk_size that cannot hold the manifest size is size_mismatch."""
    with pytest.raises(VerifyError) as e:
        _assembler(tmp_path, total_size=len(DATA) + CHUNK)
    assert e.value.code == codes.SIZE_MISMATCH


def test_bytes_over_cap_without_total(tmp_path):
    """Without a declared total the cap is enforced as chunks arrive."""
    asm = ChunkAssembler("t", 3, CHUNK, 2 * CHUNK + 10, time.monotonic() + 9, tmp_path)
    asm.add(0, b"a" * CHUNK)
    asm.add(1, b"b" * CHUNK)
    with pytest.raises(VerifyError) as e:
        asm.add(2, b"c" * CHUNK)
    assert e.value.code == codes.TOO_LARGE
    asm.abort()


# -- URL -----------------------------------------------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes, dict[str, str], float]]] = {}

    def do_GET(self):
        status, body, headers, delay = self.routes.get(self.path, (404, b"nope", {}, 0.0))
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **headers}.items():
            if v:
                self.send_header(k, v)
        self.end_headers()
        if delay:
            self.wfile.write(body[:100])
            self.wfile.flush()
            time.sleep(delay)
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    _Handler.routes = {
        "/ok": (200, DATA, {}, 0.0),
        "/big": (200, DATA * 4, {"Content-Length": ""}, 0.0),  # no length: streamed cap
        "/short": (200, DATA[:500], {"Content-Length": str(len(DATA))}, 0.0),
        "/slow": (200, DATA, {}, 3.0),
        "/redirect-file": (302, b"", {"Location": "file:///etc/passwd"}, 0.0),
    }
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_download_ok(server, tmp_path):
    """A download streams to a temp file with size and sha256 computed on the fly."""
    got = download(f"{server}/ok", tmp_path, max_bytes=1 << 20, expected_size=len(DATA))
    assert got.path.read_bytes() == DATA
    assert got.sha256 == hashlib.sha256(DATA).hexdigest()
    assert got.path.name.startswith(PART_PREFIX)


@pytest.mark.parametrize(
    ("path", "kwargs", "code"),
    [
        ("/big", {"max_bytes": 2 * len(DATA)}, codes.TOO_LARGE),
        ("/big", {"max_bytes": 1 << 20, "expected_size": len(DATA)}, codes.SIZE_MISMATCH),
        ("/ok", {"max_bytes": 1000}, codes.TOO_LARGE),  # refused on Content-Length
        ("/missing", {"max_bytes": 1 << 20}, codes.DOWNLOAD_FAILED),
        ("/short", {"max_bytes": 1 << 20}, codes.TRANSFER_INCOMPLETE),
        ("/slow", {"max_bytes": 1 << 20, "timeout_s": 0.5}, codes.TRANSFER_TIMEOUT),
        ("/redirect-file", {"max_bytes": 1 << 20}, codes.DOWNLOAD_FAILED),
    ],
    ids=["over-cap-streaming", "over-size", "content-length", "404", "truncated", "stall", "redir"],
)
def test_download_failures(server, tmp_path, path, kwargs, code):
    """Each download failure has its code and leaves no temp file behind."""
    with pytest.raises(VerifyError) as e:
        download(f"{server}{path}", tmp_path, **kwargs)
    assert e.value.code == code, str(e.value)
    assert _parts(tmp_path) == []


def test_download_refuses_other_schemes_and_unreachable(tmp_path):
    """file: URLs are refused; a closed port is download_failed."""
    with pytest.raises(VerifyError) as e:
        download("file:///etc/passwd", tmp_path, max_bytes=1 << 20)
    assert e.value.code == codes.BAD_SOURCE
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(VerifyError) as e:
        download(f"http://127.0.0.1:{port}/m", tmp_path, max_bytes=1 << 20, timeout_s=2)
    assert e.value.code == codes.DOWNLOAD_FAILED


def test_https_verifies_certificates(tmp_path):
    """TLS is verified by default: a self-signed server is download_failed."""
    import ssl

    from tests.brokers import free_port

    _Handler.routes = {"/ok": (200, DATA, {}, 0.0)}
    key_pem, cert_pem = _self_signed()
    (tmp_path / "k.pem").write_bytes(key_pem)
    (tmp_path / "c.pem").write_bytes(cert_pem)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        url = f"https://127.0.0.1:{srv.server_address[1]}/ok"
        with pytest.raises(VerifyError) as e:
            download(url, tmp_path / "dl", max_bytes=1 << 20, timeout_s=5)
        assert e.value.code == codes.DOWNLOAD_FAILED
        assert "TLS" in str(e.value) or "certificate" in str(e.value)
        trusting = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
        got = download(url, tmp_path / "dl", max_bytes=1 << 20, ssl_context=trusting)
        assert got.size == len(DATA)
    finally:
        srv.shutdown()
        srv.server_close()


def _self_signed() -> tuple[bytes, bytes]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)
