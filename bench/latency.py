"""Per-stage detector latency, FP32 vs INT8, 640 and 320, 1 and 2 threads, in one run.

    python bench/latency.py [--rounds 60] [--warmup 5] [--sizes 640 320] [--threads 1 2]
                            [--video assets/vtest.avi] [--also INT8.onnx ...]
                            [--out bench/results/latency.json]

Every configuration (model x threads) has its own ``Detector`` (the agent's own session
setup: CPU provider, ``allow_spinning=0``, graph optimisations on). Each round runs every
configuration once on the same real frame, in turn, so background load hits all of them
alike; the frames rotate through evenly spaced frames of the video. Reported per stage:
median, p95 and min over the rounds after warm-up; the ratio is FP32 / INT8 median
inference, and also of the fastest runs (closest to an idle machine: on a shared 2-core
box a busy neighbour takes the second core and 2-thread medians look like 1-thread ones).
``--also``: more INT8 files (another recipe, the file before a change) timed in the same
rounds as the bundled pair of their input size, each with its own FP32 / file ratio.

For 1-thread configurations ONNX Runtime runs on the calling thread, so the thread's CPU
time (``inference_cpu_ms``) is also reported: it does not count time the thread waited
for a core, and stays meaningful on a machine shared with other work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.detect.detector import Detector, Thresholds
from agent.detect.runtime import SessionSpec
from agent.modeltools import media

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("preprocess", "inference", "postprocess")


@dataclass
class Config:
    size: int
    precision: str
    threads: int
    detector: Detector
    samples: dict[str, list[float]]

    @property
    def key(self) -> str:
        return f"{self.size}-{self.precision}-t{self.threads}"


def _record_cpu(config: Config) -> None:
    """Wrap the detector's session run to record the calling thread's CPU time (ms)."""
    runtime = config.detector.runtime
    inner = runtime.run

    def run(tensor: Any) -> Any:
        t0 = time.thread_time()
        out = inner(tensor)
        config.samples["cpu"].append((time.thread_time() - t0) * 1e3)
        return out

    runtime.run = run  # type: ignore[method-assign]


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p)) if values else float("nan")


def model_path(size: int, precision: str, models: Path) -> Path:
    return models / f"yolo11n-pose-{size}-{precision}.onnx"


def _config(path: Path, precision: str, threads: int, args: argparse.Namespace) -> Config:
    """A warmed-up detector for ``path`` whose session run records its thread's CPU time."""
    det = Detector(
        path,
        SessionSpec(providers=("cpu",), threads=threads),
        thresholds=Thresholds(conf=args.conf),
    )
    det.warmup(2)
    size = det.info.input_hw[0]
    config = Config(size, precision, threads, det, {s: [] for s in (*STAGES, "cpu")})
    _record_cpu(config)
    return config


def _configs(args: argparse.Namespace) -> list[Config]:
    """The bundled FP32/INT8 pair per size and thread count, then every ``--also`` file."""
    configs: list[Config] = []
    for size in args.sizes:
        for threads in args.threads:
            for precision in ("fp32", "int8"):
                path = model_path(size, precision, args.models)
                if not path.is_file():
                    raise SystemExit(f"latency: {path} not found (build it: models/build.sh)")
                configs.append(_config(path, precision, threads, args))
    for path in args.also:
        if not path.is_file():
            raise SystemExit(f"latency: --also {path} not found")
        for threads in args.threads:
            config = _config(path, path.name, threads, args)
            if config.size not in args.sizes:
                raise SystemExit(f"latency: --also {path} is {config.size} px, not one of --sizes")
            configs.append(config)
    return configs


def _row(c: Config) -> dict[str, Any]:
    row: dict[str, Any] = {
        "size": c.size,
        "precision": c.precision,
        "threads": c.threads,
        "model": c.detector.info.path.replace(str(ROOT) + os.sep, ""),
    }
    for s in STAGES:
        row[f"{s}_ms"] = {
            "median": round(statistics.median(c.samples[s]), 2),
            "p95": round(pct(c.samples[s], 95), 2),
            "min": round(min(c.samples[s]), 2),
        }
    row["inference_cpu_ms"] = (
        round(statistics.median(c.samples["cpu"]), 2) if c.threads == 1 else None
    )
    return row


