"""Issue 23: motion-gated regions vs the whole frame vs SAHI on the demo video.

    python bench/regions.py [--parts accuracy,sahi,tiles,motion,cpu,cameras] [--rounds 2]
                            [--window 12] [--cameras-window 10] [--max-cameras 24]
                            [--cameras-scenes vtest,still,corner]
                            [--cameras-start spread|together]
                            [--at-cameras 4,5] [--at-runs 3]
                            [--sahi-python PATH] [--also KEY=VALUE[,...]] [--only NAMES]
                            [--out bench/results/regions.json]

Two variants of the real agent (``python -m agent run`` through a private mosquitto):
``defaults`` (``detector.regions`` and ``detector.model`` omitted: the embedded default,
region mode on the 320 INT8 model) and ``full`` (``regions: full``, model omitted: the
640 INT8 model on the whole frame, every frame, as before issue 23). CPU provider.

- ``accuracy``: vtest.avi with ``realtime: false`` (every frame, in order); the
  DetectionMessages it publishes, by ``frame_id``, against the hand-checked people of
  bench/data/vtest_people.json (IoU >= 0.5, one detection per person, highest score
  first; a detection on a "don't care" box is ignored; a labelled frame with no message
  counts its people as missed). CPU per frame from /proc between the first and the last
  message. Misses are listed with their height and whether a region covered them.
  The events the run publishes give the latency to ``new``: event arrival minus its
  ``start_ts`` (the capture time of the frame the object was first seen in).
- ``sahi``: SAHI 0.12.8 ``get_sliced_prediction`` (320x320 slices, 0.2 overlap, its
  whole-image pass on) with Ultralytics on ``models/yolo11n-pose-640-fp32.onnx``, on the
  labelled frames, in a virtualenv of its own (made once, as bench/compare.py makes
  Ultralytics'); process CPU time per frame.
- ``tiles``: ``edge-agent detect --tiles`` (the stills path, ``agent.regions.tiles``) in
  this process on the labelled frames as photos: whole image vs tiles of 1/2 (the
  default, 2x magnified) and 3/4 of the model input, 320 and 640 INT8; process CPU time
  per frame (median).
- ``motion``: ``MotionDetector.update`` alone, in this process, one OpenCV thread (as the
  agent sets it), on every frame of each scene (decoded first): milliseconds per frame,
  median and 90th percentile, and the frames with motion.
- ``cpu``: CPU (cores, from /proc) of one camera at 10 fps (``realtime: true``, looped) on
  a still scene (the median background of vtest.avi with fresh Gaussian sensor noise on
  every frame, sigma 3 grey levels, a 30 s 10 fps video made once) and on vtest.avi,
  full and defaults alternating, medians over ``--rounds``; ``new``-event latency at
  real speed from the vtest runs.
- ``cpu`` and ``cameras`` also run ``corner``: vtest.avi's bottom-left quarter (384x288),
  a quieter camera of the same street (no one in most frames, one or two people walking
  through now and then).
- ``cameras``: copies of vtest.avi (or, with ``--cameras-scenes vtest,still,corner``, of
  the other scenes too; 10 fps, realtime, looped) on one agent: N = 1, 2, ..., 10, 12, 14,
  16, 24, 32 until a camera falls behind (frames dropped > 1 % of frames in, or processed <
  95 % of in, over ``--cameras-window`` seconds once the cameras have streamed for
  ``--cameras-warm``, 4 s by default). Each copy starts at its own point of the clip
  (``spread_copies``: as cameras of one site, whose busy moments
  do not all fall in the same frame); ``--cameras-start together`` starts them all at the
  first frame, every camera's busiest moment at once. Past the first count that fell
  behind, the counts between it and the last that kept up, halving the gap (``between``),
  the variants' searches a step of each in turn (``in_turn``: both edges in the machine's
  same moods); then 1.5x the fewest that fell behind: the frames a second the box gets
  through at saturation (a throughput figure beside the count). Each variant's count and
  frames a second are also given as multiples of ``full``'s on the scene.
- ``at`` (not in the default parts): each variant and scene of the cameras part at fixed
  camera counts (``--at-cameras``), ``--at-runs`` times each, over ``--cameras-window``
  seconds: frames a second done and the share dropped per run, and their medians. Near
  the edge the count above moves by one from run to run; this says by how much a box is
  over or under it (``--cameras-window 20`` steadies it). Each run's ``timeline`` in the
  JSON: per heartbeat, its time in the window, the frames a second done by all cameras and
  the frames dropped so far (whether a box over its edge drops steadily or in bursts).
  Region mode's first seconds on a camera cost more than its steady state (offline, 3
  starting points of vtest.avi: 100 thousand model pixels a frame over its first 5 s,
  70-83 after; the motion of the people of its first frame, and tracks forming), so a box
  of many cameras at its edge drops frames while its cameras start and then keeps up;
  ``--cameras-warm 20`` measures past that start.

Prints tables and writes JSON. The machine's load from other processes is measured
(``foreign_cores``) and reported with every figure: on a shared machine, read it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

from compare import VENVS, ensure_venv
from harness import (
    MODELS,
    RESULTS,
    VIDEO,
    AgentVariant,
    _busy_s,
    _cpu_s,
    _own_s,
    agent_process,
    camera_id,
    machine_info,
    machine_line,
    markdown_table,
    median,
    print_table,
    rnd,
    run_agent,
    wait_quiet,
    wait_until,
)

BENCH = Path(__file__).resolve().parent
LABELS = BENCH / "data" / "vtest_people.json"
SAHI_MODEL = MODELS / "yolo11n-pose-640-fp32.onnx"
SAHI_RECIPE = (
    ["torch==2.13.0"],
    ["--no-deps", "torchvision==0.28.0"],
    ["ultralytics==8.4.190", "onnxruntime", "sahi==0.12.8"],
)
IOU_MATCH = 0.5
#: Camera counts tried in turn: one at a time up to 10 (where a 2-core box runs out on a
#: busy scene), then in steps, and past the first that falls behind the counts between
#: (``between``).
COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 24, 32)
#: table columns of a recall/precision row (key, header, decimals)
SCORE_COLS = [
    ("recall", "recall", 3),
    ("precision", "precision", 3),
    ("tp", "tp", 0),
    ("fp", "fp", 0),
    ("fn", "fn", 0),
]

Box = Sequence[float]


# -- matching -----------------------------------------------------------------------------
def iou(a: Box, b: Box) -> float:
    """Intersection over union of two xyxy boxes (0 for no overlap)."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_frame(
    people: Sequence[Box], dont_care: Sequence[Box], dets: Sequence[tuple[Box, float]]
) -> dict[str, Any]:
    """Greedy matching, highest score first: a detection takes the unmatched person of
    highest IoU >= 0.5 (true positive); else, on a don't-care box (IoU >= 0.5) it is
    ignored; else it is a false positive. People left unmatched are missed."""
    taken = [False] * len(people)
    tp, fp, ignored = 0, [], 0
    for box, _score in sorted(dets, key=lambda d: -d[1]):
        best, best_iou = -1, IOU_MATCH
        for i, p in enumerate(people):
            o = iou(box, p)
            if not taken[i] and o >= best_iou:
                best, best_iou = i, o
        if best >= 0:
            taken[best] = True
            tp += 1
        elif any(iou(box, d) >= IOU_MATCH for d in dont_care):
            ignored += 1
        else:
            fp.append(list(box))
    missed = [list(p) for i, p in enumerate(people) if not taken[i]]
    return {
        "tp": tp,
        "fp": len(fp),
        "fn": len(missed),
        "ignored": ignored,
        "missed": missed,
        "false": fp,
    }


