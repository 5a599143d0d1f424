"""OpenCV's, FFmpeg's and ORT's own output never breaks the JSON log (journald, `jq`)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from agent.log import NativeLines, native_line_event
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
    """A missing /dev/video9: all lines JSON, the camera's reason is no_device, at error."""
    agent = AgentProc(
        None,
        tmp_path,
        cameras=[{"id": "usb", "source": "/dev/video9", "reconnect_max_s": 0.5}],
        overrides={"native_log_level": level},
    ).start()
    try:
        assert agent.wait_logged("camera_state", 40), agent.tail()
    finally:
        agent.stop()
    events = _json_lines(agent.log_path.read_text())
    states = [e for e in events if e.get("event") == "camera_state"]
    assert states[0]["reason"] == "no_device" and states[0]["level"] == "error"
    assert states[0]["detail"] == "no such video device: /dev/video9"


@pytest.mark.timeout(60)
def test_fatal_model_error_is_logged_at_error_with_its_cause(tmp_path):
    """An empty model file: exit 4 and one `agent_failed` error naming ORT's cause."""
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    agent = AgentProc(None, tmp_path, overrides={"detector": {"model": str(empty)}}).start()
    try:
        assert agent.wait(50) == 4
    finally:
        agent.close()
    events = _json_lines(agent.log_path.read_text())
    failed = [e for e in events if e["event"] == "agent_failed"]
    assert len(failed) == 1 and failed[0]["level"] == "error", events
    assert "the file is 0 bytes" in str(failed[0]["error"]) and failed[0]["exit_code"] == 4
    assert not [e for e in events if e["event"] == "native_output" and e["level"] == "warning"]


@pytest.mark.timeout(60)
def test_spool_in_use_is_logged_at_error(tmp_path):
    """A state_dir whose spool another process holds: exit 2, an error that says so."""
    state = tmp_path / "state"
    state.mkdir()
    holder = sqlite3.connect(state / "spool.db", isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("PRAGMA journal_mode=WAL")
        holder.execute("CREATE TABLE held (x)")  # a write takes the exclusive lock
        agent = AgentProc(None, tmp_path).start()
        try:
            assert agent.wait(50) == 2
        finally:
            agent.close()
    finally:
        holder.close()
    events = _json_lines(agent.log_path.read_text())
    failed = [e for e in events if e["event"] == "agent_failed"]
    assert len(failed) == 1 and failed[0]["level"] == "error", events
    assert "in use by another process" in str(failed[0]["error"])


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
        libc = ctypes.CDLL(None)  # OpenCV's FFmpeg callback printf()s to stdout
        libc.printf(b"[OPENCV:FFMPEG:16] method DESCRIBE failed: 404 (Not Found)\\n")
        libc.printf(b"[OPENCV:FFMPEG:48] SDP:\\nv=0 rtsp://u:SECRETPW@h/x?token=SECRETTOK\\n")
        print("a print() is a JSON line too")
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
    assert "SECRET" not in proc.stdout
    events = _json_lines(proc.stdout)
    lines = [
        (e["level"], e["line"], e.get("cause")) for e in events if e["event"] == "native_output"
    ]
    assert ("warning", "global cap_v4l.cpp:914 open VIDEOIO: can't open", None) in lines
    assert ("warning", "[rtsp @ 0x55] method DESCRIBE failed: 401", "unauthorized") in lines
    assert ("error", "method DESCRIBE failed: 404 (Not Found)", "not_found") in lines
    assert ("debug", "SDP:", None) in lines
    assert ("debug", "v=0 rtsp://***@h/x?token=***", None) in lines  # continues SDP:
    assert any(line == "a print() is a JSON line too" for _, line, _ in lines)
    assert ("error", "Traceback (most recent call last):", None) in lines
    assert ("error", "RuntimeError: boom at exit", None) in lines


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("[ WARN:0@0.516] global cap_v4l.cpp:914 x", ("warning", "global cap_v4l.cpp:914 x")),
        ("[ERROR:0@1.2] global cap.cpp:1 y", ("error", "global cap.cpp:1 y")),
        ("[ INFO:0@0.1] z", ("info", "z")),
        ("[DEBUG:0@0.1] d", ("debug", "d")),
        ("[h264 @ 0x5] error while decoding", ("warning", "[h264 @ 0x5] error while decoding")),
        ("plain text", ("warning", "plain text")),
        (
            "[OPENCV:FFMPEG:16] method DESCRIBE failed: 401",
            ("error", "method DESCRIBE failed: 401"),
        ),
        ("[OPENCV:FFMPEG:24] w", ("warning", "w")),
        ("[OPENCV:FFMPEG:32] i", ("info", "i")),
        ("[OPENCV:FFMPEG:48] d", ("debug", "d")),
        ("2026-11-26 22:50:15.08 [E:onnxruntime:, a.cc:3 f] bad", ("error", "bad")),
        ("2026-11-26 22:50:15.08 [W:onnxruntime:, a.cc:3 f] meh", ("warning", "meh")),
    ],
)
def test_native_line_levels(line, parsed):
    """OpenCV's, FFmpeg's (via OpenCV) and ORT's tags set the level; else a warning."""
    assert native_line_event(line) == parsed


