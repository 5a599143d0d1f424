"""`edge-agent watch`: a live, compact view of agents' detections, status and heartbeats."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from agent.commands.remote import add_broker_args, target_from_args
from agent.errors import BrokerError
from agent.mqtt.topics import classify, watch_filter


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("watch", help="show live detections, status and heartbeats from a broker")
    add_broker_args(p)
    p.add_argument("--device", default=None, help="one device id (default: all)")
    p.add_argument("--camera", default=None, help="one camera id (default: all)")
    p.add_argument("--raw", action="store_true", help="print topic and raw JSON payloads")
    p.add_argument("--count", type=int, default=None, help="exit after N messages")
    p.add_argument("--duration", type=float, default=None, help="exit after S seconds")
    p.set_defaults(handler=run)


def _clock(ts: Any) -> str:
    return ts[11:23] if isinstance(ts, str) and len(ts) >= 23 else time.strftime("%H:%M:%S")


def _event_line(where: str, body: dict[str, Any]) -> str:
    kind = str(body.get("type", "?")).upper()
    zones = ",".join(body.get("zones") or []) or "-"
    crossings = body.get("crossings") or []
    crossed = (
        f" crossed {crossings[-1].get('line')}:{crossings[-1].get('direction')}"
        if crossings
        else ""
    )
    extra = f" ({body.get('end_reason')})" if body.get("end_reason") else ""
    still = " stationary" if body.get("stationary") else ""
    return (
        f"{_clock(body.get('ts'))} {where:<20} EVENT {kind:<6} {body.get('label')} "
        f"{body.get('id')} score {body.get('top_score')} zones {zones}{crossed}{still}{extra}"
    )


def format_message(
    kind: str, device: str, camera: str | None, payload: bytes, topic: str = ""
) -> str:
    """One readable line for a message of the contract (``topic`` names zones and lines)."""
    try:
        body: Any = json.loads(payload)
    except ValueError:
        body = payload.decode("utf-8", "replace")
    where = f"{device}/{camera}" if camera else device
    if kind == "detections" and isinstance(body, dict):
        dets = body.get("detections") or []
        by_label: dict[str, list[float]] = {}
        for d in dets:
            by_label.setdefault(str(d.get("label")), []).append(float(d.get("score", 0)))
        what = ", ".join(
            f"{len(s)} {k} ({' '.join(f'{x:.2f}' for x in sorted(s, reverse=True)[:4])})"
            for k, s in sorted(by_label.items())
        )
        lat = body.get("latency_ms") or {}
        return (
            f"{_clock(body.get('ts'))} {where:<20} #{body.get('seq')} "
            f"{what or 'nothing'}  [{lat.get('inference', 0):.0f}/"
            f"{lat.get('capture_to_publish', 0):.0f} ms]"
        )
    if kind == "health" and isinstance(body, dict):
        cams = " ".join(
            f"{c}:{v.get('state')} {v.get('fps_processed', 0):.1f}fps"
            for c, v in (body.get("cameras") or {}).items()
        )
        inf = (body.get("inference") or {}).get("latency_ms") or {}
        mq = body.get("mqtt") or {}
        sysf = body.get("system") or {}
        return (
            f"{_clock(body.get('ts'))} {where:<20} HEALTH {body.get('state')} {cams} "
            f"p50 {inf.get('p50')} ms spool {mq.get('spool_depth')} "
            f"cpu {sysf.get('cpu_percent')}% rss {sysf.get('rss_mb')} MB"
        )
    if kind in ("status", "camera_status") and isinstance(body, dict):
        why = [str(body[k]) for k in ("reason", "detail") if body.get(k)]
        reason = f" ({': '.join(why)})" if why else ""
        return f"{_clock(body.get('ts'))} {where:<20} STATUS {body.get('state')}{reason}"
    if kind == "model" and isinstance(body, dict):
        return (
            f"{time.strftime('%H:%M:%S')}     {where:<20} MODEL {body.get('name')} "
            f"v{body.get('version')} {body.get('precision')} on {body.get('provider')} "
            f"sha256 {str(body.get('sha256'))[:12]}"
        )
    if kind == "reply" and isinstance(body, dict):
        outcome = "ok" if body.get("ok") else f"ERROR {body.get('error')}"
        return f"{_clock(body.get('ts'))} {where:<20} REPLY {body.get('id')} {outcome}"
    if kind == "count":
        return f"{time.strftime('%H:%M:%S')}     {where:<20} COUNT {body}"
    if kind == "events" and isinstance(body, dict):
        return _event_line(where, body)
    if kind in ("zone_count", "line_count"):
        # .../<c>/zones/<zone>/<label> or .../<c>/lines/<line>/<label>/<in|out>
        levels = topic.split("/")
        name = "/".join(levels[-2:] if kind == "zone_count" else levels[-3:])
        what = "ZONE" if kind == "zone_count" else "LINE"
        return f"{time.strftime('%H:%M:%S')}     {where:<20} {what} {name} = {body}"
    if kind == "event_snapshot":
        return f"{time.strftime('%H:%M:%S')}     {where:<20} SNAPSHOT {len(payload)} bytes"
    return f"{time.strftime('%H:%M:%S')}     {where:<20} {kind} {str(body)[:100]}"


def run(args: argparse.Namespace) -> int:
    target = target_from_args(args)
    host, port, prefix = target.host, target.port, target.prefix
    seen = 0
    done = threading.Event()
    lock = threading.Lock()

    def on_message(client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        nonlocal seen
        parsed = classify(prefix, msg.topic)
        if parsed is None:
            return
        kind, device, camera = parsed
        if args.camera and camera not in (None, args.camera):
            return
        line = (
            f"{msg.topic} {bytes(msg.payload)[:2000].decode('utf-8', 'replace')}"
            if args.raw
            else format_message(kind, device, camera, bytes(msg.payload), msg.topic)
        )
        with lock:
            print(line, flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                done.set()

    connected = threading.Event()
    refused: list[BrokerError] = []

    def on_connect(client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if rc.is_failure:
            refused.append(target.refused(rc))
        else:
            client.subscribe(watch_filter(prefix, args.device), qos=1)
        connected.set()

    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.on_message = on_message
    client.on_connect = on_connect
    target.apply(client)
    try:
        client.connect(host, port, keepalive=30)
    except OSError as e:
        raise target.connect_error(e) from e
    client.loop_start()
    try:
        if not connected.wait(10):
            raise BrokerError(f"broker {host}:{port} did not accept the connection")
        if refused:
            raise refused[0]
        print(f"watching {watch_filter(prefix, args.device)} on {host}:{port}", file=sys.stderr)
        done.wait(args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        client.disconnect()
        client.loop_stop()
    return 0
