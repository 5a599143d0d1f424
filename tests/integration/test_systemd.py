"""The systemd unit, its drop-ins and install.sh: systemd's own checks, and the agent under
the unit's sandbox rules (MemoryDenyWriteExecute, the system call filter).

No systemd runs inside the test environment, so the sandbox is reproduced piecewise: the
unit files go through `systemd-analyze verify` and `security --offline=yes`; the real
agent runs under the same seccomp filter systemd installs for MemoryDenyWriteExecute=yes
(tests/integration/_mdwe_exec.py) and under strace, whose system calls are checked
against the unit's SystemCallFilter sets as systemd itself expands them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.settings import load_settings
from tests.agent_proc import ROOT, AgentProc
from tests.brokers import wait_until
from tests.shims import build_shim

SYSTEMD = ROOT / "systemd"
UNIT = SYSTEMD / "edge-vision-agent.service"
INSTALL = SYSTEMD / "install.sh"
DROP_INS = ("jetson", "openvino")
MAX_EXPOSURE = 2.5
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze is not installed (apt-get install systemd)"
)
#: System calls outside the unit's filter that the agent's libraries make and survive the
#: EPERM (SystemCallErrorNumber=EPERM) returned for them.
TOLERATED = {
    "mbind": "OpenBLAS (numpy, OpenCV) NUMA placement hint; its result is ignored",
    # On Intel CPUs onnxruntime's CPU probe pins a short-lived thread to each core (to read
    # its core type); refused, it stops probing and the sessions run as before: see
    # test_onnxruntime_runs_with_sched_setaffinity_refused.
    "sched_setaffinity": "onnxruntime's per-core CPU probe on Intel; failure is harmless",
}
if os.geteuid() == 0:
    # SQLite fchown()s its journal/WAL only when running as root; the service never is.
    TOLERATED |= {"fchown": "SQLite, root only", "fchownat": "root only"}


def _unit_entries(text: str) -> dict[str, list[str]]:
    """``Key -> [values]`` of a unit file (repeated keys accumulate, like systemd)."""
    entries: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        entries.setdefault(key.strip(), []).append(value.strip())
    return entries


def _unit_copy(directory: Path, drop_in: str | None = None) -> Path:
    """The unit with ExecStart pointing at a binary that exists here (verify checks it)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = UNIT.read_text()
    exec_line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    binary = exec_line.removeprefix("ExecStart=").split()[0]
    unit = directory / UNIT.name
    unit.write_text(text.replace(f"ExecStart={binary}", f"ExecStart={sys.executable}"))
    if drop_in is not None:
        d = directory / f"{UNIT.name}.d"
        d.mkdir()
        shutil.copy(SYSTEMD / f"{drop_in}.conf", d / f"{drop_in}.conf")
    return unit


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, *args], capture_output=True, text=True, timeout=60, check=False)


# -- static checks ------------------------------------------------------------------------
def test_unit_declares_the_service_contract():
    """notify + watchdog, restart policy, dedicated user, directories, paths install.sh uses."""
    e = _unit_entries(UNIT.read_text())
    assert e["Type"] == ["notify"] and e["NotifyAccess"] == ["main"]
    assert e["WatchdogSec"] == ["30"] and e["Restart"] == ["on-failure"]
    assert e["StateDirectory"] == ["edge-vision-agent"]
    assert e["ConfigurationDirectory"] == ["edge-vision-agent"]
    assert e["ExecStart"] == [
        "/opt/edge-vision-agent/venv/bin/edge-agent run --config /etc/edge-vision-agent/agent.yaml"
    ]
    assert "ORT_DISABLE_TELEMETRY=1" in e["Environment"]
    assert e["MemoryDenyWriteExecute"] == ["yes"] and e["DevicePolicy"] == ["closed"]
    sysusers = (SYSTEMD / "edge-vision-agent.sysusers").read_text().split("\n")
    (user_line,) = [ln for ln in sysusers if ln.startswith("u ")]
    assert user_line.split()[1] == e["User"][0] == "edge-agent"
    install = INSTALL.read_text()
    assert "readonly DEFAULT_PREFIX=/opt/edge-vision-agent" in install
    assert 'VENV="$PREFIX/venv"' in install
    assert "readonly CONF_DIR=/etc/edge-vision-agent" in install


