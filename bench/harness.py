"""Shared pieces of the benchmarks: a private mosquitto, the real agent as a subprocess, a
subscriber that records what the agent publishes, figures of the machine, and statistics.

Not a test helper: nothing here asserts. Every run writes its agent log and config into a
temporary work directory, kept when ``keep`` is set (for reading after a surprise).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
VIDEO = ROOT / "assets" / "vtest.avi"
MODELS = ROOT / "models"
RESULTS = ROOT / "bench" / "results"
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
DEVICE_ID = "bench"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edge-vision-agent"


def default_model(size: int = 640) -> Path:
    """INT8 at ``size`` when it has been built, else FP32."""
    for name in (f"yolo11n-pose-{size}-int8.onnx", f"yolo11n-pose-{size}-fp32.onnx"):
        if (MODELS / name).exists():
            return MODELS / name
    return MODELS / "yolo11n-pose-640-fp32.onnx"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


# -- statistics ---------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100.0 * len(s) + 0.5) - 1))
    return float(s[k])


def median(values: Sequence[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return float(statistics.median(v)) if v else None


def rnd(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def also_variants(specs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--also`` of the offline benches: variant name (the spec) -> its detector keys on
    top of the defaults (``recheck_s=0,sweep_s=0.5``: values read as JSON)."""
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        keys = dict(kv.split("=", 1) for kv in spec.split(","))
        out[spec] = {k: json.loads(v) for k, v in keys.items()}
    return out


def write_result(result: dict[str, Any], out: Path, t0: float) -> None:
    """``result``, with the seconds since ``t0`` (``time.monotonic()``) it took, as JSON at
    ``out`` (its folder made); says where."""
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out}")