def score(labels: dict[str, Any], dets: dict[int, list[tuple[Box, float]]]) -> dict[str, Any]:
    """Recall and precision over the labelled frames; ``dets`` by frame index (a frame
    missing from ``dets`` has no detections)."""
    tp = fp = fn = 0
    frames: dict[str, Any] = {}
    for key, lab in labels["frames"].items():
        m = match_frame(lab["people"], lab["dont_care"], dets.get(int(key), []))
        tp, fp, fn = tp + m["tp"], fp + m["fp"], fn + m["fn"]
        frames[key] = m
    return {
        "recall": tp / (tp + fn) if tp + fn else None,
        "precision": tp / (tp + fp) if tp + fp else None,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "frames": frames,
    }


def covered(box: Box, regions: Sequence[Box] | None) -> str:
    """How the regions an agent looked at cover a box: whole, part, none (or unknown)."""
    if regions is None:
        return "unknown"
    best = 0.0
    area = max(1e-6, (box[2] - box[0]) * (box[3] - box[1]))
    for r in regions:
        ix = max(0.0, min(box[2], r[2]) - max(box[0], r[0]))
        iy = max(0.0, min(box[3], r[3]) - max(box[1], r[1]))
        best = max(best, ix * iy / area)
    return "whole" if best >= 0.99 else ("part" if best > 0 else "none")


# -- the agent ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant(AgentVariant):
    """An agent variant with extra ``detector`` keys (experiments: ``--also``)."""

    extra: tuple[tuple[str, Any], ...] = ()

    def detector(self) -> dict[str, Any]:
        return {**super().detector(), **dict(self.extra)}


#: Extra variants from ``--also`` (detector keys on top of the defaults).
ALSO: list[Variant] = []
#: Names of the variants to run (``--only``); empty: all of them.
ONLY: set[str] = set()


def variants() -> list[AgentVariant]:
    """full (today's whole-frame behaviour), the embedded defaults (region mode), and
    any ``--also`` experiments."""
    every = [
        Variant("full", None, regions="full"),
        Variant("defaults", None, regions=None),
        *ALSO,
    ]
    return [v for v in every if not ONLY or v.name in ONLY]


def also_variant(spec: str) -> Variant:
    """``region_px=160,max_regions=8`` -> the defaults with those detector keys."""
    extra = []
    for item in spec.split(","):
        key, _, value = item.partition("=")
        if not key or not value:
            raise SystemExit(f"--also {spec!r}: expected KEY=VALUE[,KEY=VALUE...]")
        extra.append((key.strip(), yaml.safe_load(value)))
    return Variant(f"defaults {spec}", None, regions=None, extra=tuple(extra))


def parse_ts(ts: str) -> float:
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    return datetime.strptime(ts, fmt).replace(tzinfo=timezone.utc).timestamp()


def event_latency(events: list[tuple[float, bytes]]) -> dict[str, Any]:
    """``new`` events: arrival (wall clock) minus start_ts (capture of the first frame the
    object was seen in), and arrival minus the event's own ts (publish path)."""
    first_seen, publish = [], []
    for arrived, payload in events:
        e = json.loads(payload)
        if e.get("type") != "new":
            continue
        first_seen.append((arrived - parse_ts(e["start_ts"])) * 1e3)
        publish.append((arrived - parse_ts(e["ts"])) * 1e3)
    return {
        "new_events": len(first_seen),
        "new_latency_ms_p50": rnd(median(first_seen), 0),
        "new_latency_ms_max": rnd(max(first_seen), 0) if first_seen else None,
        "new_publish_ms_p50": rnd(median(publish), 0),
    }


def interp(samples: list[tuple[float, float]], t: float) -> float | None:
    """CPU seconds at monotonic time ``t`` from (time, CPU) samples (linear)."""
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * (t - t0) / max(1e-9, t1 - t0)
    return None