@needs_analyze
@pytest.mark.parametrize("drop_in", [None, *DROP_INS])
def test_systemd_analyze_verify(tmp_path, drop_in):
    """`systemd-analyze verify` accepts the unit, alone and with each drop-in, silently."""
    unit = _unit_copy(tmp_path, drop_in)
    r = _analyze("verify", "--man=no", str(unit))
    ours = [ln for ln in r.stderr.splitlines() if UNIT.name in ln or str(tmp_path) in ln]
    assert r.returncode == 0 and not ours, r.stderr


@needs_analyze
@pytest.mark.parametrize("drop_in", [None, *DROP_INS])
def test_security_exposure_at_most_2_5(tmp_path, drop_in):
    """`systemd-analyze security --offline=yes` rates the unit (and drop-ins) <= 2.5."""
    unit = _unit_copy(tmp_path, drop_in)
    r = _analyze("security", "--offline=yes", "--no-pager", str(unit))
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", r.stdout)
    assert match, r.stdout[-2000:] + r.stderr
    exposure = float(match.group(1))
    print(f"exposure {drop_in or 'base'}: {exposure}")
    assert exposure <= MAX_EXPOSURE, r.stdout


def test_install_script_parses():
    """install.sh is valid bash (bash -n), and passes shellcheck where it is installed."""
    r = subprocess.run(
        ["bash", "-n", str(INSTALL)], capture_output=True, text=True, timeout=30, check=False
    )
    assert r.returncode == 0, r.stderr
    assert os.access(INSTALL, os.X_OK), "install.sh must be executable"
    if shutil.which("shellcheck"):
        r = subprocess.run(
            ["shellcheck", "-S", "warning", str(INSTALL)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert r.returncode == 0, r.stdout


def _install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=60, check=False
    )


#: What the config written by an install with onnxruntime-openvino names for OpenVINO.
OV_MODEL = "/opt/edge-vision-agent/models/yolo11n-pose-320-int8-openvino.onnx"
OV_ENTRY = f"OpenVINOExecutionProvider: {OV_MODEL}"


@pytest.mark.parametrize(
    ("args", "expect", "absent"),
    [
        (
            ["--dry-run"],
            ["+ systemctl enable edge-vision-agent.service", "+ systemctl restart"],
            ["jetson", OV_ENTRY],
        ),
        (
            ["--dry-run", "--ort", "onnxruntime-openvino"],
            ["openvino.conf", OV_ENTRY],
            ["jetson.conf"],
        ),
        (
            ["--dry-run", "--jetson", "--no-start"],
            ["jetson.conf", "--system-site-packages"],
            ["+ systemctl restart"],
        ),
    ],
)
def test_install_dry_run_plans_the_steps(args, expect, absent):
    """--dry-run prints venv, unit, drop-in and systemctl steps and changes nothing."""
    r = _install(*args)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for needle in ["-m venv", "/etc/systemd/system/edge-vision-agent.service", *expect]:
        assert needle in out, (needle, out)
    for needle in absent:
        assert needle not in out, (needle, out)
    assert "journalctl -u edge-vision-agent -f" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dry-run", "--ort", "tensorflow"], "--ort must be"),
        (["--dry-run", "--prefix", "relative/dir"], "absolute path"),
        (["--dry-run", "--bogus"], "unknown option"),
    ],
)
def test_install_rejects_bad_options(args, message):
    """Invalid options fail before touching anything, with a message saying why."""
    r = _install(*args)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def _render(*ort: str) -> str:
    """The config install.sh writes under /opt/edge-vision-agent (with ``--ort`` if given)."""
    argv = [sys.executable, str(SYSTEMD / "render_config.py"), str(ROOT / "configs" / "agent.yaml")]
    argv += ["/opt/edge-vision-agent", *ort]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


