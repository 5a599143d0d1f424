"""Compare two `edge-agent detect --json` outputs of the same images (e.g. arm64 vs x86).

Usage: python scripts/arm64_compare.py REFERENCE.jsonl CANDIDATE.jsonl [--json OUT]
       [--min-ap50 X] [--max-kpt-dist-pct PCT]

Images are matched by file name. Boxes: agreement AP50 and mean IoU with the reference's
detections as ground truth (both at detect's threshold, so AP50 scores the cut, not the
ranking); keypoints: mean distance in percent of the box height over matched boxes
(agent.modeltools.keypoints). Exits 1 below a gate, 2 on unreadable input.

The keypoint gate is the build's INT8-vs-FP32 gate (1.5 % of the box height): onnxruntime
runs an S8S8 model with integer kernels on aarch64 but as float convolutions between
Dequantize/Quantize on x86 (its integer kernels there take unsigned activations), so the
two round differently, by about as much as INT8 differs from FP32 (measured: 0.34-0.96 %
on the shared photos, depending on the model).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent.modeltools.ap import Boxes, agreement
from agent.modeltools.keypoints import Poses, keypoint_agreement


def _load(path: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[Path(row["image"]).name] = row["detections"]
        except (ValueError, KeyError) as e:
            raise SystemExit(f"{path}:{n}: not an `edge-agent detect --json` line ({e})") from e
    return out


def _poses(dets: list[dict[str, Any]]) -> Poses:
    boxes = Boxes.of([d["xyxy"] for d in dets], [d["class_id"] for d in dets],
                     [d["score"] for d in dets])  # fmt: skip
    return Poses.of(boxes, [d.get("keypoints") or [] for d in dets])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reference", type=Path)
    p.add_argument("candidate", type=Path)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--min-ap50", type=float, default=0.95)
    p.add_argument("--max-kpt-dist-pct", type=float, default=1.5)
    args = p.parse_args(argv)
    ref, cand = _load(args.reference), _load(args.candidate)
    missing = sorted(set(ref) ^ set(cand))
    if missing:
        print(f"arm64_compare: images in one output only: {', '.join(missing)}", file=sys.stderr)
        return 2
    frames = [(_poses(ref[k]), _poses(cand[k])) for k in sorted(ref)]
    ag = agreement([(r.boxes, c.boxes) for r, c in frames], conf=0.0)
    kp = keypoint_agreement(frames, conf=0.0)
    result = {"images": sorted(ref), "boxes": asdict(ag), "keypoints": asdict(kp)}
    print(
        f"{len(frames)} images: boxes reference {ag.reference}, candidate {ag.candidate}, "
        f"AP50 {ag.ap50}, mean IoU {ag.mean_iou}, missed {ag.missed}, extra {ag.extra}; "
        f"keypoints {kp.keypoints} over {kp.pairs} boxes, mean distance {kp.mean_dist_pct} % "
        f"of box height (max {kp.max_dist_pct} %), OKS {kp.mean_oks}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    bad = (ag.ap50 is None and ag.extra > 0) or (ag.ap50 is not None and ag.ap50 < args.min_ap50)
    bad = bad or (kp.mean_dist_pct is not None and kp.mean_dist_pct > args.max_kpt_dist_pct)
    if bad:
        print("arm64_compare: outputs disagree beyond the gates", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
