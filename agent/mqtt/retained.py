"""Retained state topics: the last value of each, republished on every connect.

A broker that lost its retained store (restart without persistence, a new cluster node)
heals at the next connect. While the link is down a new value is only remembered: paho
would queue a QoS 1 publish and resend it after the reconnect, i.e. after the fresh
republish, leaving the broker with the older value. A publish handed to paho just before
a drop has the same problem; ``on_ack`` notices it and sends the current value again.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

Publish = Callable[[str, bytes, int, bool, "Properties | None"], mqtt.MQTTMessageInfo]


def publish_properties() -> Properties:
    return Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]  # paho leaves it unannotated


@dataclass(frozen=True, slots=True)
class _Value:
    payload: bytes
    qos: int
    expiry_s: float | None
    t_set: float


class RetainedStates:
    """Thread-safe map of retained topic -> last value, with paho publishes."""

    def __init__(
        self,
        publish: Publish,
        *,
        mqtt5: bool,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self._v5 = mqtt5
        self._mono = monotonic
        self._lock = threading.Lock()
        self._values: dict[str, _Value] = {}
        self._pending: dict[int, tuple[str, bytes, int]] = {}  # mid -> topic, payload, epoch
        self._epoch = 0
        self._connected = False

    def set(self, topic: str, payload: bytes, qos: int, expiry_s: float | None) -> None:
        """Remember ``payload`` for ``topic``; publish it now if connected."""
        with self._lock:
            self._values[topic] = _Value(payload, qos, expiry_s, self._mono())
            if self._connected:
                self._send(topic)

    def clear(self, topic: str) -> None:
        """Forget ``topic`` and delete its retained message on the broker."""
        with self._lock:
            self._values.pop(topic, None)
            if self._connected:
                self._publish(topic, b"", 1, True, None)

    def clear_unowned(self, topic: str) -> bool:
        """Delete ``topic`` on the broker unless a value is remembered for it (checked and
        cleared under one lock: a count first published meanwhile is not lost)."""
        with self._lock:
            if topic in self._values or not self._connected:
                return False
            self._publish(topic, b"", 1, True, None)
            return True

    def connected(self) -> None:
        """On every connect: republish every remembered value."""
        with self._lock:
            self._epoch += 1
            self._connected = True
            for topic in list(self._values):
                self._send(topic)

    def disconnected(self) -> None:
        with self._lock:
            self._connected = False

    def _send(self, topic: str) -> None:
        """Publish the remembered value of ``topic`` (lock held)."""
        value = self._values[topic]
        props = None
        if value.expiry_s is not None:
            left = value.expiry_s - (self._mono() - value.t_set)
            if left <= 0:
                del self._values[topic]
                return
            if self._v5:
                props = publish_properties()
                props.MessageExpiryInterval = math.ceil(left)
        info = self._publish(topic, value.payload, value.qos, True, props)
        if value.qos > 0:
            self._pending[info.mid] = (topic, value.payload, self._epoch)

    def on_ack(self, mid: int) -> None:
        """A PUBACK that is not a spooled row's: maybe one of ours from an older link."""
        with self._lock:
            sent = self._pending.pop(mid, None)
            if sent is None:
                return
            topic, payload, epoch = sent
            current = self._values.get(topic)
            if (
                epoch != self._epoch
                and self._connected
                and current is not None
                and current.payload != payload
            ):
                self._send(topic)