def test_native_lines_keep_traceback_and_ffmpeg_continuations():
    """A traceback is error to its last line; an untagged line continues FFmpeg's level."""
    lines = NativeLines()
    fed = [
        lines.feed(t)
        for t in (
            "[OPENCV:FFMPEG:48] SDP:",
            "m=video 0 RTP/AVP 96",
            "[ WARN:0@1] w",
            "plain",
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in <module>',
            "ValueError: spool rtsp://u:SECRETPW@h is in use",
            "after",
        )
    ]
    assert [level for level, _, _ in fed] == [
        "debug",
        "debug",
        "warning",
        "warning",
        "error",
        "error",
        "error",
        "warning",
    ]
    assert fed[6][1] == "ValueError: spool rtsp://***@h is in use"


def test_native_lines_part_ffmpeg_messages_that_threads_printed_into_one_line():
    """OpenCV prints an FFmpeg message's tag and text apart: with cameras opening at once,
    one line can hold a tag, then another camera's tag and text, or two messages. Each
    message keeps its own level; a text printed after another's gets its tag's level."""
    lines = NativeLines()
    fed = [
        *lines.feed_all(
            "[OPENCV:FFMPEG:48] [OPENCV:FFMPEG:16] method DESCRIBE failed: 404 (Not Found)"
        ),
        *lines.feed_all("nal_unit_type: 1(Coded slice), nal_ref_idc: 2"),
        *lines.feed_all(
            "[OPENCV:FFMPEG:48] nal_unit_type: 9(AUD)[OPENCV:FFMPEG:16] "
            "method DESCRIBE failed: 401 Unauthorized"
        ),
        *lines.feed_all("[OPENCV:FFMPEG:48] SDP:"),
        *lines.feed_all("m=video 0 RTP/AVP 96"),
    ]
    assert fed == [
        ("error", "method DESCRIBE failed: 404 (Not Found)", "not_found"),
        ("debug", "nal_unit_type: 1(Coded slice), nal_ref_idc: 2", None),
        ("debug", "nal_unit_type: 9(AUD)", None),
        ("error", "method DESCRIBE failed: 401 Unauthorized", "unauthorized"),
        ("debug", "SDP:", None),
        ("debug", "m=video 0 RTP/AVP 96", None),
    ]


@pytest.mark.timeout(60)
def test_doctor_reports_a_missing_camera_without_opencv_noise(tmp_path):
    """`doctor` names the camera that does not open, with no raw OpenCV warning lines."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        f"state_dir: {tmp_path / 'state'}\nmqtt: {{host: 127.0.0.1, port: 1}}\n"
        'cameras: [{id: usb, source: "/dev/video9"}]\n'
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
    assert "FAIL camera usb  no_device: no such video device: /dev/video9" in proc.stdout
    assert "[ WARN" not in proc.stdout + proc.stderr