def cpu_ms_per_frame_between(
    msgs: Sequence[tuple[float, dict[str, Any]]], cpu_wall: list[tuple[float, float]]
) -> float | None:
    """The agent's CPU ms per frame between the first and the last of ``msgs`` (arrival
    time, DetectionMessage), from (time, CPU s) samples; None without enough of either."""
    if len(msgs) < 2 or not cpu_wall:
        return None
    (ta, ma), (tb, mb) = msgs[0], msgs[-1]
    ca, cb = interp(cpu_wall, ta), interp(cpu_wall, tb)
    frames = int(mb["frame_id"]) - int(ma["frame_id"])
    if ca is None or cb is None or frames <= 0:
        return None
    return (cb - ca) / frames * 1e3


def accuracy_run(v: AgentVariant, labels: dict[str, Any]) -> dict[str, Any]:
    """The whole video, every frame in order; people scored on published messages."""
    v = replace(v, realtime=False, loop=False)
    run = run_agent(v, timeout=900.0, quiet_s=3.0)
    msgs = [(t, json.loads(p)) for t, p in run.rec.detections]
    dets: dict[int, list[tuple[Box, float]]] = {}
    regions: dict[int, Any] = {}
    for _, m in msgs:
        fid = int(m["frame_id"])
        dets[fid] = [(d["xyxy"], d["score"]) for d in m["detections"] if d["label"] == "person"]
        regions[fid] = m.get("regions")
    s = score(labels, dets)
    misses = []
    for key, fr in s["frames"].items():
        for box in fr["missed"]:
            misses.append(
                {
                    "frame": int(key),
                    "xyxy": [round(x) for x in box],
                    "h_px": round(box[3] - box[1]),
                    "message": int(key) in dets,
                    "region_cover": covered(box, regions.get(int(key))),
                }
            )
    cpu_ms = cpu_ms_per_frame_between(msgs, run.cpu_wall)
    last = max(dets) if dets else -1
    n_regions = [len(r) for r in regions.values() if r is not None]
    return {
        "variant": v.name,
        "recall": rnd(s["recall"], 3),
        "precision": rnd(s["precision"], 3),
        "tp": s["tp"],
        "fp": s["fp"],
        "fn": s["fn"],
        "messages": len(msgs),
        "frames_seen": last + 1,
        "cpu_ms_per_frame": rnd(cpu_ms, 1),
        "regions_per_message": rnd(statistics.fmean(n_regions), 2) if n_regions else None,
        "foreign_cores": run.cpu.get("foreign_cores"),
        "missed": misses,
        "false_positives": [
            {"frame": int(k), "xyxy": [round(x) for x in b]}
            for k, fr in s["frames"].items()
            for b in fr["false"]
        ],
        **event_latency(run.rec.events),
        "exit_code": run.exit_code,
    }


