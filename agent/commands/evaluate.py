"""`edge-agent evaluate`: how well a candidate model agrees with a reference model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agent.commands.common import setting_type
from agent.settings import DetectorSettings


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "evaluate",
        help="agreement of a candidate model with a reference model (AP50, IoU, keypoints)",
        description="Run a reference and a candidate model on images and videos. Agreement "
        "AP50 takes the reference's detections (at --conf) as ground truth and ranks the "
        "candidate's from --ap-conf; matched/missed/extra and mean IoU are at --conf. With "
        "--labels, also plain AP50 of both models against ground truth. Each video is one "
        "set, all still images another; --min-ap50 gates every set and the overall figure. "
        "For pose models, also the mean distance of the candidate's keypoints from the "
        "reference's (percent of the box height, matched boxes, keypoints the reference "
        "sees), gated by --max-kpt-dist-pct.",
    )
    p.add_argument("--reference", type=Path, required=True, help="reference model (e.g. FP32)")
    p.add_argument("--candidate", type=Path, required=True, help="candidate model (e.g. INT8)")
    p.add_argument("inputs", nargs="+", help="images, directories, videos")
    p.add_argument(
        "--labels",
        type=Path,
        default=None,
        metavar="COCO_OR_LABELME_JSON",
        help="ground truth: COCO JSON, a labelme JSON, or a directory of labelme JSONs "
        "(video frames are named VIDEO#FRAME)",
    )
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the report")
    p.add_argument(
        "--min-ap50",
        type=float,
        default=None,
        metavar="X",
        help="exit 1 when the agreement AP50 of any set is below X",
    )
    p.add_argument(
        "--max-kpt-dist-pct",
        type=float,
        default=None,
        metavar="PCT",
        help="exit 1 when the mean keypoint distance from the reference's of any set is "
        "above PCT percent of the box height (pose models)",
    )
    p.add_argument(
        "--max-frames", type=int, default=200, metavar="N", help="frames per video (evenly spaced)"
    )
    p.add_argument("--conf", type=float, default=0.25, help="operating confidence threshold")
    p.add_argument(
        "--ap-conf", type=float, default=0.01, help="candidate threshold for the AP ranking"
    )
    p.add_argument(
        "--threads",
        type=setting_type(DetectorSettings, "threads", "detector.threads"),
        default=None,
        help="intra-op threads per model",
    )
    p.add_argument(
        "--providers", nargs="+", default=["auto"], help="execution providers (default auto)"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agent.errors import ConfigError
    from agent.modeltools.evaluate import EvalSettings, evaluate, format_table
    from agent.modeltools.progress import Progress

    if not 0 < args.ap_conf <= args.conf < 1:
        raise ConfigError("need 0 < --ap-conf <= --conf < 1")
    if args.max_kpt_dist_pct is not None and args.max_kpt_dist_pct <= 0:
        raise ConfigError("--max-kpt-dist-pct must be above 0")
    if args.max_frames < 1:
        raise ConfigError("--max-frames must be at least 1")
    settings = EvalSettings(
        conf=args.conf,
        ap_conf=args.ap_conf,
        max_frames=args.max_frames,
        threads=args.threads,
        providers=tuple(args.providers),
    )
    progress = Progress("evaluate")
    report = evaluate(
        args.reference,
        args.candidate,
        args.inputs,
        settings=settings,
        labels=args.labels,
        progress=progress,
    )
    progress.close("")
    print(format_table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    failures = report.failures(args.min_ap50, args.max_kpt_dist_pct)
    for reason in failures:
        print(f"edge-agent evaluate: below the gate: {reason}", file=sys.stderr)
    return 1 if failures else 0
