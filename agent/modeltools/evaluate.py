"""Compare a candidate model with a reference model on real frames (and ground truth).

Both models run through the agent's own ``Detector`` (same letterbox, decode and NMS).
The reference's detections at the operating threshold are the ground truth of the
agreement figures (``ap.agreement``); the candidate runs at a low threshold so that its
ranking, not just its cut-off, is scored. Frames are grouped into sets: each video is one
set, all still images together are another; a gate applies to every set.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.detect.detections import Detections
from agent.detect.detector import Detector, Thresholds
from agent.detect.runtime import SessionSpec
from agent.modeltools import groundtruth, media
from agent.modeltools.ap import Agreement, Boxes, agreement, mean_ap
from agent.modeltools.keypoints import KeypointAgreement, Poses, keypoint_agreement
from agent.modeltools.progress import Progress

IMAGES_SET = "images"


@dataclass(frozen=True, slots=True)
class EvalSettings:
    conf: float = 0.25  # operating threshold: the reference's detections, matched/missed/extra
    ap_conf: float = 0.01  # the candidate's threshold for AP (its whole ranking counts)
    iou: float = 0.5  # match threshold (AP50)
    nms_iou: float = 0.45
    max_det: int = 300
    max_frames: int = 200  # per video, evenly spaced
    threads: int | None = None
    providers: tuple[str, ...] = ("auto",)


@dataclass(frozen=True, slots=True)
class SetResult:
    """Agreement on one set of frames, plus AP50 against ground truth where given."""

    name: str
    agreement: Agreement
    files: tuple[str, ...] = ()
    keypoints: KeypointAgreement | None = None  # pose models only
    gt_ap50_reference: float | None = None
    gt_ap50_candidate: float | None = None
    gt_frames: int = 0


@dataclass(frozen=True, slots=True)
class EvalReport:
    reference: dict[str, Any]
    candidate: dict[str, Any]
    settings: EvalSettings
    sets: list[SetResult]
    overall: SetResult
    inference_ms: dict[str, float] = field(default_factory=dict)
    skipped_labels: dict[str, int] = field(default_factory=dict)

    def failures(self, min_ap50: float | None, max_kpt_dist_pct: float | None = None) -> list[str]:
        """Why this report fails the gates (empty when it passes): agreement AP50 below
        ``min_ap50``, mean keypoint distance above ``max_kpt_dist_pct`` % of box height."""
        out: list[str] = []
        for s in [*self.sets, self.overall]:
            a = s.agreement
            if min_ap50 is None:
                pass
            elif a.ap50 is None:
                if a.extra:
                    out.append(f"{s.name}: reference found nothing, candidate {a.extra} boxes")
            elif a.ap50 < min_ap50:
                out.append(f"{s.name}: agreement AP50 {a.ap50:.3f} < {min_ap50}")
            if max_kpt_dist_pct is None:
                continue
            k = s.keypoints
            if k is None:
                out.append(f"{s.name}: no keypoints to gate (not a pose model)")
            elif k.mean_dist_pct is not None and k.mean_dist_pct > max_kpt_dist_pct:
                out.append(
                    f"{s.name}: mean keypoint distance {k.mean_dist_pct:.3f} % of box height "
                    f"> {max_kpt_dist_pct} %"
                )
        return out

    def to_json(self) -> dict[str, Any]:
        def one(s: SetResult) -> dict[str, Any]:
            d = asdict(s.agreement)
            d["name"] = s.name
            d["files"] = list(s.files)
            if s.keypoints is not None:
                d["keypoints"] = asdict(s.keypoints)
            if s.gt_frames:
                d["ground_truth"] = {
                    "frames": s.gt_frames,
                    "ap50_reference": s.gt_ap50_reference,
                    "ap50_candidate": s.gt_ap50_candidate,
                }
            return d

        return {
            "reference": self.reference,
            "candidate": self.candidate,
            "settings": asdict(self.settings),
            "sets": [one(s) for s in self.sets],
            "overall": one(self.overall),
            "inference_ms_median": self.inference_ms,
            "skipped_labels": self.skipped_labels,
        }


def _boxes(d: Detections) -> Boxes:
    return Boxes.of(d.xyxy, d.class_id, d.score)


def _poses(d: Detections, boxes: Boxes) -> Poses | None:
    return None if d.keypoints is None else Poses.of(boxes, d.keypoints)


def _describe(det: Detector) -> dict[str, Any]:
    i = det.info
    return {
        "file": Path(i.path).name,
        "sha256": i.sha256,
        "name": i.name,
        "precision": i.precision,
        "input_hw": list(i.input_hw),
    }


def evaluate(
    reference: Path,
    candidate: Path,
    inputs: Sequence[str | Path],
    *,
    settings: EvalSettings | None = None,
    labels: Path | None = None,
    progress: Progress | None = None,
) -> EvalReport:
    """Run both models on every input frame and score the candidate against the reference."""
    s = settings or EvalSettings()
    spec = SessionSpec(providers=s.providers, threads=s.threads)
    th = Thresholds(conf=s.ap_conf, iou=s.nms_iou, max_det=s.max_det)
    ref = Detector(reference, spec, thresholds=th)
    cand = Detector(candidate, spec, thresholds=th)
    gt = groundtruth.load(labels, ref.labels) if labels is not None else None
    planned = media.plan(media.collect(inputs), s.max_frames)
    if progress is not None:
        progress.total = media.count(planned)
    pairs: dict[str, list[tuple[Boxes, Boxes]]] = {}
    poses: dict[str, list[tuple[Poses, Poses]]] = {}
    gt_pairs: dict[str, tuple[list[tuple[Boxes, Boxes]], list[tuple[Boxes, Boxes]]]] = {}
    times: dict[str, list[float]] = {"reference": [], "candidate": []}
    files: dict[str, dict[str, None]] = {}
    for frame in media.iter_frames(planned):
        group = frame.source.name if frame.index is not None else IMAGES_SET
        files.setdefault(group, {})[frame.source.name] = None
        r = ref.detect(frame.image)
        c = cand.detect(frame.image)
        times["reference"].append(r.times.inference_ms)
        times["candidate"].append(c.times.inference_ms)
        rb, cb = _boxes(r.detections), _boxes(c.detections)
        pairs.setdefault(group, []).append((rb.above(s.conf), cb))
        rp, cp = _poses(r.detections, rb), _poses(c.detections, cb)
        if rp is not None and cp is not None:
            poses.setdefault(group, []).append((rp, cp))
        truth = gt.boxes.get(frame.name) if gt is not None else None
        if truth is not None:
            ref_gt, cand_gt = gt_pairs.setdefault(group, ([], []))
            ref_gt.append((truth, rb))
            cand_gt.append((truth, cb))
        if progress is not None:
            progress.update()
    results = [
        _set_result(name, p, gt_pairs.get(name), s, tuple(files[name]), poses.get(name))
        for name, p in pairs.items()
    ]
    every = [p for ps in pairs.values() for p in ps]
    every_pose = [p for ps in poses.values() for p in ps] if poses else None
    all_ref = [x for g in gt_pairs.values() for x in g[0]]
    all_cand = [x for g in gt_pairs.values() for x in g[1]]
    every_file = tuple(f for g in files.values() for f in g)
    overall = _set_result(
        "all", every, (all_ref, all_cand) if all_ref else None, s, every_file, every_pose
    )
    return EvalReport(
        reference=_describe(ref),
        candidate=_describe(cand),
        settings=s,
        sets=results,
        overall=overall,
        inference_ms={k: round(statistics.median(v), 2) for k, v in times.items() if v},
        skipped_labels=gt.skipped_labels if gt is not None else {},
    )


def _set_result(
    name: str,
    pairs: list[tuple[Boxes, Boxes]],
    gt: tuple[list[tuple[Boxes, Boxes]], list[tuple[Boxes, Boxes]]] | None,
    s: EvalSettings,
    files: tuple[str, ...],
    poses: list[tuple[Poses, Poses]] | None = None,
) -> SetResult:
    ag = agreement(pairs, s.conf, s.iou)
    kp = keypoint_agreement(poses, s.conf, s.iou) if poses is not None else None
    if gt is None:
        return SetResult(name, ag, files, kp)
    return SetResult(
        name,
        ag,
        files,
        kp,
        gt_ap50_reference=mean_ap(gt[0], s.iou).map,
        gt_ap50_candidate=mean_ap(gt[1], s.iou).map,
        gt_frames=len(gt[0]),
    )


def _f(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def format_table(report: EvalReport) -> str:
    """The human-readable report."""
    has_gt = any(s.gt_frames for s in [*report.sets, report.overall])
    has_kp = any(s.keypoints is not None for s in [*report.sets, report.overall])
    head = ["set", "frames", "ref", "cand", "AP50", "mIoU", "matched", "missed", "extra"]
    if has_kp:
        head += ["kpt dist %", "p95 %", "OKS"]
    if has_gt:
        head += ["GT AP50 ref", "GT AP50 cand"]
    rows = []
    for s in [*report.sets, report.overall]:
        a = s.agreement
        row = [
            s.name,
            str(a.frames),
            str(a.reference),
            str(a.candidate),
            _f(a.ap50),
            _f(a.mean_iou),
            str(a.matched),
            str(a.missed),
            str(a.extra),
        ]
        if has_kp:
            k = s.keypoints
            row += (
                [_f(k.mean_dist_pct), _f(k.p95_dist_pct), _f(k.mean_oks, 4)]
                if k is not None
                else ["-", "-", "-"]
            )
        if has_gt:
            row += [_f(s.gt_ap50_reference), _f(s.gt_ap50_candidate)] if s.gt_frames else ["-", "-"]
        rows.append(row)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    ref, cand = report.reference, report.candidate
    st = report.settings
    lines = [
        f"reference {ref['file']} ({ref['precision']}), candidate {cand['file']} "
        f"({cand['precision']}); reference boxes at conf >= {st.conf}, candidate ranked from "
        f"{st.ap_conf}, match IoU >= {st.iou}",
        line(head),
        *(line(r) for r in rows),
    ]
    if has_kp:
        lines.append(
            "kpt dist %: mean distance of the candidate's keypoints from the reference's, in "
            "percent of the box height, over matched boxes and keypoints the reference sees "
            "(conf >= 0.5); OKS: COCO object keypoint similarity"
        )
    if report.inference_ms:
        ms = report.inference_ms
        lines.append(
            f"median inference: reference {ms.get('reference', 0):.1f} ms, "
            f"candidate {ms.get('candidate', 0):.1f} ms"
        )
    if report.skipped_labels:
        skipped = ", ".join(f"{k} ({v})" for k, v in sorted(report.skipped_labels.items()))
        lines.append(f"ground-truth labels the model does not have (ignored): {skipped}")
    return "\n".join(lines)
