"""Where one frame's time goes: the agent's own pipeline stages, timed one by one.

    python bench/stages.py [--model M] [--frames 200] [--rounds 5] [--out FILE.json]

On real vtest.avi frames, in one thread, with the agent's own classes (the same code the
daemon runs per frame), each stage's thread CPU time per frame:

- ``capture``: ``cv2.VideoCapture.read`` of the next frame (video decode; the process's
  CPU time, since FFmpeg may decode on threads of its own);
- ``letterbox``: ``LetterboxBuffer.apply`` (resize, colour planes, scaling into the
  model-input tensor);
- ``inference``: ``Runtime.run`` (``session.run``, 1 intra-op thread: one worker of the
  2x1 throughput layout);
- ``postprocess``: YOLO decode, NMS and the mapping back to source pixels
  (``Detector.detect`` minus the two stages above);
- ``message``: ``DetectionPublisher`` building the contract's JSON for the frame;
- ``spool``: appending that payload to the on-disk spool (``Spool.append``).

The MQTT send (paho's threads) is not here: ``bench/e2e.py`` measures the whole agent.
Rounds repeat the pass over the same frames; the table shows per-stage medians over
rounds (each round's value is that stage's median over frames). ``capture`` is timed once,
while the frames are read, and every round reports that median. ``overhead`` is the sum
of every stage but ``inference``, and its share of the total: what the pipeline adds to
``session.run`` on one core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RESULTS, VIDEO, default_model, machine_info, machine_line, print_table

from agent.cv import cv2
from agent.detect.detector import Detector, StageTimes
from agent.detect.runtime import SessionSpec
from agent.frames import Frame
from agent.mqtt.spool import Spool
from agent.mqtt.topics import Topics
from agent.service.engine import Processed
from agent.service.publish import DetectionPublisher

STAGES = ("capture", "letterbox", "inference", "postprocess", "message", "spool")


class _Capture:
    """What ``DetectionPublisher`` hands its payloads to; kept for the spool stage."""

    def __init__(self) -> None:
        self.payload: tuple[str, bytes, int] | None = None

    def publish_spooled(self, topic: str, payload: bytes, qos: int) -> bool:
        self.payload = (topic, payload, qos)
        return True

    def publish_state(self, topic: str, payload: bytes) -> None:
        pass


def read_frames(n: int) -> tuple[list[np.ndarray], list[float]]:
    """The first ``n`` frames of the video, and the process CPU ms of each ``read``.

    Timed as the capture thread reads: decoding into the previous frame's buffer (the
    agent recycles them), so the timing has no page faults of fresh arrays in it.
    """
    frames: list[np.ndarray] = []
    ms: list[float] = []
    cap = cv2.VideoCapture(str(VIDEO))
    buf = None
    while len(ms) < n:
        t = time.process_time_ns()
        ok, buf = cap.read(buf)
        dt = (time.process_time_ns() - t) / 1e6
        if not ok:
            cap.release()
            cap, buf = cv2.VideoCapture(str(VIDEO)), None
            continue
        frames.append(buf.copy())
        ms.append(dt)
    cap.release()
    return frames, ms


def one_round(
    det: Detector,
    frames: list[np.ndarray],
    publisher: DetectionPublisher,
    out: _Capture,
    spool: Spool,
) -> dict[str, float]:
    """One pass over ``frames``: each stage's median thread CPU ms per frame."""
    clock = time.thread_time_ns
    per: dict[str, list[float]] = {s: [] for s in STAGES[1:]}
    for i, img in enumerate(frames):
        t0 = clock()
        box = det.preprocess(img)
        t1 = clock()
        outputs = det.runtime.run(det.input_tensor)
        t2 = clock()
        dets = det.postprocess(outputs, box)
        t3 = clock()
        per["letterbox"].append((t1 - t0) / 1e6)
        per["inference"].append((t2 - t1) / 1e6)
        per["postprocess"].append((t3 - t2) / 1e6)
        times = StageTimes((t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6)
        frame = Frame(img, "cam", i, time.monotonic(), time.time())
        p = Processed(frame, det.info, dets, times, None, time.monotonic(), "w0")
        out.payload = None
        t4 = clock()
        publisher(p)
        per["message"].append((clock() - t4) / 1e6)
        if out.payload is None:
            raise SystemExit("the publisher sent nothing for a frame")
        topic, payload, qos = out.payload
        t5 = clock()
        spool.append(topic, payload, qos)
        per["spool"].append((clock() - t5) / 1e6)
    return {k: statistics.median(v) for k, v in per.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=default_model())
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, default=RESULTS / "stages.json")
    a = p.parse_args()

    cv2.setNumThreads(1)  # as the daemon does
    det = Detector(a.model, SessionSpec(providers=("CPUExecutionProvider",), threads=1))
    det.warmup(3)
    frames, capture_ms = read_frames(a.frames)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        spool = Spool(Path(tmp) / "spool.db", 256 << 20, 3600.0)
        out = _Capture()
        publisher = DetectionPublisher(out, Topics("bench", "dev"), "dev", "boot", 1, "every_frame")
        for r in range(a.rounds):
            row = one_round(det, frames, publisher, out, spool)
            row["capture"] = statistics.median(capture_ms)
            rounds.append(row)
            print(f"  round {r + 1}: " + "  ".join(f"{k} {row[k]:.3f}" for k in STAGES))
            spool.ack([rec.id for rec in spool.take(10 * a.frames)])
        spool.close()
    med = {s: statistics.median(r[s] for r in rounds) for s in STAGES}
    total = sum(med.values())
    overhead = total - med["inference"]
    rows = [{"stage": s, "ms": med[s], "share": 100 * med[s] / total} for s in STAGES]
    rows.append(
        {"stage": "overhead (all but inference)", "ms": overhead, "share": 100 * overhead / total}
    )
    info = machine_info()
    print(machine_line(info))
    print_table(
        f"CPU ms per frame, {a.model.name}, 1 thread, medians of {a.rounds} rounds",
        [("stage", "stage", 0), ("ms", "ms", 3), ("share", "% of total", 1)],
        rows,
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps(
            {
                "machine": info,
                "model": a.model.name,
                "frames": a.frames,
                "rounds": rounds,
                "median_ms": med,
                "overhead_ms": overhead,
            },
            indent=2,
        )
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
