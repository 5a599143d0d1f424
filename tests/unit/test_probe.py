"""The cause probe of a network source that would not open (agent.capture.probe)."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from agent.capture.probe import probe
from agent.causes import cause_of_line

CHALLENGE = (
    b'RTSP/1.0 401 Unauthorized\r\nWWW-Authenticate: Digest realm="cam", nonce="n0nce"\r\n\r\n'
)


def _md5(s: str) -> str:
    return hashlib.md5(s.encode(), usedforsecurity=False).hexdigest()


@pytest.fixture
def server() -> Iterator[Callable[[Callable[[bytes], bytes | None]], int]]:
    """A one-connection TCP server answering each request with ``respond(request)``."""
    socks: list[socket.socket] = []

    def start(respond: Callable[[bytes], bytes | None]) -> int:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                while True:
                    request = conn.recv(8192)
                    answer = respond(request) if request else None
                    if answer is None:
                        return
                    conn.sendall(answer)

        threading.Thread(target=serve, daemon=True).start()
        return int(srv.getsockname()[1])

    yield start
    for s in socks:
        s.close()


def test_digest_challenge_is_answered_and_a_wrong_password_is_unauthorized(server):
    """A camera asking for Digest gets a correct response; a wrong password stays 401."""
    seen: list[bytes] = []

    def respond(request: bytes) -> bytes:
        seen.append(request)
        m = re.search(rb'response="(\w+)"', request)
        uri = re.search(rb'uri="([^"]+)"', request)
        if m and uri:
            ha1 = _md5("admin:cam:right")
            good = _md5(f"{ha1}:n0nce:{_md5('DESCRIBE:' + uri[1].decode())}")
            if m[1].decode() == good:
                sdp = b"v=0\r\nm=video 0 RTP/AVP 96\r\n"
                head = f"RTSP/1.0 200 OK\r\nContent-Length: {len(sdp)}\r\n\r\n".encode()
                return head + sdp
        return CHALLENGE

    port = server(respond)
    assert probe(f"rtsp://admin:right@127.0.0.1:{port}/s", 2.0) is None  # it would open
    assert b"Digest username=" in seen[-1]
    port = server(respond)
    assert probe(f"rtsp://admin:wrong@127.0.0.1:{port}/s", 2.0) == (
        "unauthorized",
        "RTSP 401 Unauthorized",
    )


def test_stream_without_video_is_no_stream(server):
    """A 200 DESCRIBE whose SDP has no video: no_stream."""
    sdp = b"v=0\r\nm=audio 0 RTP/AVP 0\r\n"
    port = server(lambda _: b"RTSP/1.0 200 OK\r\nContent-Length: 26\r\n\r\n" + sdp)
    assert probe(f"rtsp://127.0.0.1:{port}/a", 2.0) == ("no_stream", "RTSP 200 OK")


def test_closed_port_silent_server_and_unknown_host():
    """Refused, timeout and an unknown host each have their own reason."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        assert probe(f"rtsp://127.0.0.1:{port}/x", 0.3)[0] == "timeout"
    assert probe(f"rtsp://127.0.0.1:{port}/x", 1.0) == ("refused", "connection refused")
    assert probe("rtsp://no-such-host.invalid/x", 1.0)[0] == "not_found"


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("method DESCRIBE failed: 401 (Unauthorized)", "unauthorized"),
        ("method DESCRIBE failed: 404 (Not Found)", "not_found"),
        ("Connection to tcp://127.0.0.1:1?timeout=0 failed: Connection refused", "refused"),
        ("Connection to tcp://10.0.0.9:554 failed: Connection timed out", "timeout"),
        (
            "global cap_v4l.cpp:1 open VIDEOIO(V4L2:/dev/video9): can't open camera by index",
            "no_device",
        ),
        ("rtsp://h/x: Invalid data found when processing input", "no_stream"),
        ("Input picture format: yuv420p", None),
    ],
)
def test_cause_of_native_lines(line, cause):
    """FFmpeg's and OpenCV's own words map to the status reasons."""
    assert cause_of_line(line) == cause