def test_rendered_config_is_a_valid_service_config(tmp_path, monkeypatch):
    """The config install.sh writes loads, reads /dev/video0, and leaves state_dir to systemd."""
    text = _render()
    data = yaml.safe_load(text)
    assert "state_dir" not in data
    assert data["cameras"] == [{"id": "front", "source": "/dev/video0"}]
    # No model named: the agent takes the bundled file best at each look (issue 38), from
    # PREFIX/models beside its virtualenv.
    assert "model" not in data["detector"]
    # Several providers (onnxruntime-openvino, -gpu) are timed, not taken in order.
    assert data["detector"]["select"] == "benchmark"
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/edge-vision-agent")
    settings = load_settings(path)
    assert settings.state_dir == Path("/var/lib/edge-vision-agent")
    assert settings.detector.select == "benchmark"


def test_openvino_install_gives_openvino_its_own_model(tmp_path):
    """--ort onnxruntime-openvino: OpenVINO runs the bundled *-int8-openvino model and the
    CPU provider the default INT8 one; select: benchmark times the two pairs."""
    text = _render("onnxruntime-openvino")
    detector = yaml.safe_load(text)["detector"]
    assert "model" not in detector
    assert detector["provider_models"] == {"OpenVINOExecutionProvider": OV_MODEL}
    assert detector["select"] == "benchmark"
    assert (ROOT / "models" / Path(OV_MODEL).name).is_file()
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    settings = load_settings(path)
    assert settings.detector.provider_models == {"OpenVINOExecutionProvider": Path(OV_MODEL)}


@pytest.mark.parametrize(
    ("board", "model", "fps", "mode"),
    [
        ("pi", "yolo11n-pose-320-int8-arm.onnx", 5, "on_change"),
        ("jetson", "yolo11n-pose-640-fp32.onnx", None, "every_frame"),
    ],
)
def test_board_installs_get_a_model_they_keep_up_with(tmp_path, board, model, fps, mode):
    """A Pi gets the 320 INT8 model at 5 frames/s publishing on change, a Jetson FP32."""
    text = _render("onnxruntime", board)
    data = yaml.safe_load(text)
    assert data["detector"]["model"] == f"/opt/edge-vision-agent/models/{model}"
    assert (ROOT / "models" / model).is_file()
    assert data["cameras"][0].get("fps") == fps
    assert data["publish"]["mode"] == mode
    assert "mqtt.host: your broker" in text
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    assert load_settings(path).publish.mode == mode


def test_install_dry_run_on_a_pi_writes_the_pi_config():
    """install.sh --pi (what a Pi detects by itself) writes the ARM 320 model, not the 640."""
    r = _install("--dry-run", "--pi", "--no-start")
    assert r.returncode == 0, r.stderr
    assert "models/yolo11n-pose-320-int8-arm.onnx" in r.stdout
    assert "yolo11n-pose-640" not in r.stdout.split("write /etc/edge-vision-agent/agent.yaml", 1)[1]
    assert "mode: on_change" in r.stdout