def run_window(v: AgentVariant, seconds: float, warm_s: float) -> dict[str, Any]:
    """Run ``v`` (realtime, looped) and measure ``seconds`` after ``warm_s`` of streaming:
    the agent's CPU from /proc, the machine's other load, heartbeats, events."""
    work = Path(tempfile.mkdtemp(prefix="bench-regions-"))
    try:
        with agent_process(v, work) as (proc, sub):

            def streaming() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"agent exited: {(work / 'agent.log').read_text()[-800:]}")
                for _, p in sub.rec.health:
                    cams = json.loads(p).get("cameras", {})
                    if len(cams) >= v.cameras and all(
                        c.get("fps_in", 0) > 0 for c in cams.values()
                    ):
                        return True
                return False

            if not wait_until(streaming, 120.0, 0.2):
                raise RuntimeError(f"{v.name}: no camera streamed in 120 s")
            time.sleep(warm_s)
            t0, c0, b0, o0 = time.monotonic(), _cpu_s(proc.pid), _busy_s(), _own_s()
            time.sleep(seconds)
            t1, c1, b1, o1 = time.monotonic(), _cpu_s(proc.pid), _busy_s(), _own_s()
            hb = [(t, json.loads(p)) for t, p in sub.rec.health if t0 - 0.5 <= t <= t1 + 0.5]
            events = [e for e in sub.rec.events if e[0] >= time.time() - (t1 - t0)]
        assert c0 is not None
        assert c1 is not None
        wall = t1 - t0
        agent = c1 - c0
        return {
            "cores": agent / wall,
            "foreign_cores": max(0.0, (b1 - b0) - (o1 - o0) - agent) / wall,
            "heartbeats": hb,
            "events": events,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def per_camera(hb: list[tuple[float, dict[str, Any]]], n: int) -> list[dict[str, Any]]:
    """Per camera over the window: fps in and processed (medians of the heartbeats), frames
    dropped (delta between the first and the last heartbeat) and frames in (fps in x the
    time between them)."""
    out = []
    for i in range(n):
        cid = camera_id(i)
        cams = [(t, h["cameras"][cid]) for t, h in hb if cid in h.get("cameras", {})]
        if len(cams) < 2:
            out.append({"camera": cid, "ok": False, "why": "no heartbeats"})
            continue
        drop = cams[-1][1]["frames_dropped"] - cams[0][1]["frames_dropped"]
        f_in = median([c["fps_in"] for _, c in cams]) or 0.0
        f_done = median([c["fps_processed"] for _, c in cams]) or 0.0
        frames_in = f_in * (cams[-1][0] - cams[0][0])
        ok = drop <= 0.01 * max(1.0, frames_in) and f_done >= 0.95 * f_in and f_in > 0
        out.append(
            {
                "camera": cid,
                "fps_in": rnd(f_in, 2),
                "fps_processed": rnd(f_done, 2),
                "frames_in": round(frames_in),
                "dropped": drop,
                "ok": ok,
            }
        )
    return out


# -- the still scene ------------------------------------------------------------------------
def video_frames(path: Path = VIDEO) -> Iterator[Any]:
    """Every frame of the video at ``path`` (vtest.avi by default), in order (BGR)."""
    cap = cv2.VideoCapture(str(path))
    try:
        while True:
            ok, img = cap.read()
            if not ok:
                return
            yield img
    finally:
        cap.release()


def write_video(path: Path, frames: Iterable[Any], fps: float, fourcc: str = "MJPG") -> Path:
    """``frames`` (BGR, one size) as a video at ``fps`` (MJPG unless told)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = None
    for img in frames:
        if out is None:
            size = (img.shape[1], img.shape[0])
            out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, size)
        out.write(np.ascontiguousarray(img))
    if out is not None:
        out.release()
    return path


def spread_copies(
    source: Path, n: int, folder: Path = RESULTS / "regions-copies"
) -> tuple[Path, ...]:
    """``n`` copies of the video at ``source`` for n cameras, each starting at its own
    point of the clip and wrapping round (copy 0 is ``source`` itself; copy k starts at
    the fractional part of k x 0.618 of the way through, so any number of copies is spread
    over the clip), in the source's codec, at its frame rate; made once each, in ``folder``.

    Cameras of one site do not see the same thing in the same instant: copies started
    together put every camera's busiest moment in the same frame, which no real box sees.
    """
    cap = cv2.VideoCapture(str(source))
    fourcc = int(cap.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little").decode("ascii", "replace")
    fps = cap.get(cv2.CAP_PROP_FPS) or 10.0
    total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    cap.release()
    out = [source]
    for k in range(1, n):
        path = folder / f"{source.stem}-{k}.avi"
        if not path.is_file():
            total = total if total > 0 else sum(1 for _ in video_frames(source))
            start = int(total * ((k * 0.6180339887) % 1.0))
            # Two passes over the source instead of all its frames in memory (a GB for
            # vtest.avi's 795).
            tail = itertools.islice(video_frames(source), start, None)
            head = itertools.islice(video_frames(source), start)
            write_video(path, itertools.chain(tail, head), fps, fourcc)
        out.append(path)
    return tuple(out)


def still_video(path: Path, seconds: int = 30, fps: int = 10, sigma: float = 3.0) -> Path:
    """The median background of vtest.avi (every 10th frame) with fresh Gaussian sensor
    noise per frame, as an MJPG video at ``fps``; made once."""
    if path.is_file():
        return path
    sampled = [img for i, img in enumerate(video_frames()) if i % 10 == 0]
    bg = np.median(np.stack(sampled), axis=0).astype(np.float32)
    rng = np.random.default_rng(23)
    noisy = (
        np.clip(bg + rng.normal(0.0, sigma, bg.shape).astype(np.float32), 0, 255).astype(np.uint8)
        for _ in range(seconds * fps)
    )
    return write_video(path, noisy, fps)


def corner_video(path: Path) -> Path:
    """vtest.avi's bottom-left quarter (384x288, 10 fps) as an MJPG video, made once: a
    quieter camera of the same street, no one in most frames and one or two people walking
    through now and then (the hand-checked frames: 0 people in 15 of 20, 1 in 3, 2 in 2)."""
    if path.is_file():
        return path
    return write_video(path, (img[288:576, 0:384] for img in video_frames()), 10)


def scene_sources(scenes: Sequence[str]) -> dict[str, Path]:
    """The video of each scene, made once where it is made."""
    makers = {
        "vtest": lambda: VIDEO,
        "still": lambda: still_video(RESULTS / "regions-still.avi"),
        "corner": lambda: corner_video(RESULTS / "regions-corner.avi"),
    }
    return {scene: makers[scene]() for scene in scenes}


#: Scenes of the cpu and cameras parts.
SCENES = ("vtest", "still", "corner")


# -- parts --------------------------------------------------------------------------------
def part_accuracy(labels: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for v in variants():
        print(f"  accuracy: {v.name} on every frame of vtest.avi ...", flush=True)
        rows.append(accuracy_run(v, labels))
    return rows


def part_sahi(labels: dict[str, Any], python: str | None) -> dict[str, Any] | None:
    py = python or ensure_venv(
        VENVS / "sahi", SAHI_RECIPE, "import sahi, ultralytics, torch, onnxruntime"
    )
    if py is None:
        return None
    frames = ",".join(sorted(labels["frames"], key=int))
    argv = [py, str(BENCH / "sahi_predict.py"), "--model", str(SAHI_MODEL)]
    argv += ["--source", str(VIDEO), "--frames", frames]
    print("  sahi: sliced prediction on the labelled frames ...", flush=True)
    t0, b0, o0 = time.monotonic(), _busy_s(), _own_s()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    wall, busy, own = time.monotonic() - t0, _busy_s() - b0, _own_s() - o0
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        print(f"  ! sahi failed: {r.stderr.strip()[-600:]}", flush=True)
        return None
    out = json.loads(lines[-1])
    dets = {int(k): [(b[:4], b[4]) for b in v] for k, v in out["frames"].items()}
    s = score(labels, dets)
    return {
        "variant": "sahi 320/0.2 fp32",
        "recall": rnd(s["recall"], 3),
        "precision": rnd(s["precision"], 3),
        "tp": s["tp"],
        "fp": s["fp"],
        "fn": s["fn"],
        "cpu_ms_per_frame": rnd(median(out["cpu_ms"]), 1),
        "wall_ms_per_frame": rnd(median(out["wall_ms"]), 1),
        "foreign_cores": rnd(max(0.0, busy - own) / wall, 2),
        "versions": {k: out.get(k) for k in ("sahi", "torch", "torch_threads", "nms")},
        "missed": [
            {"frame": int(k), "xyxy": [round(x) for x in b]}
            for k, fr in s["frames"].items()
            for b in fr["missed"]
        ],
    }


def part_tiles(labels: dict[str, Any]) -> list[dict[str, Any]]:
    """``edge-agent detect --tiles`` (stills) on the labelled frames, in this process: the
    whole image vs tiles of 1/2 (the default) and 3/4 of the input, 320 and 640 INT8."""
    from agent.detect.inputs import build_detector
    from agent.regions.tiles import detect_tiled
    from agent.settings import DetectorSettings

    frames = _labelled_frames(labels)
    rows = []
    for size in (320, 640):
        ds = DetectorSettings(model=MODELS / f"yolo11n-pose-{size}-int8.onnx")
        det = build_detector(ds)
        det.detect(next(iter(frames.values())))  # warm-up
        for share in (None, 0.5, 0.75):
            print(f"  tiles: {size} model, {share or 'whole image'} ...", flush=True)
            dets: dict[int, list[tuple[Box, float]]] = {}
            cpu: list[float] = []
            looks = 1
            for idx, image in frames.items():
                c0 = time.process_time()
                if share is None:
                    found = det.detect(image).detections
                else:
                    tile = round(share * size)
                    found, _times, looks = detect_tiled(det, image, tile)
                cpu.append((time.process_time() - c0) * 1000.0)
                dets[idx] = [
                    (d["xyxy"], d["score"]) for d in found.to_dicts() if d["label"] == "person"
                ]
            s = score(labels, dets)
            name = "whole image" if share is None else f"tiles {round(share * size)} px"
            rows.append(
                {
                    "variant": f"{size} INT8, {name}" + (" (default)" if share == 0.5 else ""),
                    "looks": looks,
                    "recall": rnd(s["recall"], 3),
                    "precision": rnd(s["precision"], 3),
                    "tp": s["tp"],
                    "fp": s["fp"],
                    "fn": s["fn"],
                    "cpu_ms_per_frame": rnd(median(cpu), 1),
                }
            )
    return rows


def _labelled_frames(labels: dict[str, Any]) -> dict[int, Any]:
    """The labelled frames of vtest.avi, decoded once (BGR)."""
    from agent.modeltools.media import read_video_frames

    wanted = [int(k) for k in labels["frames"]]
    return {f.index: f.image for f in read_video_frames(VIDEO, wanted) if f.index is not None}


def part_motion(scenes: Sequence[str] = SCENES) -> list[dict[str, Any]]:
    """What motion detection costs per frame on each scene (this process, one OpenCV
    thread, frames decoded first)."""
    from agent.regions.motion import MotionDetector

    cv2.setNumThreads(1)
    rows = []
    for scene, source in scene_sources(scenes).items():
        frames = list(video_frames(source))
        md, ms, moving = MotionDetector(), [], 0
        for img in frames:
            t0 = time.perf_counter()
            moving += md.update(img).any
            ms.append((time.perf_counter() - t0) * 1e3)
        h, w = frames[0].shape[:2]
        rows.append(
            {
                "scene": f"{scene} ({w}x{h})",
                "frames": len(frames),
                "ms_p50": rnd(median(ms), 3),
                "ms_p90": rnd(float(np.percentile(ms, 90)), 3),
                "moving_share": rnd(moving / len(frames), 2),
            }
        )
    return rows


def part_cpu(
    rounds: int, window: float, quiet: tuple[float, float], scenes: Sequence[str] = SCENES
) -> list[dict[str, Any]]:
    sources = scene_sources(scenes)
    raw: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(rounds):
        order = variants() if r % 2 == 0 else variants()[::-1]
        for scene, src in sources.items():
            for v in order:
                vv = replace(v, realtime=True, loop=True, source=src)
                if quiet[1] > 0:
                    wait_quiet(*quiet)
                m = run_window(vv, window, 4.0)
                cams = per_camera(m["heartbeats"], 1)[0]
                res = {
                    "cores": m["cores"],
                    "foreign_cores": m["foreign_cores"],
                    "fps_in": cams.get("fps_in"),
                    "fps_processed": cams.get("fps_processed"),
                    "dropped": cams.get("dropped"),
                    **event_latency(m["events"]),
                }
                raw.setdefault((scene, v.name), []).append(res)
                print(
                    f"  cpu round {r + 1}: {scene} {v.name}: {res['cores']:.3f} cores "
                    f"(other load {res['foreign_cores']:.2f})",
                    flush=True,
                )
    rows = []
    for (scene, name), rs in raw.items():
        # CPU per frame the agent processed, and what 10 fps would cost at that rate: on a
        # loaded machine a camera that falls behind uses less CPU than one that keeps up.
        per_frame = [x["cores"] / x["fps_processed"] * 1e3 for x in rs if x.get("fps_processed")]
        ms = median(per_frame)
        rows.append(
            {
                "scene": scene,
                "variant": name,
                "core_percent": rnd(100 * (median([x["cores"] for x in rs]) or 0), 1),
                "cpu_ms_per_frame": rnd(ms, 1),
                "fps_in": median([x["fps_in"] for x in rs]),
                "fps_processed": median([x["fps_processed"] for x in rs]),
                "dropped": max(x["dropped"] or 0 for x in rs),
                "new_events": sum(x["new_events"] for x in rs),
                "new_latency_ms_p50": median([x["new_latency_ms_p50"] for x in rs]),
                "foreign_cores": rnd(median([x["foreign_cores"] for x in rs]), 2),
                "rounds": rs,
            }
        )
    versus_full(rows, "core_percent", "vs_full", 3)
    versus_full(rows, "cpu_ms_per_frame", "vs_full_at_10fps", 3)
    return rows


def versus_full(rows: Sequence[dict[str, Any]], key: str, out: str, nd: int = 2) -> None:
    """Each variant's ``key`` over ``full``'s of the same scene, as ``out`` (left out where
    either is missing or zero): the figures the issues set as multiples of ``full``'s."""
    full = {r["scene"]: r.get(key) for r in rows if r["variant"] == "full"}
    for r in rows:
        base = full.get(r["scene"])
        if r["variant"] != "full" and base and r.get(key):
            r[out] = rnd(r[key] / base, nd)


def part_cameras(
    window: float,
    max_cameras: int,
    quiet: tuple[float, float],
    cpu: list[dict[str, Any]],
    scenes: Sequence[str] = ("vtest",),
    start: str = "spread",
    warm: float = 4.0,
) -> list[dict[str, Any]]:
    """Cameras carried per variant and scene (``vtest``: copies of vtest.avi; ``still``,
    ``corner``: of those scenes of the cpu part); ``start``: where each copy starts
    (``spread_copies``), or ``together`` at the first frame."""
    sources = scene_sources(scenes)
    rows = [
        row
        for scene in scenes
        for row in _cameras(scene, sources[scene], window, max_cameras, quiet, cpu, start, warm)
    ]
    versus_full(rows, "cameras", "cameras_vs_full")
    versus_full(rows, "saturated_fps", "saturated_fps_vs_full")
    return rows


def _copies_window(
    v: AgentVariant,
    source: Path,
    n: int,
    window: float,
    quiet: tuple[float, float],
    start: str,
    warm: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One agent playing ``n`` copies of ``source`` at 10 fps (realtime, looped; each from
    its own point of the clip unless ``start`` is together) over ``window`` seconds once
    they have streamed ``warm`` seconds: the window's measurements and each camera's
    (``per_camera``)."""
    spread = spread_copies(source, n) if start == "spread" else ()
    vv = replace(v, realtime=True, loop=True, cameras=n, source=source, sources=spread)
    if quiet[1] > 0:
        wait_quiet(*quiet)
    m = run_window(vv, window, warm)
    return m, per_camera(m["heartbeats"], n)


def timeline(hb: list[tuple[float, dict[str, Any]]]) -> list[list[float]]:
    """Per heartbeat: [seconds since the first, frames a second done by all cameras,
    frames dropped by all cameras so far]."""
    t0 = hb[0][0] if hb else 0.0
    return [
        [rnd(t - t0, 1), rnd(_frames_done(cams), 1), sum(c["frames_dropped"] for c in cams)]
        for t, h in hb
        for cams in [list(h.get("cameras", {}).values())]
    ]


def _frames_done(cams: Sequence[dict[str, Any]]) -> float:
    """Frames a second processed by all of ``cams`` (``per_camera`` rows)."""
    return sum(c.get("fps_processed") or 0.0 for c in cams)


def searching(counts: Sequence[int]) -> Generator[int, bool | None, tuple[int, int | None]]:
    """The search of ``between``, a step at a time: yields the next count to try and is
    sent whether it kept up (None first: a generator starts so); returns (the most that
    kept up, the fewest that fell behind or None)."""
    carried, behind = 0, None
    for n in counts:
        if not (yield n):
            behind = n
            break
        carried = n
    while behind is not None and behind - carried > 1:
        mid = (carried + behind) // 2
        if (yield mid):
            carried = mid
        else:
            behind = mid
    return carried, behind


def in_turn(
    attempts: Sequence[Callable[[int], bool]], counts: Sequence[int]
) -> list[tuple[int, int | None]]:
    """Per ``attempts`` (one a variant), ``between``'s result, the searches run a step of
    each in turn: every variant's edge is found in the machine's same moods (the fortieth
    VM's host fell to about half its speed within two hours, which one search after the
    other reads as a ratio of the two)."""
    steps = {i: searching(counts) for i in range(len(attempts))}
    kept: dict[int, bool | None] = dict.fromkeys(steps)  # None: not started
    results: dict[int, tuple[int, int | None]] = {}
    while steps:
        for i, step in list(steps.items()):
            try:
                n = step.send(kept[i])
            except StopIteration as done:
                results[i] = done.value
                del steps[i]
                continue
            kept[i] = attempts[i](n)
    return [results[i] for i in range(len(attempts))]


def between(attempt: Callable[[int], bool], counts: Sequence[int]) -> tuple[int, int | None]:
    """(the most cameras that kept up, the fewest that fell behind or None): ``attempt``
    each of ``counts`` in turn until one falls behind, then the counts between it and the
    last that kept up, halving the gap (a step of ``COUNTS`` from 16 to 24 would else read
    16 for a box that carries 20)."""
    return in_turn([attempt], counts)[0]


def _attempt_of(
    v: AgentVariant,
    scene: str,
    source: Path,
    window: float,
    quiet: tuple[float, float],
    start: str,
    warm: float,
    tried: list[dict[str, Any]],
) -> Callable[[int], bool]:
    """One variant's try of ``n`` cameras of ``scene``: whether every camera kept up (each
    try recorded in ``tried``)."""

    def attempt(n: int) -> bool:
        m, cams = _copies_window(v, source, n, window, quiet, start, warm)
        ok = all(c["ok"] for c in cams)
        tried.append(
            {
                "n": n,
                "ok": ok,
                "cores": rnd(m["cores"], 2),
                "foreign_cores": rnd(m["foreign_cores"], 2),
                "cameras": cams,
            }
        )
        worst = min((c.get("fps_processed") or 0) for c in cams)
        print(
            f"  cameras: {scene}, {v.name} x{n}: {'ok' if ok else 'behind'} "
            f"({m['cores']:.2f} cores, slowest camera {worst} fps, "
            f"other load {m['foreign_cores']:.2f})",
            flush=True,
        )
        return ok

    return attempt


def _cameras(
    scene: str,
    source: Path,
    window: float,
    max_cameras: int,
    quiet: tuple[float, float],
    cpu: list[dict[str, Any]],
    start: str,
    warm: float,
) -> list[dict[str, Any]]:
    """Per variant, raise the camera count (``COUNTS``) until one falls behind, then try
    the counts between the last that kept up and that one (halving the gap): the most that
    kept up; the variants' searches a step of each in turn (``in_turn``)."""
    vs = variants()
    tried: list[list[dict[str, Any]]] = [[] for _ in vs]
    attempts = [
        _attempt_of(v, scene, source, window, quiet, start, warm, t)
        for v, t in zip(vs, tried, strict=True)
    ]
    edges = in_turn(attempts, [c for c in COUNTS if c <= max_cameras])
    nproc = len(os.sched_getaffinity(0))
    rows = []
    for v, (carried, behind), t in zip(vs, edges, tried, strict=True):
        # The frames a second the box gets through when it has more than it can take (half
        # as many cameras again as the fewest it fell behind at): the detector's
        # throughput on the scene, as a number rather than a count of cameras.
        saturated = None
        if behind is not None:
            n = math.ceil(1.5 * behind)
            m, cams = _copies_window(v, source, n, window, quiet, start, warm)
            fps = _frames_done(cams)
            saturated = {"n": n, "fps": rnd(fps, 1), "cores": rnd(m["cores"], 2)}
            print(f"  cameras: {scene}, {v.name} x{n}: {fps:.1f} frames/s done in all "
                  f"({m['cores']:.2f} cores)", flush=True)  # fmt: skip
        # What the idle cores would carry at the CPU one camera of the scene needs at 10
        # fps (from the cpu part): an estimate for a machine too loaded to measure it.
        ms = next(
            (r["cpu_ms_per_frame"] for r in cpu if r["scene"] == scene and r["variant"] == v.name),
            None,
        )
        est = int(nproc * 1000 / (ms * 10)) if ms else None
        rows.append(
            {
                "scene": scene,
                "variant": v.name,
                "cameras": carried,
                "saturated_fps": saturated["fps"] if saturated else None,
                "saturated": saturated,
                "estimate": est,
                "tried": t,
            }
        )
    return rows


def part_at(
    window: float,
    counts: Sequence[int],
    runs: int,
    quiet: tuple[float, float],
    scenes: Sequence[str] = ("vtest",),
    start: str = "spread",
    warm: float = 4.0,
) -> list[dict[str, Any]]:
    """Each variant and scene at each of ``counts`` cameras, ``runs`` times (in turn, so
    the variants share the machine's moods): per run the frames a second done in all and
    the share of frames dropped; medians over the runs."""
    sources = scene_sources(scenes)
    got: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for _ in range(runs):
        for scene in scenes:
            for n in counts:
                for v in variants():
                    m, cams = _copies_window(v, sources[scene], n, window, quiet, start, warm)
                    frames_in = sum(c.get("frames_in") or 0 for c in cams)
                    run = {
                        "fps": rnd(_frames_done(cams), 1),
                        "dropped": rnd(
                            sum(c.get("dropped") or 0 for c in cams) / max(1, frames_in), 3
                        ),
                        "cores": rnd(m["cores"], 2),
                        "foreign_cores": rnd(m["foreign_cores"], 2),
                        "timeline": timeline(m["heartbeats"]),
                    }
                    got.setdefault((scene, v.name, n), []).append(run)
                    print(f"  at: {scene}, {v.name} x{n}: {run['fps']} frames/s, "
                          f"{100 * run['dropped']:.1f} % dropped", flush=True)  # fmt: skip
    return [
        {
            "scene": scene,
            "variant": name,
            "cameras": n,
            "fps_median": rnd(median([r["fps"] for r in rs]), 1),
            "dropped_median": rnd(median([r["dropped"] for r in rs]), 3),
            "dropped_range": "{:.3f}-{:.3f}".format(
                min(r["dropped"] for r in rs), max(r["dropped"] for r in rs)
            ),
            "runs": rs,
        }
        for (scene, name, n), rs in got.items()
    ]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="accuracy,sahi,tiles,motion,cpu,cameras")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the CPU part")
    p.add_argument("--window", type=float, default=12.0, help="seconds per CPU measurement")
    p.add_argument("--cameras-window", type=float, default=10.0)
    p.add_argument(
        "--cameras-warm",
        type=float,
        default=4.0,
        help="cameras and at parts: seconds the cameras stream before the window opens",
    )
    p.add_argument("--max-cameras", type=int, default=24)
    p.add_argument(
        "--cameras-scenes",
        default="vtest",
        help="scenes of the cameras part, comma-separated: vtest (copies of vtest.avi), "
        "still (the still scene), corner (vtest.avi's bottom-left quarter)",
    )
    p.add_argument(
        "--cameras-start",
        choices=("spread", "together"),
        default="spread",
        help="cameras part: each copy of a clip starts at its own point of it (spread), "
        "or all start at its first frame (together: every camera's busiest moment at once)",
    )
    p.add_argument("--at-cameras", default="4,5", help="at part: camera counts, comma-separated")
    p.add_argument("--at-runs", type=int, default=3, help="at part: runs per count")
    p.add_argument("--sahi-python", default=None, help="an existing venv's python with sahi")
    p.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="KEY=VALUE[,...]",
        help="one more variant: the defaults with these detector keys (e.g. region_px=160)",
    )
    p.add_argument("--only", default="", help="comma-separated variant names to run (default: all)")
    p.add_argument("--max-foreign", type=float, default=0.3, help="cores of other load")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        help="before each CPU/cameras run, wait up to S s for other load <= --max-foreign",
    )
    p.add_argument("--out", type=Path, default=RESULTS / "regions.json")
    args = p.parse_args()
    args.scenes = [x for x in args.cameras_scenes.split(",") if x]
    if not args.scenes or set(args.scenes) - set(SCENES):
        p.error(f"--cameras-scenes {args.cameras_scenes!r}: some of {', '.join(SCENES)}")
    return args


