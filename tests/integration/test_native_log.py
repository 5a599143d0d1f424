"""OpenCV's and FFmpeg's own stderr output never breaks the JSON log (journald, `jq`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agent.log import native_line_event
from tests.agent_proc import ROOT, AgentProc


def _json_lines(text: str) -> list[dict[str, object]]:
    """Every non-empty line parsed as JSON; fails naming the first line that is not."""
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                pytest.fail(f"not a JSON log line: {line!r}")
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("level", ["error", "warning"])
def test_missing_usb_camera_logs_only_json(tmp_path, level):
    """A device V4L2 cannot open: stdout+stderr (as journald merges them) are all JSON lines.

    At native_log_level warning, OpenCV's V4L2 warnings arrive as native_output events.
    (A missing index is refused before OpenCV: /dev/null exists but is no camera.)
    """
    agent = AgentProc(
        None,
        tmp_path,
        cameras=[{"id": "usb", "source": "/dev/null", "reconnect_max_s": 0.5}],
        overrides={"native_log_level": level},
    ).start()
    try:
        assert agent.wait_logged("camera_state", 40), agent.tail()
        if level == "warning":
            assert agent.wait_logged("native_output", 20), agent.tail()
    finally:
        agent.stop()
    events = _json_lines(agent.log_path.read_text())
    native = [e for e in events if e.get("event") == "native_output"]
    if level == "warning":
        assert any("VIDEOIO(V4L2)" in str(e["line"]) for e in native)
        assert all(e["level"] in ("warning", "error") for e in native)
    else:
        assert native == []  # the V4L2 warnings are below the default level


@pytest.mark.timeout(30)
def test_routed_native_output_and_last_traceback_are_json():
    """Bytes written to fd 2 from C and an uncaught exception's traceback become JSON lines."""
    script = textwrap.dedent(
        """
        import ctypes, os
        from agent.log import configure_logging, route_native_output
        configure_logging("debug", json=True)
        route_native_output()
        os.write(2, b"[ WARN:0@0.516] global cap_v4l.cpp:914 open VIDEOIO: can't open\\n")
        text = b"[rtsp @ 0x55] method DESCRIBE failed: 401\\n"
        ctypes.CDLL(None).write(2, text, len(text))
        raise RuntimeError("boom at exit")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    events = _json_lines(proc.stdout)
    lines = [(e["level"], e["line"]) for e in events if e["event"] == "native_output"]
    assert ("warning", "global cap_v4l.cpp:914 open VIDEOIO: can't open") in lines
    assert ("warning", "[rtsp @ 0x55] method DESCRIBE failed: 401") in lines
    assert ("warning", "RuntimeError: boom at exit") in lines


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("[ WARN:0@0.516] global cap_v4l.cpp:914 x", ("warning", "global cap_v4l.cpp:914 x")),
        ("[ERROR:0@1.2] global cap.cpp:1 y", ("error", "global cap.cpp:1 y")),
        ("[ INFO:0@0.1] z", ("info", "z")),
        ("[DEBUG:0@0.1] d", ("debug", "d")),
        ("[h264 @ 0x5] error while decoding", ("warning", "[h264 @ 0x5] error while decoding")),
        ("plain text", ("warning", "plain text")),
    ],
)
def test_native_line_levels(line, parsed):
    """OpenCV's [ WARN/ERROR/INFO ] tags set the level; anything else is a warning."""
    assert native_line_event(line) == parsed


@pytest.mark.timeout(60)
def test_doctor_reports_a_missing_camera_without_opencv_noise(tmp_path):
    """`doctor` names the camera that does not open, with no raw OpenCV warning lines."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        f"state_dir: {tmp_path / 'state'}\nmqtt: {{host: 127.0.0.1, port: 1}}\n"
        'cameras: [{id: usb, source: "/dev/null"}]\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "doctor", "--config", str(cfg)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "FAIL camera usb  cannot open /dev/null" in proc.stdout
    assert "[ WARN" not in proc.stdout + proc.stderr
