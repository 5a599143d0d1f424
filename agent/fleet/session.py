"""The operator's MQTT session: connect, read the retained fleet, send commands, await replies.

Shared by the operator commands (agent/commands) and the rollout runner. A command goes
out at QoS 1 with an MQTT 5 ResponseTopic + CorrelationData, and replies are read from
both that private topic and the devices' ``reply/<name>`` topics. Every command payload
leaves through ``Session.command``: the one place a command body is encoded and published.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.errors import BrokerError, ConfigError
from agent.fleet.broker import BrokerTarget
from agent.fleet.status import parse_topic, require_known
from agent.mqtt.topics import Topics
from agent.update.command_auth import sign_command

CONNECT_TIMEOUT_S = 10.0
QUIET_S = 0.5  # retained messages stop arriving: the snapshot is complete
SNAPSHOT_MAX_S = 5.0


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


def status_filter(prefix: str, kind: str = "status") -> str:
    """Every device's retained ``kind`` topic (status, health, model)."""
    return f"{prefix}/+/{kind}"


class Session:
    """One paho MQTT 5 client: connect, subscribe, publish with acks, collect replies."""

    def __init__(
        self, target: BrokerTarget, client_id: str, signer: Ed25519PrivateKey | None = None
    ) -> None:
        """``signer``: every command is signed with it (docs/mqtt.md, "Signed commands")."""
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        try:
            Topics(target.prefix, "x")
        except ValueError as e:
            raise ConfigError(f"--prefix / mqtt.topic_prefix: {e}") from e
        self._mqtt = mqtt
        self.target = target
        self.signer = signer
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        target.apply(self.client)
        self.connected = threading.Event()
        self.connect_error: BrokerError | None = None
        self.subscribed = threading.Event()
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if rc.is_failure:
            self.connect_error = self.target.refused(rc)
        self.connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if not self.connected.is_set():  # lost before any CONNACK
            self.connect_error = self.target.closed_early()
            self.connected.set()

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        self.subscribed.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        self.messages.put((msg.topic, bytes(msg.payload)))

    def connect(self, filters: list[str]) -> None:
        t = self.target
        try:
            self.client.connect(t.host, t.port, keepalive=30)
        except OSError as e:
            raise t.connect_error(e) from e
        self.client.loop_start()
        if not self.connected.wait(CONNECT_TIMEOUT_S):
            self.close()
            raise BrokerError(f"broker {t.where} did not answer within {CONNECT_TIMEOUT_S:g} s")
        if self.connect_error is not None:
            self.close()
            raise self.connect_error
        self.client.subscribe([(f, 1) for f in filters])
        if not self.subscribed.wait(CONNECT_TIMEOUT_S):
            self.close()
            raise BrokerError(f"broker {t.where} did not acknowledge the subscriptions")

    def publish(self, topic: str, payload: bytes, props: Any = None) -> Any:
        info = self.client.publish(topic, payload, qos=1, properties=props)
        if info.rc not in (self._mqtt.MQTT_ERR_SUCCESS, self._mqtt.MQTT_ERR_NO_CONN):
            raise BrokerError(f"publish to {topic} failed: {self._mqtt.error_string(info.rc)}")
        return info

    def command(
        self, topic: str, body: dict[str, Any], response_topic: str, correlation: bytes
    ) -> Any:
        """Publish one operator command (``body`` holds its ``id``) asking for its reply on
        ``response_topic``; returns paho's message info (see ``wait_acked``)."""
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]  # paho leaves it unannotated
        props.ResponseTopic = response_topic
        props.CorrelationData = correlation
        if self.signer is not None:
            # Signed for this topic with a fresh nonce at each call: a re-send is a new
            # signature for the same id, which the device answers from its reply cache.
            body = sign_command(self.signer, topic, body)
        return self.publish(topic, json.dumps(body).encode(), props)

    def snapshot(self) -> dict[tuple[str, str], bytes]:
        """The retained status/health/model payloads that arrived after subscribing, read
        until the broker has been quiet for QUIET_S (at most SNAPSHOT_MAX_S)."""
        retained: dict[tuple[str, str], bytes] = {}
        deadline = time.monotonic() + SNAPSHOT_MAX_S
        while time.monotonic() < deadline:
            try:
                topic, payload = self.messages.get(timeout=QUIET_S)
            except queue.Empty:
                break
            key = parse_topic(self.target.prefix, topic)
            if key is not None and payload:
                retained[key] = payload
        return retained

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


def open_session(
    target: BrokerTarget,
    client_id: str,
    filters: list[str],
    *,
    device: str | None = None,
    group: str | None = None,
    signer: Ed25519PrivateKey | None = None,
) -> Session:
    """A session subscribed to ``filters``, once the retained statuses show that ``device``
    (or ``group``) exists: a command to an unknown one fails at once, not at its timeout."""
    session = Session(target, client_id, signer)
    session.connect([status_filter(target.prefix), *filters])
    try:
        devices = [device] if device is not None else []
        require_known(session.snapshot(), target.prefix, target.where, devices=devices, group=group)
    except BaseException:
        session.close()
        raise
    return session


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