def fmt(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def print_table(title: str, cols: list[tuple[str, str, int]], rows: list[dict[str, Any]]) -> str:
    """Plain aligned table; ``cols`` = (key, header, decimals). Returns the text printed."""
    widths = [max(len(h), *(len(fmt(r.get(k), nd)) for r in rows)) for k, h, nd in cols]
    lines = [
        title,
        "  ".join(
            h.rjust(w) if i else h.ljust(w)
            for i, ((_, h, _), w) in enumerate(zip(cols, widths, strict=True))
        ),
    ]
    for r in rows:
        cells = [fmt(r.get(k), nd) for k, _, nd in cols]
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def markdown_table(cols: list[tuple[str, str, int]], rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(h for _, h, _ in cols) + " |"
    sep = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|"
    body = ["| " + " | ".join(fmt(r.get(k), nd) for k, _, nd in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def sha256_short(path: Path) -> str:
    """First 12 hex digits of a file's sha256 (which build of a model was measured)."""
    from agent.detect.detector import sha256_file

    return sha256_file(path)[:12] if path.is_file() else "-"


# -- the machine --------------------------------------------------------------------------
#: CPU features that decide how fast INT8 (and FP32) inference runs, as /proc/cpuinfo
#: names them: INT8 speed-ups are far larger with a dot-product instruction (VNNI, dotprod).
INT8_ISA = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "amx_int8",
    "asimd",
    "asimddp",
    "i8mm",
)


def machine_line(info: dict[str, Any]) -> str:
    """One line naming the machine of ``machine_info``, for a bench's first output line."""
    isa = " ".join(info.get("isa") or []) or "?"
    return f"{info['nproc']} cores, {info['cpu']} ({isa}), onnxruntime {info.get('onnxruntime')}"


def machine_info(python: str | None = None) -> dict[str, Any]:
    """nproc, CPU model, memory, Python and onnxruntime versions (of ``python``)."""
    cpu = platform.processor() or platform.machine()
    isa: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith(("flags", "Features")) and not isa:
                flags = set(line.split(":", 1)[1].split())
                isa = [f for f in INT8_ISA if f in flags]
    mem_gb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
        mem_gb = round(kb / 1024 / 1024, 1)
    versions = subprocess.run(
        [
            python or sys.executable,
            "-c",
            "import json, onnxruntime as o, cv2, numpy as n; print(json.dumps("
            "{'onnxruntime': o.__version__, 'providers': o.get_available_providers(), "
            "'opencv': cv2.__version__, 'numpy': n.__version__}))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "isa": isa,
        "mem_gb": mem_gb,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load1_at_start": round(os.getloadavg()[0], 2),
    }
    with contextlib.suppress(ValueError, IndexError):  # an interpreter that printed nothing
        info.update(json.loads(versions.stdout.strip().splitlines()[-1]))
    return info


# -- other load on the machine -----------------------------------------------------------
def _busy_s() -> float:
    """CPU-seconds the whole machine spent busy since boot (all cores)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    """CPU-seconds of this process and its waited-for children."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class CpuWindow:
    """How busy the machine was during a measurement, ours vs everything else's.

    ``foreign_cores``: cores used by processes that are not this benchmark or its
    (finished, waited-for) children: other people's work on a shared machine. Runs with
    a high figure are disturbed and are repeated when the caller asks for it.
    """

    def __init__(self) -> None:
        self._t = time.monotonic()
        self._busy = _busy_s()
        self._own = _own_s()

    def close(self) -> dict[str, float]:
        wall = max(1e-6, time.monotonic() - self._t)
        busy = _busy_s() - self._busy
        own = _own_s() - self._own
        return {
            "own_cores": round(own / wall, 2),
            "foreign_cores": round(max(0.0, busy - own) / wall, 2),
        }


# -- broker -------------------------------------------------------------------------------
class Mosquitto:
    """A private mosquitto on a free 127.0.0.1 port, without persistence (not under test)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        conf = workdir / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\nuser root\n"
            "max_queued_messages 0\nlog_dest none\n"
        )
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if not wait_until(self._accepts, 10.0, 0.02):
            self.close()
            raise RuntimeError(f"mosquitto ({MOSQUITTO}) did not start on port {self.port}")

    def _accepts(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"mosquitto exited with {self.proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextlib.contextmanager
def broker(workdir: Path) -> Iterator[Mosquitto]:
    b = Mosquitto(workdir)
    try:
        yield b
    finally:
        b.close()


# -- subscriber ---------------------------------------------------------------------------
@dataclass
class Recording:
    """What the subscriber saw. Payloads are parsed after the run (keeps the CPU free)."""

    detections: list[tuple[float, bytes]] = field(default_factory=list)
    health: list[tuple[float, bytes]] = field(default_factory=list)
    camera_status: list[tuple[float, bytes]] = field(default_factory=list)
    events: list[tuple[float, bytes]] = field(default_factory=list)  # (wall time, payload)


class Subscriber:
    """Records detections, heartbeats and camera status of the bench device, QoS 1."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.rec = Recording()
        self.subscribed = threading.Event()
        self._client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=f"bench-sub-{os.getpid()}-{time.monotonic_ns()}",
            protocol=mqtt.MQTTv5,
        )
        base = f"vision/{DEVICE_ID}"
        self._base = base
        self._client.on_connect = lambda c, *a: c.subscribe(
            [
                (f"{base}/+/detections", 1),
                (f"{base}/health", 1),
                (f"{base}/+/status", 1),
                (f"{base}/+/events", 1),
            ]
        )
        self._client.on_subscribe = lambda *a: self.subscribed.set()
        self._client.on_message = self._on_message
        self._client.connect("127.0.0.1", port, keepalive=30)
        self._client.loop_start()
        if not self.subscribed.wait(10):
            raise RuntimeError("bench subscriber did not subscribe")

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        now = time.monotonic()
        topic: str = msg.topic
        if topic.endswith("/detections"):
            self.rec.detections.append((now, bytes(msg.payload)))
        elif topic == f"{self._base}/health":
            self.rec.health.append((now, bytes(msg.payload)))
        elif topic.endswith("/status") and topic.count("/") == 3:
            self.rec.camera_status.append((now, bytes(msg.payload)))
        elif topic.endswith("/events") and topic.count("/") == 3:
            # Wall time: events carry wall-clock times (start_ts, ts) to compare with.
            self.rec.events.append((time.time(), bytes(msg.payload)))

    @property
    def count(self) -> int:
        return len(self.rec.detections)

    def camera_offline(self) -> bool:
        return any(json.loads(p).get("state") == "offline" for _, p in self.rec.camera_status)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.disconnect()
        self._client.loop_stop()


# -- the agent ----------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentVariant:
    """One way to run the agent; ``layout`` is auto, or SxT (S sessions x T threads)."""

    name: str
    model: Path | None
    layout: str = "auto"
    spool: bool = True
    realtime: bool = False
    loop: bool = False
    provider: str = "cpu"  # cpu | openvino
    objects: bool = True  # tracker, zone, line and events (with one zone and one line)
    # detector.regions: the benches measure whole-frame throughput unless told otherwise;
    # None leaves it out (the agent's default: motion, since issue 23)
    regions: str | None = "full"
    python: str = sys.executable
    root: Path = ROOT  # the checkout whose agent runs (A/B of two versions)
    source: Path = VIDEO  # the video every camera plays
    cameras: int = 1  # copies of ``source``: cameras front, front2, front3, ...
    sources: tuple[Path, ...] = ()  # camera i plays sources[i] where given, else ``source``

    def detector(self) -> dict[str, Any]:
        # model None: the agent's default model for its region mode (issue 23)
        d: dict[str, Any] = {} if self.model is None else {"model": str(self.model)}
        if self.regions is not None:
            d["regions"] = self.regions
        if self.layout != "auto":
            s, t = (int(x) for x in self.layout.lower().split("x"))
            d["sessions"], d["threads"] = s, t
        if self.provider == "openvino":
            # The agent's own OpenVINO defaults; threads follow each session's budget. One
            # compiled-model cache for every run, and the one bench/raw_ort.py uses (its
            # --cache default, as with_defaults lays it out): only the first run compiles.
            d["providers"] = ["OpenVINOExecutionProvider"]
            opts = {"cache_dir": str(CACHE / "bench" / "provider-cache" / "openvino")}
            d["provider_options"] = {"OpenVINOExecutionProvider": opts}
        else:
            d["providers"] = ["CPUExecutionProvider"]
        return d


def stat_cpu_s(stat: str) -> float:
    """User + system CPU seconds from the text of a /proc ``stat`` file (process or task)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (all its threads)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return stat_cpu_s(Path(f"/proc/{pid}/stat").read_text())
    return None


def cpu_ms_per_frame(samples: list[tuple[int, float]], warm: int = 10) -> float | None:
    """Steady-state CPU per frame from (frames so far, CPU seconds) samples."""
    steady = [(n, c) for n, c in samples if n >= warm]
    if len(steady) < 2 or steady[-1][0] <= steady[0][0]:
        return None
    (n0, c0), (n1, c1) = steady[0], steady[-1]
    return (c1 - c0) / (n1 - n0) * 1e3


def _rss_kb(pid: int, key: str) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


@dataclass
class AgentRun:
    """Raw material of one agent run, summarised by ``summarise``."""

    variant: AgentVariant
    rec: Recording
    started: float
    ended: float
    rss_samples: list[tuple[int, float]]  # (messages so far, VmRSS MB) from /proc
    cpu_samples: list[tuple[int, float]]  # (messages so far, agent CPU seconds)
    peak_rss_mb: float | None
    exit_code: int | None
    log_tail: str
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_wall: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, CPU s)


def agent_config(v: AgentVariant, port: int, state_dir: Path) -> dict[str, Any]:
    """The agent's YAML config for one variant: ``v.source`` (vtest.avi) as camera
    ``front`` (and ``front2``, ``front3``, ... with ``v.cameras`` > 1)."""
    cameras: list[dict[str, Any]] = []
    for i in range(v.cameras):
        camera: dict[str, Any] = {
            "id": camera_id(i),
            "source": str(v.sources[i] if i < len(v.sources) else v.source),
            "loop": v.loop,
            "realtime": v.realtime,
        }
        if v.objects:  # the objects stage with work to do: a zone and a line across the street
            camera["zones"] = {"street": {"polygon": [[0, 0.3], [1, 0.3], [1, 0.8], [0, 0.8]]}}
            camera["lines"] = {"middle": {"points": [[0.5, 0.0], [0.5, 1.0]]}}
        cameras.append(camera)
    return {
        "device_id": DEVICE_ID,
        "state_dir": str(state_dir),
        "log_level": "info",
        "mqtt": {"host": "127.0.0.1", "port": port, "keepalive_s": 30},
        "cameras": cameras,
        "detector": v.detector(),
        "spool": {"enabled": v.spool},
        "objects": {"enabled": v.objects},
        "health": {"interval_s": 1.0},
        "publish": {"summary_interval_s": 30.0},
    }


def camera_id(index: int) -> str:
    """Id of the ``index``-th (0-based) camera of a variant: front, front2, front3, ..."""
    return "front" if index == 0 else f"front{index + 1}"


@dataclass
class _Watch:
    """Polls a running agent: when to stop, and its memory once a second."""

    proc: subprocess.Popen[bytes]
    sub: Subscriber
    v: AgentVariant
    rss: list[tuple[int, float]] = field(default_factory=list)
    cpu: list[tuple[int, float]] = field(default_factory=list)
    cpu_wall: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, CPU s)
    peak_mb: float | None = None

    def until_done(
        self, frames: int | None, seconds: float | None, timeout: float, quiet_s: float
    ) -> None:
        t0 = last_change = next_rss = time.monotonic()
        last_n = 0
        while self.proc.poll() is None:
            now = time.monotonic()
            n = self.sub.count
            if n != last_n:
                last_n, last_change = n, now
            if now >= next_rss:
                next_rss = now + 1.0
                self._sample(n)
            dets = self.sub.rec.detections
            if (
                (frames is not None and n >= frames)
                or (seconds is not None and dets and now - dets[0][0] >= seconds)
                or (not self.v.loop and self.sub.camera_offline() and now - last_change >= quiet_s)
            ):
                return
            if now - t0 > timeout:
                print(f"  ! {self.v.name}: timed out after {timeout:.0f} s", flush=True)
                return
            time.sleep(0.05)

    def _sample(self, n: int) -> None:
        cpu = _cpu_s(self.proc.pid)
        if cpu is not None:
            self.cpu.append((n, cpu))
            self.cpu_wall.append((time.monotonic(), cpu))
        kb = _rss_kb(self.proc.pid, "VmRSS")
        if kb is not None:
            self.rss.append((n, kb / 1024))
        hwm = _rss_kb(self.proc.pid, "VmHWM")
        if hwm is not None:
            self.peak_mb = hwm / 1024


def stop_agent(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the agent's graceful stop), SIGKILL if it has not ended after 20 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def agent_process(
    v: AgentVariant, work: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Subscriber]]:
    """The agent of ``v`` running against a private mosquitto, and a subscriber to its
    topics; the agent is stopped and the subscriber closed on exit. Its config and log
    (``agent.log``) are in ``work``."""
    with broker(work) as b:
        sub = Subscriber(b.port)
        cfg = work / "agent.yaml"
        cfg.write_text(yaml.safe_dump(agent_config(v, b.port, work / "state")))
        with (work / "agent.log").open("wb") as log:
            proc = subprocess.Popen(
                [v.python, "-m", "agent", "run", "--config", str(cfg), "--log-format", "json"],
                cwd=v.root,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            yield proc, sub
        finally:
            stop_agent(proc)
            sub.close()


def subprocess_json(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run a benchmark script that prints one JSON line; that line, plus the CPU window
    (foreign load) of the run. RuntimeError if it fails."""
    window = CpuWindow()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    cpu = window.close()
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {r.stderr.strip()[-600:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    out.update(cpu)
    return out


def run_agent(
    v: AgentVariant,
    *,
    frames: int | None = None,
    seconds: float | None = None,
    timeout: float = 600.0,
    keep: bool = False,
    quiet_s: float = 2.0,
) -> AgentRun:
    """Run the agent until ``frames`` messages arrived, ``seconds`` passed, or the file ended.

    With ``loop: false`` a file's end is seen as the camera's ``offline`` status followed by
    ``quiet_s`` without a new message.
    """
    work = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    window = CpuWindow()
    try:
        with agent_process(v, work) as (proc, sub):
            t0 = time.monotonic()
            watch = _Watch(proc, sub, v)
            try:
                watch.until_done(frames, seconds, timeout, quiet_s)
            finally:
                t_end = time.monotonic()
        tail = (work / "agent.log").read_text(errors="replace")[-3000:]
        run = AgentRun(
            v, sub.rec, t0, t_end, watch.rss, watch.cpu, watch.peak_mb, proc.returncode, tail
        )
        run.cpu = window.close()
        run.cpu_wall = watch.cpu_wall
        return run
    finally:
        if keep:
            print(f"  (kept {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)


def summarise(run: AgentRun, *, skip: int = 5, limit: int | None = None) -> dict[str, Any]:
    """FPS between first and last message, latency percentiles, heartbeat figures.

    ``skip`` first messages are left out of the latency figures (session warm-up). FPS
    counts the messages that arrived while the agent ran: the few frames in flight when it
    was told to stop are published during its shutdown, which is not its throughput.
    """
    dets = run.rec.detections[:limit] if limit else run.rec.detections
    out: dict[str, Any] = {"variant": run.variant.name, "messages": len(dets)}
    running = [t for t, _ in dets if t <= run.ended]
    if len(running) >= 2:
        span = running[-1] - running[0]
        out["fps"] = (len(running) - 1) / span if span > 0 else None
    parsed = [json.loads(p) for _, p in dets]
    seqs = [m["seq"] for m in parsed]
    out["seq_gaps"] = sum(1 for a, b in itertools.pairwise(seqs) if b != a + 1)
    lat = parsed[skip:] if len(parsed) > skip * 2 else parsed
    c2p = [m["latency_ms"]["capture_to_publish"] for m in lat]
    inf = [m["latency_ms"]["inference"] for m in lat]
    out["c2p_p50"] = percentile(c2p, 50)
    out["c2p_p99"] = percentile(c2p, 99)
    out["infer_p50"] = percentile(inf, 50)
    out["infer_p99"] = percentile(inf, 99)
    out["people_mean"] = statistics.fmean(len(m["detections"]) for m in parsed) if parsed else None
    hbs = [json.loads(p) for _, p in run.rec.health]
    # Heartbeats once the stream runs (skip the first, taken before any frame was processed).
    steady = [h for h in hbs[1:] if h["cameras"].get("front", {}).get("fps_processed", 0) > 0]
    if steady:
        tail = steady[len(steady) // 3 :] or steady
        out["hb_fps_in"] = median([h["cameras"]["front"]["fps_in"] for h in tail])
        out["hb_fps_processed"] = median([h["cameras"]["front"]["fps_processed"] for h in tail])
        out["hb_cpu_percent"] = median([h["system"]["cpu_percent"] for h in tail])
        out["hb_frames_dropped"] = tail[-1]["cameras"]["front"]["frames_dropped"]
        out["hb_infer_p50"] = tail[-1]["inference"]["latency_ms"]["p50"]
    if hbs:
        out["hb_rss_mb_max"] = max(h["system"]["rss_mb"] for h in hbs)
    out["cpu_ms_per_frame"] = cpu_ms_per_frame(run.cpu_samples)
    out["peak_rss_mb"] = rnd(run.peak_rss_mb)
    out["exit_code"] = run.exit_code
    out.update(run.cpu)
    return out


def wait_quiet(max_foreign: float, timeout: float) -> float:
    """Wait (up to ``timeout`` s) until other processes use at most ``max_foreign`` cores,
    measured over 1 s while nothing of ours runs; returns the last figure."""
    deadline = time.monotonic() + timeout
    while True:
        window = CpuWindow()
        time.sleep(1.0)
        busy = window.close()["foreign_cores"]
        if busy <= max_foreign or time.monotonic() >= deadline:
            return busy
        time.sleep(2.0)


def least_disturbed(
    measure: Callable[[], dict[str, Any]],
    max_foreign: float,
    retries: int,
    quiet_wait_s: float = 0.0,
) -> dict[str, Any]:
    """Run ``measure`` again (up to ``retries`` times) while other processes used more than
    ``max_foreign`` cores during it; return the least disturbed result. With
    ``quiet_wait_s``, each attempt first waits up to that long for the machine to be quiet."""
    best: dict[str, Any] | None = None
    for attempt in range(retries + 1):
        if quiet_wait_s > 0:
            wait_quiet(max_foreign, quiet_wait_s)
        r = measure()
        r["attempts"] = attempt + 1
        if best is None or r.get("foreign_cores", 0) < best.get("foreign_cores", 0):
            best = r
        if r.get("foreign_cores", 0) <= max_foreign:
            break
        print(f"    (disturbed: {r.get('foreign_cores')} foreign cores; measuring again)")
    assert best is not None
    return best
