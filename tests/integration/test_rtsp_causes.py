"""Against a real RTSP server (gst-rtsp-server, Basic auth): each failure names its cause.

A wrong password, a wrong path and a closed port each give their own camera status
``reason`` (retained) and ``doctor`` row; every line the agent writes is JSON at every
native_log_level; no secret of a camera URL appears in any log line, topic or printout.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_proc import ROOT, AgentProc
from tests.brokers import Broker, Recorder, free_port, wait_until
from tests.integration.test_native_log import _json_lines

SYSTEM_PYTHON = "/usr/bin/python3"
SERVER = Path(__file__).resolve().parent.parent / "rtsp_server.py"
SECRETS = ("SECRETPW", "SECRETTOK")
_CHECK = (
    "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0');"
    "from gi.repository import Gst, GstRtspServer; Gst.init(None);"
    "assert Gst.ElementFactory.find('x264enc')"
)


@pytest.fixture(scope="module")
def rtsp_port() -> Iterator[int]:
    """A gst-rtsp-server on a free loopback port serving /cam to user:SECRETPW."""
    try:
        subprocess.run([SYSTEM_PYTHON, "-c", _CHECK], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pytest.skip(
            "no GStreamer RTSP server: apt-get install gir1.2-gst-rtsp-server-1.0 python3-gi "
            "gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly"
        )
    port = free_port()
    proc = subprocess.Popen(
        [SYSTEM_PYTHON, str(SERVER), str(port), "user", "SECRETPW"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", "RTSP server did not start"
        yield port
    finally:
        proc.kill()
        proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def _cameras(port: int) -> list[dict[str, object]]:
    base = f"rtsp://user:SECRETPW@127.0.0.1:{port}"
    fast = {"open_timeout_s": 3.0, "reconnect_max_s": 2.0}
    return [
        {"id": "good", "source": f"{base}/cam?token=SECRETTOK", **fast},
        {"id": "badpw", "source": f"rtsp://user:wrong@127.0.0.1:{port}/cam", **fast},
        {"id": "badpath", "source": f"{base}/nosuch?token=SECRETTOK", **fast},
        {"id": "closed", "source": f"rtsp://user:SECRETPW@127.0.0.1:{free_port()}/cam", **fast},
    ]


EXPECTED = {"badpw": "unauthorized", "badpath": "not_found", "closed": "refused"}


def _statuses(rec: Recorder, device: str) -> dict[str, dict[str, object]]:
    """The latest camera status per camera."""
    got: dict[str, dict[str, object]] = {}
    for m in list(rec.messages):
        parts = m.topic.split("/")
        if len(parts) == 4 and parts[1] == device and parts[3] == "status" and m.payload:
            got[parts[2]] = m.json()
    return got


@pytest.mark.timeout(90)
@pytest.mark.parametrize("level", ["debug", "info", "warning", "error", "silent"])
def test_rtsp_failures_name_their_cause_in_status_and_log(
    rtsp_port: int, broker: Broker, recorder, tmp_path: Path, level: str
) -> None:
    """401, 404 and a closed port give unauthorized/not_found/refused; all JSON, no secret."""
    rec = recorder(broker, ["vision/#"])
    agent = AgentProc(
        broker, tmp_path, cameras=_cameras(rtsp_port), overrides={"native_log_level": level}
    )
    agent.start()
    try:

        def settled() -> bool:
            st = _statuses(rec, agent.device_id)
            return st.get("good", {}).get("state") == "streaming" and all(
                st.get(c, {}).get("reason") == r for c, r in EXPECTED.items()
            )

        assert wait_until(settled, 45, 0.2), (_statuses(rec, agent.device_id), agent.tail())
        statuses = _statuses(rec, agent.device_id)
    finally:
        assert agent.stop() == 0
    for camera in EXPECTED:
        assert statuses[camera]["state"] == "reconnecting"
        assert "cannot open" in str(statuses[camera]["detail"])
    events = _json_lines(agent.log_path.read_text())  # stdout and stderr, as journald sees
    logged = {
        (e.get("camera"), e.get("reason"))
        for e in events
        if e["event"] == "camera_state" and e["level"] == "error"
    }
    assert {(c, r) for c, r in EXPECTED.items()} <= logged
    native = [e for e in events if e["event"] == "native_output"]
    if level != "silent":  # FFmpeg's own 401/404 lines: errors naming their cause
        assert any(e["level"] == "error" and e.get("cause") == "unauthorized" for e in native)
        assert any(e["level"] == "error" and e.get("cause") == "not_found" for e in native)
    if level == "debug":
        assert any(e["level"] == "debug" for e in native)
    _docs_jq_filters_work(agent.log_path)
    everything = agent.log_path.read_text() + "".join(
        m.payload.decode(errors="replace") + m.topic for m in rec.messages
    )
    for secret in SECRETS:
        assert secret not in everything


def _docs_jq_filters_work(log: Path) -> None:
    """docs/operations.md's `journalctl ... | jq` lines parse this log (no `parse error`)."""
    if shutil.which("jq") is None:
        return
    text = (ROOT / "docs" / "operations.md").read_text()
    filters = re.findall(r"-o cat \| jq (-[cr]) '([^']+)'", text)
    assert len(filters) >= 3
    for flag, expr in filters:
        proc = subprocess.run(
            ["jq", flag, expr, str(log)], capture_output=True, text=True, timeout=30, check=False
        )
        assert proc.returncode == 0, (expr, proc.stderr)
        assert proc.stdout.strip() or "native_output" in expr, expr  # none when silent


@pytest.mark.timeout(90)
def test_doctor_names_rtsp_causes_without_secrets(rtsp_port: int, tmp_path: Path) -> None:
    """`doctor` at native_log_level debug: a reason per camera, no credential anywhere."""
    cfg = tmp_path / "agent.yaml"
    config = {
        "state_dir": str(tmp_path / "state"),
        "native_log_level": "debug",
        "mqtt": {"host": "127.0.0.1", "port": free_port()},
        "cameras": _cameras(rtsp_port),
    }
    cfg.write_text(json.dumps(config))
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "doctor", "--config", str(cfg)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert proc.returncode == 1
    rows = {line.split()[2]: line for line in proc.stdout.splitlines() if "camera " in line}
    assert rows["good"].lstrip().startswith("OK"), proc.stdout
    for camera, reason in EXPECTED.items():
        assert f"FAIL camera {camera}" in rows[camera] and f"{reason}: " in rows[camera]
    assert "connection refused" in proc.stdout  # the broker row says why, too
    for secret in SECRETS:
        assert secret not in proc.stdout + proc.stderr
    assert "Authorization: Basic ***" in proc.stderr or "Authorization" not in proc.stderr
