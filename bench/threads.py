"""The running agent's CPU time per thread and per frame: where the pipeline's cost goes.

    python bench/threads.py [--provider cpu|openvino] [--python PY] [--seconds 15]
                            [--rounds 3] [--layout 2x1] [--out FILE.json]

Runs the real agent (``python -m agent run``) on vtest.avi in a loop (``realtime: false``)
through a private mosquitto, waits until it has published ``--warm`` frames, then reads
every thread's CPU time (utime + stime) and context switches from /proc over a window of
``--seconds``, and divides them by the frames published in that window. Each round also
runs raw ``session.run`` in the same layout (bench/raw_ort.py, same model and provider):
the agent's CPU per frame less raw's is what the pipeline costs, split here by thread.

The agent names its OS threads (agent/osthread.py): ``infer-N`` (letterbox,
``session.run``, decode and NMS, the message and the spool insert), ``cap-<camera>``
(video decode), ``mqtt-sender``, ``mqtt-net`` (paho's network thread). Threads it did not
start (the main thread; any that onnxruntime, OpenVINO or FFmpeg start) keep the name
they have and are summed by name. Linux only (/proc). For OpenVINO, pass the interpreter
of a venv with onnxruntime-openvino (``--python``; bench/compare.py makes one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    MODELS,
    RESULTS,
    AgentVariant,
    agent_process,
    default_model,
    machine_info,
    machine_line,
    print_table,
    stat_cpu_s,
    subprocess_json,
)

BENCH = Path(__file__).resolve().parent
OPENVINO_MODEL = MODELS / "yolo11n-pose-640-int8-openvino.onnx"


def thread_times(pid: int) -> dict[int, tuple[str, float, int]]:
    """tid -> (OS thread name, CPU seconds so far, context switches so far)."""
    out: dict[int, tuple[str, float, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = Path(f"/proc/{pid}/task/{tid}")
        try:
            stat = (base / "stat").read_text()
            status = (base / "status").read_text().splitlines()
        except OSError:  # the thread ended between listdir and read
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        switches = sum(int(ln.split()[1]) for ln in status if "ctxt_switches" in ln)
        out[int(tid)] = (name, stat_cpu_s(stat), switches)
    return out


def agent_round(v: AgentVariant, warm: int, seconds: float) -> dict[str, Any]:
    """One agent run: per thread name, CPU ms and context switches per published frame."""
    work = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    try:
        with agent_process(v, work) as (proc, sub):
            deadline = time.monotonic() + 300
            while sub.count < warm:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = (work / "agent.log").read_text(errors="replace")[-1500:]
                    raise SystemExit(f"the agent published {sub.count} frames; log:\n{tail}")
                time.sleep(0.1)
            n0, t0, c0 = sub.count, thread_times(proc.pid), time.monotonic()
            time.sleep(seconds)
            n1, t1, c1 = sub.count, thread_times(proc.pid), time.monotonic()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frames = n1 - n0
    if frames <= 0:
        raise SystemExit(f"the agent published nothing in {seconds:.0f} s after warming up")
    per: dict[str, dict[str, float]] = {}
    for tid, (name, cpu1, sw1) in t1.items():
        _, cpu0, sw0 = t0.get(tid, (name, 0.0, 0))
        row = per.setdefault(name, {"cpu_ms": 0.0, "switches": 0.0})
        row["cpu_ms"] += (cpu1 - cpu0) / frames * 1e3
        row["switches"] += (sw1 - sw0) / frames
    return {"fps": frames / (c1 - c0), "frames": frames, "threads": per}


def raw_round(v: AgentVariant, frames: int) -> dict[str, Any]:
    """Raw ``session.run`` in the same layout, model and provider (bench/raw_ort.py)."""
    argv = [v.python, str(BENCH / "raw_ort.py"), "--model", str(v.model)]
    argv += ["--provider", v.provider, "--layout", v.layout, "--frames", str(frames)]
    return subprocess_json(argv, timeout=600)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", choices=["cpu", "openvino"], default="cpu")
    p.add_argument("--model", type=Path, default=None, help="default: the provider's INT8 file")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the agent")
    p.add_argument("--layout", default="2x1", help="SxT: S sessions x T threads")
    p.add_argument("--seconds", type=float, default=15.0, help="measured window per round")
    p.add_argument("--warm", type=int, default=200, help="frames published before the window")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--raw-frames", type=int, default=600, help="raw session.run calls per round")
    p.add_argument("--out", type=Path, default=RESULTS / "threads.json")
    a = p.parse_args()
    if not Path("/proc/self/task").is_dir():
        raise SystemExit("bench/threads.py reads /proc: Linux only")
    model = a.model or (OPENVINO_MODEL if a.provider == "openvino" else default_model())
    v = AgentVariant(
        "threads", model, layout=a.layout, provider=a.provider, python=a.python, loop=True
    )

    rounds: list[dict[str, Any]] = []
    for r in range(a.rounds):
        ag = agent_round(v, a.warm, a.seconds)
        raw = raw_round(v, a.raw_frames)
        ag["raw_cpu_ms"] = raw["cpu_ms_per_frame"]
        ag["raw_fps"] = raw["fps"]
        rounds.append(ag)
        total = sum(t["cpu_ms"] for t in ag["threads"].values())
        print(
            f"  round {r + 1}: agent {ag['fps']:.1f} fps, {total:.2f} CPU ms/frame; "
            f"raw {raw['fps']:.1f} fps, {raw['cpu_ms_per_frame']:.2f} CPU ms/frame",
            flush=True,
        )

    names = sorted({n for ag in rounds for n in ag["threads"]})
    rows = []
    for n in names:
        cpu = statistics.median(ag["threads"].get(n, {}).get("cpu_ms", 0.0) for ag in rounds)
        sw = statistics.median(ag["threads"].get(n, {}).get("switches", 0.0) for ag in rounds)
        if cpu >= 0.005 or sw >= 0.05:
            rows.append({"thread": n, "cpu_ms": cpu, "switches": sw})
    rows.sort(key=lambda r: -r["cpu_ms"])
    totals = [sum(t["cpu_ms"] for t in ag["threads"].values()) for ag in rounds]
    agent_ms = statistics.median(totals)
    raw_ms = statistics.median(ag["raw_cpu_ms"] for ag in rounds)
    rows.append({"thread": "agent, all threads", "cpu_ms": agent_ms})
    rows.append({"thread": "raw session.run (same layout)", "cpu_ms": raw_ms})
    rows.append({"thread": "pipeline cost (agent - raw)", "cpu_ms": agent_ms - raw_ms})
    for row in rows:
        row["share"] = 100 * row["cpu_ms"] / agent_ms
    info = machine_info(a.python)
    print(machine_line(info))
    fps = statistics.median(ag["fps"] for ag in rounds)
    raw_fps = statistics.median(ag["raw_fps"] for ag in rounds)
    print_table(
        f"{model.name}, {a.provider}, {a.layout}: agent {fps:.1f} frames/s, raw {raw_fps:.1f}/s; "
        f"per published frame, medians of {a.rounds} rounds",
        [
            ("thread", "thread", 0),
            ("cpu_ms", "CPU ms/frame", 3),
            ("share", "% of agent", 1),
            ("switches", "switches/frame", 2),
        ],
        rows,
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": info,
        "argv": sys.argv[1:],
        "model": model.name,
        "provider": a.provider,
        "layout": a.layout,
        "rounds": rounds,
        "agent_fps": fps,
        "raw_fps": raw_fps,
        "agent_cpu_ms_per_frame": agent_ms,
        "raw_cpu_ms_per_frame": raw_ms,
        "table": rows,
    }
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
