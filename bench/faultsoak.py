"""Mixed-fault soak of the real agent: does anything go missing without being counted?

    python bench/faultsoak.py [--minutes 10] [--seed 39] [--tmpfs-mb 8] [--out FILE]
    python bench/faultsoak.py --minutes 1        # smoke: every fault kind, shorter

Needs root (it mounts a tmpfs). ``python -m agent run`` plays assets/vtest.avi looped at
its native speed, with a zone and a line so events flow, ``state_dir`` on a real tmpfs of
``--tmpfs-mb``, connected to a private mosquitto (persistence on, saved on every change)
through a TCP proxy of this script. A persistent-session subscriber (clean_start false,
QoS 1, its own client id, straight to the broker) records every DetectionMessage,
EventMessage and heartbeat. On a fixed schedule with jitter from ``--seed``, in turn:

- ``broker``: SIGKILL mosquitto, start it again after N s (same port and persistence);
- ``net``: the proxy drops every connection and refuses new ones for N s;
- ``disk``: a filler file takes the tmpfs to 0 bytes free (topped up) for N s, deleted;
- ``agent``: SIGKILL the agent, start it again after N s (a new boot_id);
- ``disk+broker``: the disk full while the broker is down, for N s;
- ``agent+disk``: SIGKILL the agent, fill the disk, start the agent on the full disk,
  free it after N s.

At the end the faults stop, the spool drains, the agent is stopped with SIGTERM. Per
boot_id: detections and events sent (max seq + 1 per camera), received, missing, duplicated,
the agent's own count of what it dropped (its last heartbeat of that boot), and missing
minus counted (the unexplained loss); every ``new`` event id must have exactly one ``end``.
Prints a table, writes JSON (default bench/results/faultsoak.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DEVICE = "soak"
CAMERA = "front"
KINDS = ("broker", "net", "disk", "agent", "disk+broker", "agent+disk")
#: Seconds each fault lasts (uniform in the range), scaled with --minutes below 10.
DURATION = {
    "broker": (5, 15),
    "net": (10, 30),
    "disk": (15, 30),
    "agent": (2, 5),
    "disk+broker": (10, 20),
    "agent+disk": (15, 25),
}
GAP = (15, 25)  # s of fault-free running between two faults


# -- accounting (pure; tests/unit/test_bench_faultsoak.py) ---------------------------------
def seq_stats(seqs: Iterable[int]) -> dict[str, int]:
    """Sent (max seq + 1), received (distinct), missing (never received), duplicated."""
    s = list(seqs)
    distinct = set(s)
    sent = max(distinct) + 1 if distinct else 0
    return {
        "sent": sent,
        "received": len(distinct),
        "missing": sent - len(distinct),
        "duplicated": len(s) - len(distinct),
    }


def dropped_counted(health: Mapping[str, Any] | None) -> int:
    """What a heartbeat says the agent could not deliver (every reason it counts)."""
    if not health:
        return 0
    m = health.get("mqtt", {})
    keys = ("dropped_overflow", "dropped_expired", "dropped_disk_full", "rejected_oversize")
    return sum(int(m.get(k, 0)) for k in keys)


def _by_boot(messages: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for m in messages:
        out[m["boot_id"]][m["camera"]].append(int(m["seq"]))
    return out


def _sum_cameras(per_camera: Mapping[str, list[int]]) -> dict[str, int]:
    total = {"sent": 0, "received": 0, "missing": 0, "duplicated": 0}
    for seqs in per_camera.values():
        for k, v in seq_stats(seqs).items():
            total[k] += v
    return total


def account(
    detections: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    last_health: Mapping[str, Mapping[str, Any]],
    boots: Iterable[str] = (),
) -> dict[str, Any]:
    """Per boot_id (in the order of ``boots``, then of first arrival) and in total.

    ``detections``/``events``: the received message bodies (``boot_id``, ``camera``,
    ``seq``), duplicates included; ``last_health``: the last heartbeat seen of each boot.
    The agent's drop counters cover detections and events together (one spool), so the
    unexplained loss is ``missing detections + missing events - counted``.
    """
    dets, evs = list(detections), list(events)
    det, ev = _by_boot(dets), _by_boot(evs)
    order = list(dict.fromkeys([*boots, *(m["boot_id"] for m in dets + evs), *last_health]))
    rows = []
    for boot in order:
        d, e = _sum_cameras(det.get(boot, {})), _sum_cameras(ev.get(boot, {}))
        counted = dropped_counted(last_health.get(boot))
        row: dict[str, Any] = {"boot_id": boot}
        row.update({f"det_{k}": v for k, v in d.items()})
        row.update({f"ev_{k}": v for k, v in e.items()})
        row["counted_dropped"] = counted
        row["unexplained"] = d["missing"] + e["missing"] - counted
        rows.append(row)
    total: dict[str, Any] = {"boot_id": "total"}
    for key in rows[0] if rows else ():
        if key != "boot_id":
            total[key] = sum(r[key] for r in rows)
    return {"boots": rows, "total": total}


def event_ends(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every ``new`` id with exactly one ``end`` (messages de-duplicated on boot, camera, seq)."""
    seen: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for m in events:
        seen.setdefault((m["boot_id"], m["camera"], int(m["seq"])), m)
    news: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for m in seen.values():
        if m["type"] == "new":
            news[m["id"]] += 1
        elif m["type"] == "end":
            ends[m["id"]] += 1
            reasons[str(m.get("end_reason"))] += 1
    return {
        "new": len(news),
        "new_more_than_once": sorted(i for i, n in news.items() if n > 1),
        "ended_once": sum(1 for i in news if ends[i] == 1),
        "without_end": sorted(i for i in news if ends[i] == 0),
        "ended_more_than_once": sorted(i for i in news if ends[i] > 1),
        "end_without_new": sorted(i for i in ends if i not in news),
        "end_reasons": dict(sorted(reasons.items())),
    }


