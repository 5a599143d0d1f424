"""`edge-agent push-model`: sign a model, send it to a device or fleet group, await replies.

Publishes the ``model/deploy`` command (QoS 1, MQTT 5 ResponseTopic + CorrelationData);
for ``--via chunks`` it waits for the device's ``accepted`` progress message (signature,
version and size passed) and only then sends the file in chunks on the upload topics, so
a refused or absent device costs one small message. Prints each reply as JSON. Exit
status: 0 all ok, 1 an error reply, 3 no reply (or no acceptance) in time.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.commands.sign import add_model_args, signed_manifest
from agent.errors import BrokerError, ConfigError
from agent.mqtt.topics import Topics

DEPLOY = "model/deploy"
EXIT_ERROR_REPLY = 1
EXIT_NO_REPLY = 3
CONNECT_TIMEOUT_S = 10.0
INFLIGHT_CHUNKS = 16
ACCEPT_TIMEOUT_S = 15.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "push-model", help="deploy a signed model to a device or fleet group over MQTT"
    )
    p.add_argument("--broker", required=True, metavar="HOST[:PORT]", help="MQTT broker")
    p.add_argument("--prefix", default="vision", help="topic prefix (default: %(default)s)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--device", help="device id")
    target.add_argument("--group", help="fleet group")
    add_model_args(p)
    p.add_argument(
        "--via",
        nargs="+",
        default=["chunks"],
        metavar="chunks|url URL",
        help="send the file in MQTT chunks (default), or let devices download it from URL",
    )
    p.add_argument("--chunk-size", type=int, default=262144, help="bytes per chunk")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for replies")
    p.add_argument(
        "--accept-timeout",
        type=float,
        default=ACCEPT_TIMEOUT_S,
        metavar="S",
        help="chunks: seconds to wait for the device's acceptance before sending the file; "
        "0 sends at once (agents older than the progress topic) (default %(default)g)",
    )
    p.add_argument(
        "--expect",
        type=int,
        default=None,
        metavar="N",
        help="with --group: stop waiting once N devices replied (default: wait --timeout)",
    )
    p.add_argument("--id", default=None, help="command id (default: random)")
    p.add_argument("--username", default=None, help="broker user name")
    p.add_argument("--password", default=None, help="broker password")
    p.add_argument("--ca", type=Path, default=None, help="CA bundle: connect with TLS")
    p.set_defaults(handler=run)


@dataclass(frozen=True, slots=True)
class Route:
    """Where the command, chunks and replies of one push go."""

    deploy: str
    reply_filter: str
    response_topic: str
    group: str | None
    topics: Topics
    progress_filter: str = ""

    def upload(self, transfer_id: str, index: int) -> str:
        if self.group is not None:
            return self.topics.fleet_model_upload(self.group, transfer_id, index)
        return self.topics.model_upload(transfer_id, index)

    def device_of(self, topic: str) -> str | None:
        """The device a reply came from, or None for the private response topic."""
        if topic == self.response_topic:
            return None
        head, _, rest = topic.partition("/reply/")
        return head.rsplit("/", 1)[-1] if rest == DEPLOY else None


def route(prefix: str, device: str | None, group: str | None, client_id: str) -> Route:
    """Topics of a push. Not in agent.mqtt.topics: the fleet-wide reply filter and the
    operator's private response topic are the operator's, not a device's."""
    try:
        if group is not None:
            t = Topics(prefix, "_operator", (group,))
            return Route(
                t.fleet_cmd(group, DEPLOY),
                f"{prefix}/+/reply/{DEPLOY}",
                f"edge-agent/push-model/{client_id}/reply",
                group,
                t,
                f"{prefix}/+/progress/{DEPLOY}",
            )
        t = Topics(prefix, device or "")
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return Route(
        t.cmd(DEPLOY),
        t.reply(DEPLOY),
        f"edge-agent/push-model/{client_id}/reply",
        None,
        t,
        t.progress(DEPLOY),
    )


