"""models/manifest.json: what each bundled model is, where it came from, how it scored.

    python -m agent.modeltools.manifest --models models [--eval NAME=REPORT.json ...]
                                        [--out models/manifest.json]

Everything except the evaluation figures is read from the model files themselves (their
metadata carries labels, task, input size, precision and provenance), so the manifest can
always be regenerated from ``models/``. No timestamps: the same files give the same JSON.
A model given no new report keeps its evaluation from the manifest being replaced while
its sha256 is unchanged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent.detect.detector import sha256_file
from agent.detect.metadata import KEY_ACTIVATIONS, parse_metadata
from agent.errors import ModelError
from agent.modeltools import onnxmeta
from agent.modeltools.quantize import KEY_WEIGHTS

SCHEMA = "edge-vision/models-manifest/1"


def entry(path: Path) -> dict[str, Any]:
    """The manifest entry of one model file, from its bytes and metadata."""
    import onnx

    model = onnx.load_model(str(path), load_external_data=False)
    raw = onnxmeta.read_metadata(model)
    meta = parse_metadata(raw)
    if meta.labels is None or meta.task is None or meta.input_hw is None or meta.name is None:
        raise ModelError(f"{path}: metadata lacks labels/task/input_hw/model_name (re-export)")
    out: dict[str, Any] = {
        "file": path.name,
        "name": meta.name,
        "version": meta.version or 1,
        "sha256": sha256_file(path),
        "size": path.stat().st_size,
        "format": "onnx",
        "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "task": meta.task,
        "input_hw": list(meta.input_hw),
        "labels": list(meta.labels),
        "precision": meta.precision or "fp32",
    }
    if meta.kpt_shape is not None:
        out["kpt_shape"] = list(meta.kpt_shape)
    if out["precision"] == "int8":
        out["activations"] = raw.get(KEY_ACTIVATIONS)
        out["weights"] = raw.get(KEY_WEIGHTS, "int8")
    out["provenance"] = onnxmeta.provenance(raw)
    return out


def _evaluation(report: dict[str, Any]) -> dict[str, Any]:
    """The figures worth keeping from an ``edge-agent evaluate --json`` report."""
    keep = ("frames", "reference", "candidate", "ap50", "mean_iou", "matched", "missed", "extra")
    sets = [
        {"name": s["name"], "files": s.get("files", []), **{k: _round(s[k]) for k in keep}}
        | (
            {"keypoints": {k: _round(v) for k, v in s["keypoints"].items()}}
            if "keypoints" in s
            else {}
        )
        for s in [*report["sets"], report["overall"]]
    ]
    st = report["settings"]
    method = (
        f"agreement with the reference: AP50 over its detections at conf >= {st['conf']} "
        f"as ground truth, candidate ranked from conf {st['ap_conf']}, match IoU >= "
        f"{st['iou']}; matched/missed/extra and mean IoU at conf >= {st['conf']}"
    )
    if any("keypoints" in s for s in sets):
        method += (
            "; keypoints: distance from the reference's in percent of its box height, over "
            "matched boxes and the keypoints it sees (conf >= 0.5), and COCO OKS"
        )
    return {
        "reference": report["reference"]["file"],
        "reference_sha256": report["reference"]["sha256"],
        "method": method,
        "sets": sets,
    }


def _round(x: Any) -> Any:
    return round(x, 4) if isinstance(x, float) else x


def build(
    models: Path,
    evaluations: dict[str, dict[str, Any]],
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Manifest of every ``*.onnx`` in ``models`` (sorted), with evaluations by file name.

    A file with no new report keeps the evaluation ``previous`` (the manifest being
    replaced) holds for it, if its bytes are unchanged (same sha256): the figures still
    describe it, so adding one model does not mean re-evaluating the others.
    """
    kept = {
        m["file"]: m
        for m in (previous or {}).get("models", [])
        if isinstance(m, dict) and "evaluation" in m and "file" in m
    }
    entries = []
    for path in sorted(models.glob("*.onnx")):
        e = entry(path)
        if path.name in evaluations:
            e["evaluation"] = _evaluation(evaluations[path.name])
        elif path.name in kept and kept[path.name].get("sha256") == e["sha256"]:
            e["evaluation"] = kept[path.name]["evaluation"]
        entries.append(e)
    return {"schema": SCHEMA, "models": entries}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="write models/manifest.json")
    p.add_argument("--models", type=Path, default=Path("models"))
    p.add_argument(
        "--eval",
        nargs="*",
        default=[],
        metavar="FILE=REPORT",
        help="evaluate --json reports, by the candidate's file name",
    )
    p.add_argument("--out", type=Path, default=None, help="default: MODELS/manifest.json")
    args = p.parse_args(argv)
    evaluations: dict[str, dict[str, Any]] = {}
    for item in args.eval:
        name, _, report = item.partition("=")
        if not report or name in evaluations:
            p.error(f"--eval wants one FILE=REPORT per model, got {item!r}")
        evaluations[name] = json.loads(Path(report).read_text())
    out = args.out or args.models / "manifest.json"
    try:
        previous = json.loads(out.read_text()) if out.is_file() else None
    except ValueError:
        previous = None  # unreadable: rebuilt from the files and the reports given
    manifest = build(args.models, evaluations, previous)
    out.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {out} ({len(manifest['models'])} models)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