def pairs_explained(ends: Mapping[str, Any], total: Mapping[str, Any]) -> bool:
    """Every ``new`` has one ``end``, but for pairs whose other half is a missing event."""
    broken = len(ends["without_end"]) + len(ends["end_without_new"])
    doubled = ends["new_more_than_once"] or ends["ended_more_than_once"]
    return not doubled and broken <= total["ev_missing"]


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def gaps(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Runs of missing seqs per boot and camera, with the ``ts`` of the messages around them
    (None at the start) to find which fault was active."""
    by: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for m in messages:
        by[(m["boot_id"], m["camera"])][int(m["seq"])] = m["ts"]
    out = []
    for (boot, camera), seqs in by.items():
        prev = -1
        for seq in sorted(seqs):
            if seq > prev + 1:
                before = seqs.get(prev)
                out.append(
                    {
                        "boot_id": boot,
                        "camera": camera,
                        "first": prev + 1,
                        "last": seq - 1,
                        "ts_before": _ts(before) if before else None,
                        "ts_after": _ts(seqs[seq]),
                    }
                )
            prev = seq
    return out


# -- the faults ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    at_s: float  # after the soak's start
    kind: str
    duration_s: float


def schedule(minutes: float, seed: int) -> list[Fault]:
    """The kinds in turn, gaps and durations jittered by a seeded RNG, until ``minutes``."""
    rng = random.Random(seed)
    scale = max(0.3, min(1.0, minutes / 10))
    out: list[Fault] = []
    t = rng.uniform(*GAP) * scale
    i = 0
    while t < minutes * 60:
        kind = KINDS[i % len(KINDS)]
        d = round(rng.uniform(*DURATION[kind]) * scale, 1)
        out.append(Fault(round(t, 1), kind, d))
        t += d + rng.uniform(*GAP) * scale
        i += 1
    return out


class Filler:
    """Keeps a file system at 0 bytes free (topped up, as the agent frees space) until freed."""

    def __init__(self, path: Path) -> None:
        self.file = path / "filler"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _top_up(self) -> None:
        fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while not self._stop.is_set():
                with contextlib.suppress(OSError):  # ENOSPC: full, as meant
                    while True:
                        os.write(fd, b"\0" * (1 << 16))
                self._stop.wait(0.2)
        finally:
            os.close(fd)

    def fill(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._top_up, daemon=True, name="filler")
        self._thread.start()
        time.sleep(0.3)

    def free(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        with contextlib.suppress(FileNotFoundError):
            self.file.unlink()


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Any:
    """A real tmpfs of ``size_mb`` on ``path``, unmounted on the way out whatever happens."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0777", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(f"cannot mount a tmpfs on {path} (run as root): {r.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# -- the run ---------------------------------------------------------------------------------
class Soak:
    def __init__(self, work: Path, state: Path, args: argparse.Namespace) -> None:
        from netproxy import Proxy  # bench/netproxy.py

        from tests.agent_proc import AgentProc
        from tests.brokers import Broker, Recorder

        self.t0 = time.time()
        # Saved on every change: a SIGKILLed broker then loses nothing it acknowledged.
        self.broker = Broker(work / "broker", extra_config=("autosave_on_changes true",))
        self.broker.start()
        self.proxy = Proxy(self.broker.port)
        base = f"vision/{DEVICE}"
        self.rec = Recorder(
            self.broker,
            [f"{base}/+/detections", f"{base}/+/events", f"{base}/health"],
            client_id=f"faultsoak-rec-{os.getpid()}",
            session_expiry_s=7200,
        ).start()
        camera = {
            "id": CAMERA,
            "source": str(ROOT / "assets" / "vtest.avi"),
            "loop": True,
            "realtime": True,
            "zones": {"street": {"polygon": [[0, 0.3], [1, 0.3], [1, 0.8], [0, 0.8]]}},
            "lines": {"middle": {"points": [[0.5, 0.0], [0.5, 1.0]]}},
        }
        (work / "agent").mkdir(parents=True, exist_ok=True)
        self.agent = AgentProc(
            None,
            work / "agent",
            cameras=[camera],
            device_id=DEVICE,
            port=self.proxy.port,
            overrides={"state_dir": str(state), "log_level": "info"},
        )
        self.filler = Filler(state)
        self.state = state
        self.timeline: list[dict[str, Any]] = []

    def note(self, what: str, **extra: Any) -> None:
        t = time.time()
        self.timeline.append({"t_s": round(t - self.t0, 1), "wall": t, "what": what, **extra})
        print(f"  t+{t - self.t0:6.1f}s  {what} {extra or ''}", flush=True)

    def detections(self) -> int:
        return len(self.rec.on(f"vision/{DEVICE}/{CAMERA}/detections"))

    def last_health(self) -> dict[str, Any] | None:
        health = self.rec.on(f"vision/{DEVICE}/health")
        return dict(json.loads(health[-1].payload)) if health else None

    def kill_agent(self) -> None:
        self.agent.signal(signal.SIGKILL)
        self.agent.close()

    def start_agent(self, timeout: float) -> None:
        n = self.detections()
        self.agent.start()
        if not _wait(lambda: self.detections() > n, timeout):
            raise RuntimeError(f"no detection {timeout:.0f} s after the agent started")

    def inject(self, f: Fault) -> None:
        """One fault, from its start to its end (this call lasts ``f.duration_s`` or so)."""
        self.note(f"{f.kind} start", duration_s=f.duration_s)
        if f.kind == "broker":
            self.broker.kill()
            time.sleep(f.duration_s)
            self.broker.start()
        elif f.kind == "net":
            self.proxy.cut()
            time.sleep(f.duration_s)
            self.proxy.restore()
        elif f.kind == "disk":
            self.filler.fill()
            self.note("disk full", free_bytes=free_bytes(self.state))
            time.sleep(f.duration_s)
            self.filler.free()
        elif f.kind == "agent":
            self.kill_agent()
            time.sleep(f.duration_s)
            self.agent.start()
        elif f.kind == "disk+broker":
            self.broker.kill()
            self.filler.fill()
            time.sleep(f.duration_s)
            self.broker.start()
            time.sleep(3.0)  # sending resumes while the disk is still full
            self.filler.free()
        elif f.kind == "agent+disk":
            self.kill_agent()
            self.filler.fill()
            time.sleep(2.0)
            self.agent.start()  # on a full state_dir: degraded, publishing live
            time.sleep(f.duration_s)
            self.filler.free()
        self.note(f"{f.kind} end")

    def run(self, faults: list[Fault], minutes: float) -> None:
        self.start_agent(timeout=300)
        self.t0 = time.time()
        self.note("agent publishing; faults begin")
        for f in faults:
            wait = self.t0 + f.at_s - time.time()
            if wait > 0:
                time.sleep(wait)
            self.inject(f)
        rest = self.t0 + minutes * 60 - time.time()
        if rest > 0:
            time.sleep(rest)
        self.note("faults over; draining")
        # Judged on a heartbeat sent after the last fault: an older one says nothing of it.
        beats = len(self.rec.on(f"vision/{DEVICE}/health"))
        drained = _wait(
            lambda: len(self.rec.on(f"vision/{DEVICE}/health")) > beats and self._drained(), 120
        )
        self.note("drained" if drained else "not drained after 120 s")
        code = self.agent.stop(timeout=30)
        _wait_quiet(lambda: len(self.rec.messages), 3.0, 30)
        self.note("agent stopped", exit_code=code)

    def _drained(self) -> bool:
        h = self.last_health()
        return bool(h and h["mqtt"]["connected"] and h["mqtt"]["spool_depth"] == 0)

    def close(self) -> None:
        self.filler.free()
        with contextlib.suppress(Exception):
            self.agent.close()
        self.rec.close()
        self.proxy.close()
        self.broker.close()


def _wait(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return bool(predicate())


def _wait_quiet(count: Any, quiet_s: float, timeout: float) -> None:
    """Until ``count()`` has not changed for ``quiet_s`` (at most ``timeout``)."""
    deadline = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.2)
        if (n := count()) != last:
            last, since = n, time.monotonic()


def fault_at(timeline: list[dict[str, Any]], t0: float, t1: float) -> list[str]:
    """The faults active at any moment between wall times ``t0`` and ``t1``."""
    active, spans = {}, []
    for e in timeline:
        kind, _, edge = e["what"].rpartition(" ")
        if edge == "start":
            active[kind] = e["wall"]
        elif edge == "end" and kind in active:
            spans.append((kind, active.pop(kind), e["wall"]))
    spans += [(k, s, float("inf")) for k, s in active.items()]
    return sorted({k for k, s, e in spans if s <= t1 and e >= t0})


def report(soak: Soak) -> dict[str, Any]:
    dets: list[dict[str, Any]] = []
    evs: list[dict[str, Any]] = []
    last: dict[str, dict[str, Any]] = {}
    states: dict[str, Counter[str]] = defaultdict(Counter)
    for m in soak.rec.messages:
        body = json.loads(m.payload)
        if m.topic.endswith("/detections"):
            dets.append(body)
        elif m.topic.endswith("/events"):
            evs.append(body)
        elif m.topic.endswith("/health"):
            last[body["boot_id"]] = body
            states[body["boot_id"]][body.get("reason") or body["state"]] += 1
    acc = account(dets, evs, last)
    for row in acc["boots"]:
        h = last.get(row["boot_id"], {})
        row["last_heartbeat_uptime_s"] = h.get("uptime_s")
        row["last_heartbeat_mqtt"] = h.get("mqtt")  # which counter said what
        row["heartbeat_states"] = dict(states[row["boot_id"]])
    holes = [
        {**g, "kind": kind, "faults": fault_at(soak.timeline, g["ts_before"] or 0, g["ts_after"])}
        for kind, msgs in (("detections", dets), ("events", evs))
        for g in gaps(msgs)
    ]
    closed = soak.agent.logged("mqtt_closed")
    return {
        **acc,
        "events_end": event_ends(evs),
        "gaps": holes,
        "spool_depth_at_stop": closed[-1].get("spool_depth") if closed else None,
    }


COLS = [
    ("boot_id", "boot"),
    ("det_sent", "det sent"),
    ("det_received", "recv"),
    ("det_missing", "miss"),
    ("det_duplicated", "dup"),
    ("ev_sent", "ev sent"),
    ("ev_received", "recv"),
    ("ev_missing", "miss"),
    ("ev_duplicated", "dup"),
    ("counted_dropped", "counted"),
    ("unexplained", "unexplained"),
]


def table(rows: list[dict[str, Any]]) -> str:
    cells = [[h for _, h in COLS]] + [
        [str(r[k])[:8] if k == "boot_id" else str(r[k]) for k, _ in COLS] for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLS))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="faults for this long (1: smoke)")
    p.add_argument("--seed", type=int, default=39, help="RNG seed of the schedule's jitter")
    p.add_argument("--tmpfs-mb", type=int, default=8, help="size of the state_dir tmpfs")
    p.add_argument(
        "--faults",
        default=",".join(KINDS),
        help=f"the fault kinds to inject, in turn (default all: {','.join(KINDS)}); "
        "'none': a steady run, e.g. how a small disk holds up without faults",
    )
    p.add_argument(
        "--fault-s",
        type=float,
        default=None,
        metavar="S",
        help="every fault lasts S seconds instead of its jittered range (e.g. a 40 s outage)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faultsoak.json")
    args = p.parse_args()
    from harness import machine_info, machine_line

    info = machine_info()
    kinds = [] if args.faults == "none" else args.faults.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        p.error(f"--faults: unknown kind {unknown[0]!r} (kinds: {', '.join(KINDS)}, or none)")
    faults = [f for f in schedule(args.minutes, args.seed) if f.kind in kinds]
    if args.fault_s is not None:
        faults = [Fault(f.at_s, f.kind, args.fault_s) for f in faults]
    print(f"machine: {machine_line(info)}; load1 {info['load1_at_start']}", flush=True)
    print(f"{len(faults)} faults over {args.minutes:g} min (seed {args.seed})", flush=True)
    work = Path(tempfile.mkdtemp(prefix="faultsoak-"))
    started = time.time()
    with tmpfs(work / "state", args.tmpfs_mb) as state:
        soak = Soak(work, state, args)
        try:
            soak.run(faults, args.minutes)
        finally:
            soak.close()
    result = {
        "argv": sys.argv[1:],
        "machine": info,
        "seed": args.seed,
        "minutes": args.minutes,
        "tmpfs_mb": args.tmpfs_mb,
        "duration_s": round(time.time() - started),
        "schedule": [asdict(f) for f in faults],
        "timeline": [{k: v for k, v in e.items() if k != "wall"} for e in soak.timeline],
        **report(soak),
    }
    print()
    print(table([*result["boots"], result["total"]]))
    ends = result["events_end"]
    print(
        f"events: {ends['new']} new, {ends['ended_once']} with exactly one end, "
        f"{len(ends['without_end'])} without, {len(ends['ended_more_than_once'])} with more; "
        f"{len(ends['end_without_new'])} ends without their new (a broken pair is explained "
        f"when its other half is a missing event: {pairs_explained(ends, result['total'])}); "
        f"end reasons {ends['end_reasons']}; spool depth at stop {result['spool_depth_at_stop']}"
    )
    for g in result["gaps"]:
        print(f"  gap {g['kind']} {g['boot_id'][:8]} seq {g['first']}..{g['last']}: {g['faults']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}" + ("" if not args.keep else f"; work dir {work}"))
    if not args.keep:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    ok = result["total"]["unexplained"] == 0 and pairs_explained(ends, result["total"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