def report(
    result: dict[str, Any], key: str, title: str, cols: list[Any], rows: list[dict[str, Any]]
) -> None:
    """``rows`` into ``result`` (as rows and a Markdown table), printed as a table."""
    result[key] = rows
    print_table(title, cols, rows)
    result[f"{key}_md"] = markdown_table(cols, rows)


#: The first columns of the per-scene tables.
SCENE_VARIANT = [("scene", "scene", 0), ("variant", "variant", 0)]


def _report_at(
    result: dict[str, Any], args: argparse.Namespace, quiet: tuple[float, float]
) -> None:
    """The ``at`` part, run and reported into ``result``."""
    counts = [int(x) for x in args.at_cameras.split(",") if x]
    rows = part_at(args.cameras_window, counts, args.at_runs, quiet, args.scenes,
                   args.cameras_start, args.cameras_warm)  # fmt: skip
    cols = [
        *SCENE_VARIANT,
        ("cameras", "cameras", 0),
        ("fps_median", "frames/s done, median", 1),
        ("dropped_median", "share dropped, median", 3),
        ("dropped_range", "share dropped, range", 0),
    ]
    title = f"\nat fixed camera counts ({args.at_runs} runs, {args.cameras_window:g} s each)"
    report(result, "at", title, cols, rows)


