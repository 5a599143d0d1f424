"""Cost of the store-and-forward spool: append per message (NORMAL vs FULL sync), and
throughput through a real broker with the spool vs the memory queue.

    python bench/spool_bench.py [--dir /var/lib/edge-vision-agent] [--json out.json]

Run it on the target's state_dir filesystem (an SD card differs from an SSD by 10-100x).
Starts its own mosquitto on a free port for the throughput part (skipped if absent).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from agent.mqtt.client import MqttLink
from agent.mqtt.spool import Spool
from agent.mqtt.store import MemoryQueue, Store
from agent.mqtt.topics import Topics
from agent.settings import MqttSettings

TOPIC = "vision/bench/front/detections"
PAYLOAD = b"x" * 700  # a DetectionMessage with a few boxes


def append_cost(store: Store, n: int) -> dict[str, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        store.append(TOPIC, PAYLOAD, 1)
        times.append((time.perf_counter() - t0) * 1e6)
    t0 = time.perf_counter()
    acked = 0
    while rows := store.take(64):
        store.ack([r.id for r in rows])
        acked += len(rows)
    ack_us = (time.perf_counter() - t0) * 1e6 / max(1, acked)
    times.sort()
    return {
        "append_mean_us": round(statistics.fmean(times), 1),
        "append_p50_us": round(times[len(times) // 2], 1),
        "append_p99_us": round(times[int(len(times) * 0.99)], 1),
        "ack_per_msg_us": round(ack_us, 1),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def throughput(store: Store, port: int, n: int) -> float:
    settings = MqttSettings(host="127.0.0.1", port=port, reconnect_min_s=0.1)
    link = MqttLink(settings, Topics("vision", "bench"), store, threading.Event(), boot_id="b")
    link.start()
    link.wait_connected(5)
    t0 = time.perf_counter()
    for _ in range(n):
        link.publish_spooled(TOPIC, PAYLOAD)
    link.flush(120)
    rate = n / (time.perf_counter() - t0)
    link.close(2)
    return round(rate)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=None, help="where to put the spool files")
    p.add_argument("-n", type=int, default=3000)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spool-bench-", dir=args.dir))
    results: dict[str, dict[str, float]] = {}
    for sync in ("NORMAL", "FULL"):
        spool = Spool(work / f"{sync}.db", 1 << 30, 86400, synchronous=sync)
        results[f"spool_{sync.lower()}"] = append_cost(spool, args.n)
        spool.close()
    results["memory"] = append_cost(MemoryQueue(1 << 30, 86400), args.n)
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if Path(mosquitto).exists():
        port = free_port()
        conf = work / "m.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
        broker = subprocess.Popen([mosquitto, "-c", str(conf)], stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            n = args.n * 3
            spool = Spool(work / "tp.db", 1 << 30, 86400)
            results["spool_normal"]["msgs_per_s"] = throughput(spool, port, n)
            spool.close()
            results["memory"]["msgs_per_s"] = throughput(MemoryQueue(1 << 30, 86400), port, n)
        finally:
            broker.terminate()
            broker.wait(5)
    shutil.rmtree(work, ignore_errors=True)
    cols = ["append_mean_us", "append_p50_us", "append_p99_us", "ack_per_msg_us", "msgs_per_s"]
    print(f"{'store':<14}" + "".join(f"{c:>16}" for c in cols))
    for name, row in results.items():
        print(f"{name:<14}" + "".join(f"{row.get(c, '-')!s:>16}" for c in cols))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
