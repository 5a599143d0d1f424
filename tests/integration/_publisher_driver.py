"""A publisher process the fault tests can SIGKILL: spool + MqttLink + numbered detections.

Publishes ``--count`` DetectionMessages (seq = start..start+count-1) at ``--rate`` per
second to ``vision/<device>/front/detections``, then waits (up to ``--linger`` s) until the
store is drained, and closes the link. Writes its counters as JSON to ``--stats`` every
0.05 s (atomically), so the test can watch it. SIGTERM ends it gracefully.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path

from agent.log import configure_logging
from agent.messages import DetectionMessage, utc_ts
from agent.mqtt.client import MqttLink
from agent.mqtt.spool import Spool
from agent.mqtt.store import MemoryQueue, Store
from agent.mqtt.topics import Topics
from agent.settings import MqttSettings

DEVICE = "dev-1"
CAMERA = "front"


def detection(seq: int, pad: int) -> bytes:
    """A contract DetectionMessage of about ``pad`` bytes more than the minimum."""
    n = max(1, pad // 90)
    return DetectionMessage(
        device=DEVICE,
        camera=CAMERA,
        boot_id="boot-test",
        seq=seq,
        frame_id=seq,
        ts=utc_ts(time.time()),
        image_wh=(768, 576),
        model={"name": "m", "version": 1, "sha256": "ab" * 32},
        latency_ms={"capture_to_publish": 1.0, "inference": 1.0},
        detections=[{"label": "person", "class_id": 0, "score": 0.5, "xyxy": [1.0, 2.0, 3.0, 4.0]}]
        * n,
    ).to_bytes()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--spool", type=Path, help="spool file; omit for the memory queue")
    p.add_argument("--stats", type=Path, required=True)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--pad", type=int, default=0)
    p.add_argument("--max-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--max-age", type=float, default=86400.0)
    p.add_argument("--max-payload", type=int, default=262144)
    p.add_argument("--oversize", default="", help="comma-separated seqs sent oversize")
    p.add_argument("--keepalive", type=int, default=5)
    p.add_argument("--protocol", type=int, default=5)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--linger", type=float, default=30.0)
    p.add_argument("--client-id", default="driver")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    configure_logging("info", json=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    settings = MqttSettings(
        host=args.host,
        port=args.port,
        protocol=args.protocol,
        keepalive_s=args.keepalive,
        reconnect_min_s=0.1,
        reconnect_max_s=0.5,
        inflight_window=args.window,
        max_payload_bytes=args.max_payload,
    )
    store: Store
    if args.spool:
        store = Spool(args.spool, args.max_bytes, args.max_age)
    else:
        store = MemoryQueue(args.max_bytes, args.max_age)
    link = MqttLink(
        settings,
        Topics("vision", DEVICE),
        store,
        stop,
        boot_id="boot-test",
        client_id=args.client_id,
        owns_store=True,
    )
    topic = link.topics.camera_detections(CAMERA)
    oversize = {int(s) for s in args.oversize.split(",") if s}
    last_write = 0.0

    def write_stats(done: bool) -> None:
        data = asdict(link.stats()) | {"done_publishing": done, "t": time.monotonic()}
        tmp = args.stats.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, args.stats)

    link.start()
    t0 = time.monotonic()
    for i, seq in enumerate(range(args.start, args.start + args.count)):
        due = t0 + i / args.rate
        while (now := time.monotonic()) < due and not stop.is_set():
            if now - last_write >= 0.05:
                write_stats(False)
                last_write = now
            stop.wait(min(0.05, due - now))
        if stop.is_set():
            break
        pad = args.max_payload + 1000 if seq in oversize else args.pad
        link.publish_spooled(topic, detection(seq, pad))
    write_stats(True)
    deadline = time.monotonic() + args.linger
    while not stop.is_set() and time.monotonic() < deadline:
        if link.flush(0.05):
            break
        write_stats(True)
    link.close(timeout=5.0)
    write_stats(True)


if __name__ == "__main__":
    main()