def chunk_source(size: int, chunk_size: int) -> dict[str, Any]:
    """A fresh ``source`` of a chunked transfer of ``size`` bytes."""
    if not 256 <= chunk_size <= 16 * 1024 * 1024:
        raise ConfigError("--chunk-size must be 256 .. 16777216 bytes")
    return {
        "transfer_id": f"t-{secrets.token_hex(6)}",
        "chunks": max(1, math.ceil(size / chunk_size)),
        "chunk_size": chunk_size,
    }


def _source(args: argparse.Namespace, size: int) -> dict[str, Any]:
    via = args.via
    if via == ["chunks"]:
        return chunk_source(size, args.chunk_size)
    if len(via) == 2 and via[0] == "url":
        return {"url": via[1]}
    raise ConfigError("--via takes 'chunks' or 'url URL'")


def _chunks(path: Path, chunk_size: int) -> Iterator[bytes]:
    with path.open("rb") as f:
        while block := f.read(chunk_size):
            yield block


def parse_broker(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and "]" not in port:
        return host.strip("[]"), int(port)
    return value.strip("[]"), 1883


class Session:
    """One paho MQTT 5 client: connect, subscribe, publish with acks, collect replies."""

    def __init__(self, args: argparse.Namespace, client_id: str) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self._mqtt = mqtt
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        if args.username is not None:
            self.client.username_pw_set(args.username, args.password)
        if args.ca is not None:
            self.client.tls_set(ca_certs=str(args.ca))
        self.connected = threading.Event()
        self.connect_error: str | None = None
        self.subscribed = threading.Event()
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if rc.is_failure:
            self.connect_error = str(rc)
        self.connected.set()

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        self.subscribed.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        self.messages.put((msg.topic, bytes(msg.payload)))

    def connect(self, broker: str, filters: list[str]) -> None:
        host, port = parse_broker(broker)
        try:
            self.client.connect(host, port, keepalive=30)
        except OSError as e:
            raise BrokerError(f"cannot connect to {host}:{port}: {e}") from e
        self.client.loop_start()
        if not self.connected.wait(CONNECT_TIMEOUT_S) or self.connect_error:
            raise BrokerError(f"broker {host}:{port} refused: {self.connect_error or 'timeout'}")
        self.client.subscribe([(f, 1) for f in filters])
        if not self.subscribed.wait(CONNECT_TIMEOUT_S):
            raise BrokerError("broker did not acknowledge the reply subscription")

    def publish(self, topic: str, payload: bytes, props: Any = None) -> Any:
        info = self.client.publish(topic, payload, qos=1, properties=props)
        if info.rc not in (self._mqtt.MQTT_ERR_SUCCESS, self._mqtt.MQTT_ERR_NO_CONN):
            raise BrokerError(f"publish to {topic} failed: {self._mqtt.error_string(info.rc)}")
        return info

    def response_props(self, response_topic: str, correlation: bytes) -> Any:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]  # paho leaves it unannotated
        props.ResponseTopic = response_topic
        props.CorrelationData = correlation
        return props

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def wait_acked(infos: list[Any], deadline: float) -> None:
    for info in infos:
        try:
            info.wait_for_publish(max(0.0, deadline - time.monotonic()))
        except (RuntimeError, ValueError) as e:
            raise BrokerError(f"lost the broker while publishing: {e}") from e
        if not info.is_published():
            raise BrokerError("the broker did not acknowledge a chunk in time")