# -- the agent under the unit's sandbox rules ---------------------------------------------
class WrappedAgent(AgentProc):
    """AgentProc started through a wrapper command (a seccomp launcher, strace)."""

    def __init__(self, wrapper: list[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wrapper = wrapper

    def start(self) -> WrappedAgent:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                *self.wrapper,
                sys.executable,
                "-m",
                "agent",
                "run",
                "--config",
                str(self.config_path),
                "--log-format",
                "json",
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        return self


# The environment the unit gives the service.
SERVICE_ENV = {"ORT_DISABLE_TELEMETRY": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _published(rec, base: str, n: int, timeout: float) -> bool:
    return rec.wait_for(lambda r: len(r.on(f"{base}/front/detections")) >= n, timeout)


@pytest.mark.timeout(120)
def test_agent_runs_under_memory_deny_write_execute(broker, recorder, tmp_path):
    """numpy, OpenCV and the onnxruntime CPU provider need no W+X memory: detections flow."""
    probe = subprocess.run(
        [sys.executable, "-m", "tests.integration._mdwe_exec", "true"],
        cwd=ROOT,
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode == 97:
        pytest.skip("this kernel/architecture cannot install the seccomp filter")
    assert probe.returncode == 0, probe.stderr
    rec = recorder(broker, ["vision/#"])
    agent = WrappedAgent(
        [sys.executable, "-m", "tests.integration._mdwe_exec"], broker, tmp_path, env=SERVICE_ENV
    ).start()
    try:
        assert _published(rec, agent.topic_base, 10, 90), agent.tail()
        assert agent.stop(20) == 0, agent.tail()
    finally:
        agent.close()


def _filter_groups() -> dict[str, list[str]]:
    """systemd's system call groups, as `systemd-analyze syscall-filter` lists them."""
    out = _analyze("syscall-filter", "--no-pager").stdout
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line[:1].isspace() and line.strip()[:1] not in ("", "#"):
            current.append(line.strip())
    return groups


def _expand(name: str, groups: dict[str, list[str]]) -> set[str]:
    if not name.startswith("@"):
        return {name}
    return set().union(*(_expand(m, groups) for m in groups[name]))


def _strace_summary(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            names.add(fields[-1])
    return names


def _child_pid(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    return None


@needs_analyze
@pytest.mark.timeout(180)
def test_agent_system_calls_pass_the_unit_filter(broker, recorder, tmp_path):
    """Every system call of a running agent is in @system-service minus @privileged/@resources."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    probe = subprocess.run(
        [strace, "-f", "-qq", "-o", os.devnull, "true"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode()[:200]}")
    unit = _unit_entries(UNIT.read_text())
    assert unit["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    groups = _filter_groups()
    allowed = _expand("@system-service", groups) - _expand("@privileged", groups)
    allowed -= _expand("@resources", groups)

    summary = tmp_path / "strace.txt"
    rec = recorder(broker, ["vision/#"])
    agent = WrappedAgent(
        [strace, "-f", "-qq", "-c", "-o", str(summary)], broker, tmp_path, env=SERVICE_ENV
    ).start()
    assert agent.proc is not None
    try:
        # Long enough for a heartbeat, a file-source loop and spool traffic.
        assert _published(rec, agent.topic_base, 20, 120), agent.tail()
        time.sleep(2)
        child = _child_pid(agent.proc.pid)
        assert child is not None, "cannot find the traced agent"
        os.kill(child, signal.SIGTERM)
        assert agent.proc.wait(60) == 0, agent.tail()
    finally:
        if agent.proc.poll() is None:
            child = _child_pid(agent.proc.pid)
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
        agent.close()
    assert wait_until(summary.exists, 5)
    used = _strace_summary(summary)
    assert {"openat", "futex", "sendto"} <= used, sorted(used)
    outside = sorted(used - allowed - set(TOLERATED))
    assert not outside, f"system calls the unit would refuse with EPERM: {outside}"


_NO_AFFINITY_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *mask) {
    (void)pid; (void)size; (void)mask;
    fputs("sched_setaffinity refused\\n", stderr);
    errno = EPERM;
    return -1;
}
"""

_DETECT_BUS = """
import os, sys
from pathlib import Path
try:
    os.sched_setaffinity(0, os.sched_getaffinity(0))
    print("affinity-allowed")
except PermissionError:
    print("affinity-refused")
from agent.cv import cv2
from agent.detect.detector import Detector
from agent.detect.runtime import SessionSpec
for threads in (1, 2):
    det = Detector(Path(sys.argv[1]), SessionSpec(providers=("cpu",), threads=threads))
    print(threads, int((det.detect(cv2.imread(sys.argv[2])).detections.score > 0.5).sum()))
"""


@pytest.mark.timeout(120)
def test_onnxruntime_runs_with_sched_setaffinity_refused(tmp_path):
    """What the unit's filter does to sched_setaffinity (EPERM) leaves detection unchanged."""
    lib = build_shim(_NO_AFFINITY_C, tmp_path, "noaff")
    argv = [sys.executable, "-c", _DETECT_BUS, str(ROOT / "models" / "yolo11n-pose-320-int8.onnx")]
    argv.append(str(ROOT.parent / "shared" / "data" / "media" / "bus.jpg"))
    runs = {}
    for preload in ("", str(lib)):
        env = {**os.environ, "LD_PRELOAD": preload}
        r = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        runs[preload] = r.stdout.split()
    plain, refused = runs[""], runs[str(lib)]
    assert plain[0] == "affinity-allowed" and refused[0] == "affinity-refused", runs
    # Same people found with 1 and 2 threads, with and without sched_setaffinity.
    assert plain[1:] == refused[1:] and plain[2] != "0", runs
