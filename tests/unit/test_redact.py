"""One redaction for every text that leaves the process (agent.redact)."""

from __future__ import annotations

import pytest

from agent.errors import ConfigError
from agent.redact import is_secret_field, redact, redact_bytes
from agent.settings import load_settings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rtsp://user:pw@cam.lan:554/s", "rtsp://***@cam.lan:554/s"),
        ("rtsp://cam.lan/s?token=abc&ch=1", "rtsp://cam.lan/s?token=***&ch=1"),
        (
            "cannot open rtsp://u:p@h/a?api_key=K1&x=2#f now",
            "cannot open rtsp://***@h/a?api_key=***&x=2#f now",
        ),
        ("http://h/p?Signature=s1;password=p2", "http://h/p?Signature=***;password=***"),
        (
            "http://h/p?access_token=t&passwd=p&auth=a",
            "http://h/p?access_token=***&passwd=***&auth=***",
        ),
        (
            "https://h/m.onnx?X-Amz-Signature=abc&X-Amz-Date=1",
            "https://h/m.onnx?X-Amz-Signature=***&X-Amz-Date=1",
        ),
        (
            "?secret=s&apikey=k&sig=g&pass=p&key=k",
            "?secret=***&apikey=***&sig=***&pass=***&key=***",
        ),
        ("Authorization: Basic dXNlcjpwdw==", "Authorization: Basic ***"),
        ('authorization: Digest username="u", response="r"', "authorization: Digest ***"),
        ("'Authorization': 'Bearer abc.def'", "'Authorization': 'Bearer ***'"),
        ("tcp://127.0.0.1:1?timeout=0 failed", "tcp://127.0.0.1:1?timeout=0 failed"),
        ("/dev/video0 and ./clip.mp4?x=1", "/dev/video0 and ./clip.mp4?x=1"),
        ("", ""),
    ],
)
def test_redact_masks_credentials_anywhere_in_a_line(text, expected):
    """User info, secret-looking parameters and auth headers are masked; the rest stays."""
    assert redact(text) == expected


def test_redact_bytes_keeps_binary_and_cleans_json():
    """A JSON payload is redacted; bytes that are not UTF-8 (a JPEG) pass unchanged."""
    assert redact_bytes(b'{"detail":"rtsp://u:p@h/x"}') == b'{"detail":"rtsp://***@h/x"}'
    jpeg = b"\xff\xd8\xff\xe0rtsp://u:p@h"
    assert redact_bytes(jpeg) is jpeg


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True),
        ("mqtt_passwd", True),
        ("api_token", True),
        ("secret", True),
        ("host", False),
        ("source", False),
        ("trusted_keys", False),
    ],
)
def test_secret_fields(name, secret):
    """Config fields whose values an error must never show."""
    assert is_secret_field(name) is secret


def test_config_error_never_echoes_a_password(tmp_path):
    """A password of the wrong type: the error names mqtt.password but not its value."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("mqtt: {password: [SECRETPW]}\n")
    with pytest.raises(ConfigError, match=r"mqtt\.password") as e:
        load_settings(cfg)
    assert "SECRETPW" not in str(e.value)


def test_config_error_redacts_a_camera_url(tmp_path):
    """A camera entry with a bad source type shows its URL without credentials."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text('cameras: [{id: a, source: ["rtsp://u:SECRETPW@h/x?token=SECRETTOK"]}]\n')
    with pytest.raises(ConfigError, match=r"cameras\.0\.source") as e:
        load_settings(cfg)
    assert "SECRET" not in str(e.value) and "rtsp://***@h/x?token=***" in str(e.value)
