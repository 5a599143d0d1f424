"""Sending one command to a device or a fleet group over MQTT and awaiting the replies.

Shared by the operator commands (``push-model``, ``rollback``, ``config set``): the
command goes out at QoS 1 with an MQTT 5 ResponseTopic + CorrelationData, and replies are
read from both that private topic and the devices' ``reply/<name>`` topics.
"""

from __future__ import annotations

import argparse
import json
import queue
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import BrokerError, ConfigError
from agent.mqtt.topics import Topics

EXIT_ERROR_REPLY = 1
EXIT_NO_REPLY = 3
CONNECT_TIMEOUT_S = 10.0
DEFAULT_BROKER = "localhost:1883"


def add_target_args(
    p: argparse.ArgumentParser, *, timeout: float, broker_required: bool = False
) -> None:
    """--broker, --prefix, --device | --group, --timeout, --expect, --id, credentials."""
    if broker_required:
        p.add_argument("--broker", required=True, metavar="HOST[:PORT]", help="MQTT broker")
    else:
        p.add_argument(
            "--broker",
            default=DEFAULT_BROKER,
            metavar="HOST[:PORT]",
            help="MQTT broker (default: %(default)s)",
        )
    p.add_argument("--prefix", default="vision", help="topic prefix (default: %(default)s)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--device", help="device id")
    target.add_argument("--group", help="fleet group")
    p.add_argument(
        "--timeout",
        type=float,
        default=timeout,
        help="seconds to wait for replies (default: %(default)s)",
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


@dataclass(frozen=True, slots=True)
class Route:
    """Where the command, chunks and replies of one operator command go."""

    name: str
    command: str
    reply_filter: str
    response_topic: str
    group: str | None
    topics: Topics
    progress_filter: str = ""  # the devices' intermediate stages (model/deploy: accepted)

    def upload(self, transfer_id: str, index: int) -> str:
        if self.group is not None:
            return self.topics.fleet_model_upload(self.group, transfer_id, index)
        return self.topics.model_upload(transfer_id, index)

    def device_of(self, topic: str) -> str | None:
        """The device a reply came from, or None for the private response topic."""
        if topic == self.response_topic:
            return None
        head, _, rest = topic.partition("/reply/")
        return head.rsplit("/", 1)[-1] if rest == self.name else None


def route(prefix: str, device: str | None, group: str | None, client_id: str, name: str) -> Route:
    """Topics of command ``name``. Not in agent.mqtt.topics: the fleet-wide reply filter
    and the operator's private response topic are the operator's, not a device's."""
    response = f"edge-agent/operator/{client_id}/reply"
    try:
        if group is not None:
            t = Topics(prefix, "_operator", (group,))
            fleet_reply, fleet_progress = f"{prefix}/+/reply/{name}", f"{prefix}/+/progress/{name}"
            return Route(
                name, t.fleet_cmd(group, name), fleet_reply, response, group, t, fleet_progress
            )
        t = Topics(prefix, device or "")
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return Route(name, t.cmd(name), t.reply(name), response, None, t, t.progress(name))


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

    def answers(
        self, cmd_id: str, deadline: float, poll_s: float
    ) -> Iterator[tuple[str, bytes, dict[str, Any]]]:
        """(topic, payload, body) of each JSON object received for ``cmd_id`` until
        ``deadline`` (monotonic); the caller stops early by leaving the loop."""
        while (left := deadline - time.monotonic()) > 0:
            try:
                topic, payload = self.messages.get(timeout=min(left, poll_s))
            except queue.Empty:
                continue
            try:
                body = json.loads(payload)
            except ValueError:
                continue
            if isinstance(body, dict) and body.get("id") == cmd_id:
                yield topic, payload, body

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def wait_acked(infos: list[Any], deadline: float) -> None:
    """Wait for the broker's PUBACKs of ``infos``; BrokerError when one does not come."""
    for info in infos:
        try:
            info.wait_for_publish(max(0.0, deadline - time.monotonic()))
        except (RuntimeError, ValueError) as e:
            raise BrokerError(f"lost the broker while publishing: {e}") from e
        if not info.is_published():
            raise BrokerError("the broker did not acknowledge a publish in time")


def collect(
    session: Session,
    r: Route,
    cmd_id: str,
    timeout: float,
    expect: int | None = None,
    *,
    on_group_reply: Callable[[str, dict[str, Any]], None] | None = None,
) -> list[tuple[str | None, dict[str, Any]]]:
    """Replies to ``cmd_id``: the first one for a device; every device's for a group.

    ``on_group_reply(device, reply)`` is called as each group member's reply arrives.
    """
    seen: set[bytes] = set()
    replies: list[tuple[str | None, dict[str, Any]]] = []
    for topic, payload, reply in session.answers(cmd_id, time.monotonic() + timeout, 0.5):
        if payload in seen:
            continue
        if "/progress/" in topic:
            continue  # a stage (accepted), never the final reply
        seen.add(payload)  # the same reply on the reply topic and the response topic
        device = r.device_of(topic)
        if r.group is None:
            return [(device, reply)]
        if device is not None:
            replies.append((device, reply))
            if on_group_reply is not None:
                on_group_reply(device, reply)
            if expect is not None and len({d for d, _ in replies}) >= expect:
                break
    return replies


def send_command(args: argparse.Namespace, name: str, body: dict[str, Any], *, summary: Any) -> int:
    """Send command ``name`` with ``body`` to ``args.device`` or ``args.group``, await replies.

    Prints one line per reply (``summary(device, reply)``), or the reply JSON with
    ``--json``. Exit status: 0 every reply ok, 1 an error reply, 3 no reply in time.
    """
    cmd_id = args.id or f"{name.replace('/', '-')}-{secrets.token_hex(4)}"
    client_id = f"edge-agent-op-{secrets.token_hex(4)}"
    r = route(args.prefix, args.device, args.group, client_id, name)
    session = Session(args, client_id)
    session.connect(args.broker, [r.reply_filter, r.response_topic])

    def show(device: str | None, reply: dict[str, Any]) -> None:
        who = device or args.device
        if args.json:
            print(json.dumps({"device": who, "reply": reply}), flush=True)
        else:
            print(summary(who, reply), flush=True)

    try:
        props = session.response_props(r.response_topic, cmd_id.encode())
        info = session.publish(r.command, json.dumps({"id": cmd_id, **body}).encode(), props)
        wait_acked([info], time.monotonic() + CONNECT_TIMEOUT_S)
        replies = collect(session, r, cmd_id, args.timeout, args.expect, on_group_reply=show)
    finally:
        session.close()
    if not replies:
        print(f"no reply to {name} {cmd_id} within {args.timeout:g} s", file=sys.stderr)
        return EXIT_NO_REPLY
    if args.group is None:
        show(None, replies[0][1])
    return 0 if all(reply.get("ok") is True for _, reply in replies) else EXIT_ERROR_REPLY


def error_text(reply: dict[str, Any]) -> str:
    """'code: message' of an error reply."""
    error = reply.get("error") or {}
    return f"{error.get('code', 'error')}: {error.get('message', '')}".rstrip(": ")