def send_chunks(session: Session, r: Route, path: Path, source: dict[str, Any]) -> None:
    tid, size = source["transfer_id"], source["chunk_size"]
    deadline = time.monotonic() + 600.0
    window: list[Any] = []
    for index, chunk in enumerate(_chunks(path, size)):
        window.append(session.publish(r.upload(tid, index), chunk))
        if len(window) >= INFLIGHT_CHUNKS:  # bounded memory: wait for the oldest acks
            wait_acked(window[: INFLIGHT_CHUNKS // 2], deadline)
            window = window[INFLIGHT_CHUNKS // 2 :]
    wait_acked(window, deadline)


def await_acceptance(
    session: Session, r: Route, cmd_id: str, timeout: float, expect: int | None = None
) -> tuple[int, int]:
    """``(accepted, refused)`` devices of ``cmd_id`` within ``timeout``.

    Returns at the first answer for one device; for a group once ``expect`` devices
    answered, else at the timeout. Final replies seen here go back on the queue for
    ``_collect``; progress messages are consumed.
    """
    deadline = time.monotonic() + timeout
    accepted: set[str] = set()
    refused: set[str] = set()
    kept: list[tuple[str, bytes]] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            topic, payload = session.messages.get(timeout=min(left, 0.2))
        except queue.Empty:
            continue
        try:
            body = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(body, dict) or body.get("id") != cmd_id:
            continue
        if topic.endswith(f"/progress/{DEPLOY}"):
            if body.get("stage") == "accepted":
                accepted.add(topic.split("/progress/")[0].rsplit("/", 1)[-1])
        else:
            kept.append((topic, payload))
            if body.get("ok") is False:
                refused.add(r.device_of(topic) or "")
        answered = len(accepted | refused)
        if r.group is None and answered:
            break
        if r.group is not None and expect is not None and answered >= expect:
            break
    for item in kept:
        session.messages.put(item)
    return len(accepted), len(refused)


def _collect(
    session: Session, r: Route, cmd_id: str, timeout: float, expect: int | None = None
) -> list[tuple[str | None, dict[str, Any]]]:
    """Replies to ``cmd_id``: the first one for a device; every device's for a group."""
    deadline = time.monotonic() + timeout
    seen: set[bytes] = set()
    replies: list[tuple[str | None, dict[str, Any]]] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            topic, payload = session.messages.get(timeout=min(left, 0.5))
        except queue.Empty:
            continue
        try:
            reply = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(reply, dict) or reply.get("id") != cmd_id or payload in seen:
            continue
        if topic.endswith(f"/progress/{DEPLOY}"):
            continue  # a stage (accepted), never the final reply
        seen.add(payload)  # the same reply on the reply topic and the response topic
        device = r.device_of(topic)
        if r.group is None:
            return [(device, reply)]
        if device is not None:
            replies.append((device, reply))
            print(json.dumps({"device": device, "reply": reply}), flush=True)
            if expect is not None and len({d for d, _ in replies}) >= expect:
                break
    return replies


def run(args: argparse.Namespace) -> int:
    signed = signed_manifest(args)
    manifest = signed["manifest"]
    source = _source(args, int(manifest["size"]))
    cmd_id = args.id or f"push-{secrets.token_hex(4)}"
    client_id = f"edge-agent-push-{secrets.token_hex(4)}"
    r = route(args.prefix, args.device, args.group, client_id)
    body = {"id": cmd_id, **signed, "source": source}
    session = Session(args, client_id)
    session.connect(args.broker, [r.reply_filter, r.response_topic, r.progress_filter])
    try:
        props = session.response_props(r.response_topic, cmd_id.encode())
        info = session.publish(r.deploy, json.dumps(body).encode(), props)
        wait_acked([info], time.monotonic() + CONNECT_TIMEOUT_S)
        target = f"group {args.group}" if args.group else f"device {args.device}"
        print(
            f"deploy {cmd_id}: {manifest['name']} v{manifest['version']} "
            f"({manifest['size']} bytes) -> {target}",
            file=sys.stderr,
        )
        replies = []
        if "transfer_id" in source:
            if args.accept_timeout > 0:
                ok, refused = await_acceptance(session, r, cmd_id, args.accept_timeout, args.expect)
                if not ok:
                    print(
                        f"no device accepted {cmd_id} ({refused} refused): no chunk sent",
                        file=sys.stderr,
                    )
            if args.accept_timeout <= 0 or ok:
                send_chunks(session, r, args.model, source)
                print(f"sent {source['chunks']} chunks", file=sys.stderr)
                replies = _collect(session, r, cmd_id, args.timeout, args.expect)
            else:
                replies = _collect(session, r, cmd_id, 0.5, args.expect)
        else:
            replies = _collect(session, r, cmd_id, args.timeout, args.expect)
    finally:
        session.close()
    if not replies:
        print(f"no reply to {cmd_id} within {args.timeout:g} s", file=sys.stderr)
        return EXIT_NO_REPLY
    if args.group is None:
        print(json.dumps(replies[0][1]))
    return 0 if all(reply.get("ok") is True for _, reply in replies) else EXIT_ERROR_REPLY
