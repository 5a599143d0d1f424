"""Drains a message store into paho in order, with a bounded window of unacknowledged sends.

Only the sender's own thread (or ``MqttLink.close`` after that thread ended) calls
``pump``. paho reports PUBACKs on its network thread; ``on_ack`` only queues them, and
``pump`` applies them, so a PUBACK can never be seen before its send was recorded.

A row handed to paho stays in the store until its PUBACK. Rows in flight when the link
drops are not sent again by us: paho keeps every unacknowledged QoS>0 message and resends
it (DUP) after the reconnect, so sending it ourselves would only add duplicates. After a
restart of the process paho's memory is gone and the store sends every row again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import paho.mqtt.client as mqtt
from paho.mqtt.reasoncodes import ReasonCode

from agent.log import get_logger
from agent.mqtt.store import SpoolRecord, Store

log = get_logger("mqtt")

QUOTA_EXCEEDED = 0x97
_EXPIRE_EVERY_S = 1.0
_QUOTA_BACKOFF_S = 1.0

Publish = Callable[[str, bytes, int, bool], mqtt.MQTTMessageInfo]


@dataclass(frozen=True, slots=True)
class SenderStats:
    inflight: int
    published: int
    rejected_oversize: int
    rejected_by_broker: int


class SpoolSender:
    """Moves stored rows to paho while connected; deletes them on a successful PUBACK."""

    def __init__(
        self,
        store: Store,
        publish: Publish,
        window: int,
        max_payload_bytes: int,
        *,
        on_other_ack: Callable[[int, int], None] | None = None,
        resend_timeout_s: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._publish = publish
        self.window = window
        self.max_payload_bytes = max_payload_bytes
        self._on_other_ack = on_other_ack
        self._mono = monotonic
        self._lock = threading.Lock()
        self._acks: deque[tuple[int, int]] = deque()
        self._inflight: dict[int, int] = {}  # paho mid -> store row id
        self._inflight_rows: set[int] = set()
        self._last_expire = 0.0
        self._hold_until = 0.0
        self._resend_timeout = resend_timeout_s
        self._new_connection = False
        self._barrier: set[int] = set()
        self._barrier_until = 0.0
        self._logged: set[str] = set()
        self.published = 0
        # Watchdog inputs: the last pump, and the last time the sender was not stuck (a
        # PUBACK applied, nothing to send, or no link to send on).
        self.last_pump = self.last_progress = monotonic()
        self.rejected_oversize = 0
        self.rejected_by_broker = 0

    def stats(self) -> SenderStats:
        return SenderStats(
            len(self._inflight), self.published, self.rejected_oversize, self.rejected_by_broker
        )

    @property
    def idle(self) -> bool:
        """Nothing stored and nothing waiting for a PUBACK."""
        return not self._inflight and self.store.depth == 0 and not self._acks

    def on_ack(self, mid: int, reason: ReasonCode | int) -> None:
        """paho's on_publish, on its network thread: only record it."""
        self._acks.append((mid, reason.value if isinstance(reason, ReasonCode) else reason))

    def notify_connected(self) -> None:
        """paho's on_connect: the rows in flight are being resent by paho now."""
        self._new_connection = True
        self.last_progress = self._mono()

    @property
    def resend_timeout_s(self) -> float:
        return self._resend_timeout

    def _log_once(self, key: str, event: str, **kw: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(event, **kw)

    def pump(self, connected: bool) -> None:
        """Apply PUBACKs, expire old rows, and fill the window if the link is up."""
        with self._lock:
            now = self._mono()
            self.last_pump = now
            if self._apply_acks() or not connected or self.idle:
                self.last_progress = now
            if now - self._last_expire >= _EXPIRE_EVERY_S:
                self._last_expire = now
                self.store.expire()
            if connected and now >= self._hold_until and self._resent_first(now):
                self._fill()

    def _resent_first(self, now: float) -> bool:
        """After a reconnect, hold new sends until paho's resends are acknowledged.

        That keeps the drain in order. If paho never delivers them (it should), they are
        sent again from the store after ``resend_timeout_s``: a duplicate, not a loss.
        """
        if self._new_connection:
            self._new_connection = False
            self._barrier = set(self._inflight)
            self._barrier_until = now + self._resend_timeout
        if not self._barrier:
            return True
        self._barrier &= self._inflight.keys()
        if not self._barrier:
            return True
        if now < self._barrier_until:
            return False
        self._log_once("resend", "mqtt_resend_timeout", rows=len(self._barrier))
        for mid in self._barrier:
            self._inflight_rows.discard(self._inflight.pop(mid))
        self._barrier.clear()
        self.store.rewind()
        return True

    def _apply_acks(self) -> bool:
        """Apply the queued PUBACKs; True if any row was finished."""
        done: list[int] = []
        ok = 0
        while self._acks:
            mid, reason = self._acks.popleft()
            row = self._inflight.pop(mid, None)
            if row is None:
                if self._on_other_ack is not None:
                    self._on_other_ack(mid, reason)
                continue
            self._inflight_rows.discard(row)
            if reason == QUOTA_EXCEEDED:
                # The broker is busy, not refusing this message: send it again shortly.
                self._log_once("quota", "mqtt_broker_quota_exceeded")
                self._hold_until = self._mono() + _QUOTA_BACKOFF_S
                self.store.rewind()
                continue
            if reason >= 0x80:
                self.rejected_by_broker += 1
                self._log_once(
                    f"refused:{reason}", "mqtt_broker_refused_publish", reason=hex(reason)
                )
            else:
                ok += 1
            done.append(row)
        if done:
            self.store.ack(done)
            self.published += ok
        return bool(done)

    def _fill(self) -> None:
        while (room := self.window - len(self._inflight)) > 0:
            batch = self.store.take(room)
            if not batch:
                return
            for rec in batch:
                # After a rewind the rows taken first can be ones already in flight.
                if rec.id not in self._inflight_rows and not self._send(rec):
                    return

    def _send(self, rec: SpoolRecord) -> bool:
        """Hand one row to paho; False stops this fill (the link is not usable)."""
        if len(rec.payload) > self.max_payload_bytes:
            self.rejected_oversize += 1
            self._log_once(
                f"oversize:{rec.topic}",
                "mqtt_oversize_refused",
                topic=rec.topic,
                bytes=len(rec.payload),
                limit=self.max_payload_bytes,
            )
            self.store.ack([rec.id])
            return True
        try:
            info = self._publish(rec.topic, rec.payload, rec.qos, rec.retain)
        except ValueError as e:  # e.g. a wildcard in the topic: it can never be sent
            self.rejected_by_broker += 1
            self._log_once(
                f"invalid:{rec.topic}", "mqtt_publish_invalid", topic=rec.topic, error=str(e)
            )
            self.store.ack([rec.id])
            return True
        if rec.qos > 0 and info.rc in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
            # NO_CONN for QoS>0 still means "queued by paho": it is in flight now.
            self._inflight[info.mid] = rec.id
            self._inflight_rows.add(rec.id)
            return True
        if rec.qos == 0 and info.rc == mqtt.MQTT_ERR_SUCCESS:
            self.store.ack([rec.id])
            self.published += 1
            return True
        # QoS 0 while the socket is gone is dropped by paho: keep the row, retry later.
        self.store.rewind()
        return False