def _ratio(fp: dict[str, Any], i8: dict[str, Any]) -> dict[str, Any]:
    """FP32 / candidate median (and fastest-run, and 1-thread CPU-time) inference ratios."""
    ratio: dict[str, Any] = {
        "size": fp["size"],
        "threads": fp["threads"],
        "candidate": i8["precision"],
        "fp32_ms": fp["inference_ms"]["median"],
        "int8_ms": i8["inference_ms"]["median"],
        "speedup": round(fp["inference_ms"]["median"] / i8["inference_ms"]["median"], 2),
        # Fastest runs: what an otherwise idle machine gives (robust to neighbours).
        "speedup_min": round(fp["inference_ms"]["min"] / i8["inference_ms"]["min"], 2),
    }
    if fp["threads"] == 1:
        ratio["speedup_cpu_time"] = round(fp["inference_cpu_ms"] / i8["inference_cpu_ms"], 2)
    return ratio


def run(args: argparse.Namespace) -> dict[str, Any]:
    planned = media.plan(media.collect([args.video]), args.frames)
    frames = [f.image for f in media.iter_frames(planned)]
    configs = _configs(args)
    load_before = os.getloadavg()
    for r in range(args.warmup + args.rounds):
        frame = frames[r % len(frames)]
        for c in configs:
            result = c.detector.detect(frame)
            if r < args.warmup:
                c.samples["cpu"].clear()
                continue
            t = result.times
            c.samples["preprocess"].append(t.preprocess_ms)
            c.samples["inference"].append(t.inference_ms)
            c.samples["postprocess"].append(t.postprocess_ms)
    rows = [_row(c) for c in configs]
    ratios = [
        _ratio(fp, i8)
        for fp in rows
        if fp["precision"] == "fp32"
        for i8 in rows
        if i8["precision"] != "fp32" and (i8["size"], i8["threads"]) == (fp["size"], fp["threads"])
    ]
    import onnxruntime

    return {
        "machine": {
            "cpu": _cpu_name(),
            "nproc": os.cpu_count(),
            "arch": platform.machine(),
            "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__,
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {
            "rounds": args.rounds,
            "warmup": args.warmup,
            "frames": len(frames),
            "video": Path(args.video).name,
            "provider": "CPUExecutionProvider",
            "conf": args.conf,
        },
        "results": rows,
        "ratios": ratios,
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(
        f"{m['cpu']} x{m['nproc']}, onnxruntime {m['onnxruntime']}, "
        f"load {m['loadavg_before'][0]} -> {m['loadavg_after'][0]}; "
        f"{report['settings']['rounds']} rounds, medians (p95) in ms"
    )
    head = f"{'model':<18}{'thr':>4}{'preprocess':>16}{'inference':>18}{'infer cpu':>11}"
    print(head + f"{'decode+NMS':>16}")
    for r in report["results"]:
        cells = [f"{r[f'{s}_ms']['median']:.1f} ({r[f'{s}_ms']['p95']:.1f})" for s in STAGES]
        cpu = "-" if r["inference_cpu_ms"] is None else f"{r['inference_cpu_ms']:.1f}"
        name = f"{r['size']} {r['precision']}"
        print(f"{name:<18}{r['threads']:>4}{cells[0]:>16}{cells[1]:>18}{cpu:>11}{cells[2]:>16}")
    print("FP32 / INT8 median inference:")
    for x in report["ratios"]:
        extra = f", {x['speedup_cpu_time']:.2f}x by CPU time" if "speedup_cpu_time" in x else ""
        name = "" if x["candidate"] == "int8" else f" ({x['candidate']})"
        print(
            f"  {x['size']} x {x['threads']} thread(s){name}: {x['fp32_ms']:.1f} / "
            f"{x['int8_ms']:.1f} ms = {x['speedup']:.2f}x (fastest runs "
            f"{x['speedup_min']:.2f}x){extra}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=60, help="measured rounds (>= 30)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[640, 320])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--video", default=str(ROOT / "assets" / "vtest.avi"))
    p.add_argument("--frames", type=int, default=20, help="distinct frames to rotate through")
    p.add_argument("--models", type=Path, default=ROOT / "models")
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument(
        "--also",
        type=Path,
        nargs="+",
        default=[],
        metavar="INT8",
        help="more INT8 files timed in the same rounds, each against its size's FP32",
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "latency.json")
    args = p.parse_args(argv)
    if args.rounds < 30:
        p.error("--rounds must be at least 30")
    report = run(args)
    print_report(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