def main() -> None:
    args = parse_args()
    ALSO.extend(also_variant(spec) for spec in args.also)
    ONLY.update(n for n in args.only.split(",") if n)
    parts = set(args.parts.split(","))
    quiet = (args.max_foreign, args.quiet_wait)
    labels = json.loads(LABELS.read_text())
    info = machine_info()
    print(machine_line(info), flush=True)
    result: dict[str, Any] = {"machine": info, "args": vars(args) | {"out": str(args.out)}}
    t_start = time.monotonic()

    acc: list[dict[str, Any]] = []
    if "accuracy" in parts:
        acc += part_accuracy(labels)
    if "sahi" in parts:
        s = part_sahi(labels, args.sahi_python)
        if s is not None:
            acc.append(s)
    if acc:
        result["accuracy"] = acc
        cols = [
            ("variant", "people on 20 hand-checked vtest frames", 0),
            *SCORE_COLS,
            ("cpu_ms_per_frame", "CPU ms/frame", 1),
            ("wall_ms_per_frame", "SAHI wall ms/frame", 1),
            ("foreign_cores", "other load", 2),
        ]
        print_table("\npeople (IoU >= 0.5; realtime: false, every frame)", cols, acc)
        result["accuracy_md"] = markdown_table(cols, acc)
        for row in acc:
            if row.get("missed"):
                print(
                    f"  {row['variant']} missed: "
                    + ", ".join(
                        f"f{m['frame']} {m['xyxy']}"
                        + (f" h{m['h_px']} {m['region_cover']}" if "h_px" in m else "")
                        for m in row["missed"]
                    )
                )
            if row.get("false_positives"):
                print(
                    f"  {row['variant']} false: "
                    + ", ".join(f"f{m['frame']} {m['xyxy']}" for m in row["false_positives"])
                )
    if "tiles" in parts:
        rows = part_tiles(labels)
        cols = [
            ("variant", "stills: detect --tiles on the 20 labelled frames", 0),
            ("looks", "looks/frame", 0),
            *SCORE_COLS,
            ("cpu_ms_per_frame", "CPU ms/frame", 1),
        ]
        report(result, "tiles", "\npeople in stills (IoU >= 0.5; process CPU, median)", cols, rows)
    if "motion" in parts:
        rows = part_motion()
        cols = [
            ("scene", "scene", 0),
            ("frames", "frames", 0),
            ("ms_p50", "motion ms/frame p50", 3),
            ("ms_p90", "p90", 3),
            ("moving_share", "frames with motion", 2),
        ]
        report(result, "motion", "\nmotion detection alone (one OpenCV thread)", cols, rows)
    if "cpu" in parts:
        rows = part_cpu(args.rounds, args.window, quiet)
        cols = [
            ("scene", "scene", 0),
            ("variant", "variant", 0),
            ("core_percent", "% of a core", 1),
            ("vs_full", "vs full", 3),
            ("cpu_ms_per_frame", "CPU ms/processed frame", 1),
            ("vs_full_at_10fps", "vs full per frame", 3),
            ("fps_in", "fps in", 1),
            ("fps_processed", "fps done", 1),
            ("dropped", "dropped", 0),
            ("new_latency_ms_p50", "new event ms p50", 0),
            ("foreign_cores", "other load", 2),
        ]
        report(result, "cpu", "\nCPU per camera at 10 fps (from /proc, medians)", cols, rows)
    if "cameras" in parts:
        rows = part_cameras(
            args.cameras_window,
            args.max_cameras,
            quiet,
            result.get("cpu", []),
            args.scenes,
            args.cameras_start,
            args.cameras_warm,
        )
        cols = [
            *SCENE_VARIANT,
            ("cameras", "10 fps cameras carried (measured)", 0),
            ("saturated_fps", "frames/s at saturation", 1),
            ("cameras_vs_full", "cameras vs full", 2),
            ("saturated_fps_vs_full", "frames/s vs full", 2),
            ("estimate", "estimate: cores / CPU of one", 0),
        ]
        title = f"\ncameras per box (copies of the scene, realtime, starting {args.cameras_start})"
        report(result, "cameras", title, cols, rows)
    if "at" in parts:
        _report_at(result, args, quiet)
    result["elapsed_s"] = round(time.monotonic() - t_start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {args.out} ({result['elapsed_s']:.0f} s)")


if __name__ == "__main__":
    main()
