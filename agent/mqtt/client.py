"""The agent's MQTT link over paho-mqtt 2.x: status/LWT, retained state, spooled detections.

- ``start()`` never blocks or raises on an unreachable broker: paho's network thread
  connects and reconnects with backoff; the outage is logged once, and once when it ends.
- Detections and events go ``publish_spooled`` -> size check -> store (on-disk spool) ->
  ``SpoolSender`` thread -> paho QoS 1; a row is deleted on its PUBACK.
- With ``write_behind`` (the daemon's on-disk spool) the store is written on a thread of
  its own (``spool-writer``): the inference workers that publish never wait on the disk.
  SQLite's checkpoints sync the disk on the thread whose commit crosses the WAL's bound,
  and an ext4 journal commit or an SD card's sync holds that commit (and every other
  thread's, behind the spool's lock) for 0.2-1.4 s, every camera's frames dropped
  meanwhile. A message waits in memory only while the disk is slow (a crash loses those,
  like the frames in flight; at most ``WRITE_BEHIND_MAX_BYTES``, then the publisher waits).
- Retained state (``publish_state``) is remembered and republished on every connect
  (``agent.mqtt.retained``).
"""

from __future__ import annotations

import random
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from agent import __version__
from agent.errors import ConfigError
from agent.log import get_logger
from agent.messages import MqttHealth, StatusMessage, utc_ts
from agent.mqtt.failures import ReasonClient, describe_connect_error, describe_refusal
from agent.mqtt.retained import RetainedStates, publish_properties
from agent.mqtt.sender import SpoolSender
from agent.mqtt.spool import open_store
from agent.mqtt.store import Store
from agent.mqtt.topics import Topics
from agent.osthread import name_os_thread
from agent.settings import AgentSettings, MqttSettings, tls_file_problems

log = get_logger("mqtt")

_TICK_S = 0.25
#: Write-behind: at most this much waits in memory for the disk; beyond it, the publisher
#: waits too (the disk is failing to keep up, not hiccuping).
WRITE_BEHIND_MAX_BYTES = 8 * 1024 * 1024
#: Under load the sender pumps at most this often. A pump then sends every row stored
#: since the last one and deletes every row acknowledged since, one store transaction each,
#: instead of the thread waking (and taking the GIL from the inference threads) once per
#: message and once per PUBACK. A quiet link still sends a lone message at once.
_PUMP_GAP_S = 0.02
# Receive Maximum slots kept free for state, replies and status beside the spooled window.
_STATE_SLOTS = 8
_PROTOCOL_ERRORS = frozenset({0x81, 0x82, 0x95})  # malformed, protocol error, too large


@dataclass(frozen=True, slots=True)
class Inbound:
    """A message received on a subscription."""

    topic: str
    payload: bytes
    retain: bool
    response_topic: str | None = None
    correlation_data: bytes | None = None


Handler = Callable[[Inbound], None]


@dataclass(frozen=True, slots=True)
class LinkStats:
    """Counters for the heartbeat and the log summary."""

    connected: bool
    connects: int
    spool_depth: int
    spool_bytes: int
    inflight: int
    published: int
    dropped_overflow: int
    dropped_expired: int
    rejected_oversize: int
    rejected_by_broker: int
    corrupt_resets: int
    write_errors: int
    dropped_disk_full: int = 0
    #: Why the link cannot do its job in full ("disk_full: ...", "sender_stalled: ..."), or None.
    degraded_reason: str | None = None

    @property
    def reconnects(self) -> int:
        return max(0, self.connects - 1)

    def health(self) -> MqttHealth:
        return MqttHealth(
            connected=self.connected,
            spool_depth=self.spool_depth,
            spool_bytes=self.spool_bytes,
            published=self.published,
            dropped_overflow=self.dropped_overflow,
            dropped_expired=self.dropped_expired,
            rejected_oversize=self.rejected_oversize,
            dropped_disk_full=self.dropped_disk_full,
        )


def apply_credentials(client: mqtt.Client, s: MqttSettings) -> None:
    """The account and TLS of ``mqtt`` settings on a paho client (the link's, a sweep's)."""
    if s.username is not None:
        password = s.password.get_secret_value() if s.password is not None else None
        client.username_pw_set(s.username, password)
    if s.tls.enabled:
        missing = tls_file_problems(s.tls)
        if missing:  # ssl's FileNotFoundError names neither the key nor the path
            raise ConfigError("; ".join(missing))
        try:
            client.tls_set(
                ca_certs=str(s.tls.ca) if s.tls.ca else None,
                certfile=str(s.tls.cert) if s.tls.cert else None,
                keyfile=str(s.tls.key) if s.tls.key else None,
            )
        except (OSError, ssl.SSLError, ValueError) as e:
            raise ConfigError(f"mqtt.tls: cannot load CA/cert/key: {e}") from e
        client.tls_insecure_set(s.tls.insecure)


class MqttLink:
    """One broker connection for the whole agent. Thread-safe publish methods."""

    def __init__(
        self,
        settings: MqttSettings,
        topics: Topics,
        store: Store,
        stop: threading.Event,
        *,
        boot_id: str,
        version: str = __version__,
        client_id: str | None = None,
        owns_store: bool = False,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        write_behind: bool = False,
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.store = store
        self._stop = stop
        self._boot_id = boot_id
        self._version = version
        self._owns_store = owns_store
        self._clock = clock
        self._mono = monotonic
        self._v5 = settings.protocol == 5
        self.client_id = client_id or settings.client_id or f"edge-agent-{topics.device_id}"
        self._connected = threading.Event()
        self._closing = threading.Event()
        self._wake = threading.Event()
        self._subs_lock = threading.Lock()
        self._subs: dict[str, int] = {}  # filter -> qos
        self._connects = 0
        self._rejected_oversize = 0
        self._logged: set[str] = set()
        self._down_since: float | None = None
        # Watchdog input: spooled publishes offered vs stored (monotonic times).
        self._last_offer = self._last_stored = monotonic()
        self._down_reason = ""  # a refused CONNACK's reason, until a connect succeeds
        self._logged_down = ""
        self.nodelay = False
        self.sender = SpoolSender(
            store,
            self._publish_row,
            settings.inflight_window,
            settings.max_payload_bytes,
            on_other_ack=lambda mid, _reason: self.states.on_ack(mid),
            resend_timeout_s=max(10.0, 2.0 * settings.keepalive_s),
            monotonic=monotonic,
        )
        self.stall_after_s = max(60.0, self.sender.resend_timeout_s + 10.0)
        self._client = self._make_client()
        self.states = RetainedStates(self._publish_state, mqtt5=self._v5, monotonic=monotonic)
        self._thread = threading.Thread(target=self._run_sender, name="mqtt-sender", daemon=True)
        # Write-behind (module docstring): messages not yet in the store, in order.
        self._unwritten: deque[tuple[str, bytes, int]] = deque()
        self._unwritten_bytes = 0  # of _unwritten and the batch in hand
        self._in_hand = 0  # taken from _unwritten, not yet in the store (only the writer sets it)
        self._written = threading.Condition()
        self._writing = False  # the writer takes messages (under _written)
        self._writer = (
            threading.Thread(target=self._run_writer, name="spool-writer", daemon=True)
            if write_behind
            else None
        )

    @classmethod
    def from_settings(
        cls, settings: AgentSettings, stop: threading.Event, *, boot_id: str
    ) -> MqttLink:
        """The link the daemon uses: its topics, and the spool in ``state_dir``."""
        topics = Topics(
            settings.mqtt.topic_prefix, settings.device_id, tuple(settings.fleet.groups)
        )
        store = open_store(settings.spool, settings.state_dir)
        return cls(
            settings.mqtt,
            topics,
            store,
            stop,
            boot_id=boot_id,
            owns_store=True,
            write_behind=settings.spool.enabled,
        )

    # -- setup ------------------------------------------------------------------------------
    def _make_client(self) -> mqtt.Client:
        s = self.settings
        client = ReasonClient(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=mqtt.MQTTv5 if self._v5 else mqtt.MQTTv311,
        )
        # paho's own cap (default 20) would reorder nothing but silently shrink our window.
        client.max_inflight_messages_set(s.inflight_window + _STATE_SLOTS)
        client.max_queued_messages_set(0)
        # Jitter the first delay so a fleet does not reconnect in lockstep after a restart.
        # paho annotates the delays as int but does float arithmetic with them.
        first = s.reconnect_min_s * random.uniform(1.0, 1.5)
        client.reconnect_delay_set(
            cast(int, min(first, s.reconnect_max_s)), cast(int, s.reconnect_max_s)
        )
        apply_credentials(client, s)
        self._set_will(client)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_socket_open = self._on_socket_open
        return client

    def _status(self, state: str) -> bytes:
        return StatusMessage(
            state=state,
            boot_id=self._boot_id,
            version=self._version,
            ts=utc_ts(self._clock()),
            groups=list(self.topics.groups),
        ).to_bytes()

    def _set_will(self, client: mqtt.Client) -> None:
        client.will_set(self.topics.status, self._status("offline"), qos=1, retain=True)

    def start(self) -> None:
        """Connect in the background; returns at once even if the broker is unreachable."""
        s = self.settings
        self._client.connect_async(s.host, s.port, keepalive=s.keepalive_s)
        self._client.loop_start()
        self._thread.start()
        if self._writer is not None:
            self._writing = True
            self._writer.start()

    # -- paho callbacks (network thread): quick, never raise ---------------------------------
    def _on_socket_open(self, client: mqtt.Client, userdata: Any, sock: Any) -> None:
        name_os_thread("mqtt-net")  # paho's network thread, which runs this callback
        # Without TCP_NODELAY small back-to-back publishes can stall ~40 ms (Nagle).
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.nodelay = True
        except (OSError, AttributeError) as e:
            self._log_once("nodelay", "mqtt_nodelay_failed", error=str(e))

    def _on_connect(
        self,
        client: mqtt.Client,
        userdata: Any,
        flags: Any,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        if reason.is_failure:
            self._down_reason = describe_refusal(reason)
            if f"refused:{reason}" not in self._logged:
                self._logged.add(f"refused:{reason}")
                s = self.settings
                log.error(
                    "mqtt_connect_refused", host=s.host, port=s.port, reason=self._down_reason
                )
            return
        self._logged.discard("unreachable")
        self._down_reason = ""
        receive_max = getattr(properties, "ReceiveMaximum", None) if properties else None
        window = self.settings.inflight_window
        if receive_max:
            window = max(1, min(window, receive_max - min(_STATE_SLOTS, receive_max // 2)))
        self.sender.window = window
        self.sender.notify_connected()
        if self._down_since is not None:
            log.info(
                "mqtt_reconnected",
                host=self.settings.host,
                port=self.settings.port,
                outage_s=round(self._mono() - self._down_since, 1),
                spool_depth=self.store.depth,
            )
        else:
            log.info("mqtt_connected", host=self.settings.host, port=self.settings.port)
        self._down_since = None
        self._connects += 1
        client.publish(self.topics.status, self._status("online"), qos=1, retain=True)
        self.states.connected()
        with self._subs_lock:
            self._connected.set()
            if self._subs:
                client.subscribe([(f, self._sub_options(q)) for f, q in self._subs.items()])
        self._wake.set()

    def _on_connect_fail(self, client: mqtt.Client, userdata: Any) -> None:
        error = client.last_error if isinstance(client, ReasonClient) else None
        if error is None:
            self._went_down("connect failed")
            return
        s = self.settings
        self._went_down(
            describe_connect_error(error, s.host, s.port), tls=isinstance(error, ssl.SSLError)
        )

    def _on_disconnect(
        self,
        client: mqtt.Client,
        userdata: Any,
        flags: Any,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        self._connected.clear()
        self.states.disconnected()
        if self._closing.is_set():
            return
        if reason.value in _PROTOCOL_ERRORS:
            self._log_once(
                "protocol_error",
                "mqtt_dropped_by_broker",
                reason=str(reason),
                hint="a publish larger than the broker's message_size_limit does this: "
                "set mqtt.max_payload_bytes to at most that limit",
            )
        # After a refused CONNACK paho says only "Unspecified error": keep the refusal.
        self._went_down(self._down_reason if self._down_reason else str(reason))
        self._set_will(client)  # the next CONNECT carries a fresh timestamp

    def _went_down(self, reason: str, *, tls: bool = False) -> None:
        if self._down_since is None:
            self._down_since = self._mono()
        # Logged once per outage and again when the reason changes (a fixed CA, a new cert).
        if "unreachable" not in self._logged or reason != self._logged_down:
            self._logged.add("unreachable")
            self._logged_down = reason
            # A TLS or credentials failure will not heal by itself: an error, not a warning.
            level = "error" if tls or reason == self._down_reason else "warning"
            getattr(log, level)(
                "mqtt_unreachable",
                host=self.settings.host,
                port=self.settings.port,
                reason=reason,
                note="retrying in the background; logged again when it is back",
            )

    def _on_publish(
        self,
        client: mqtt.Client,
        userdata: Any,
        mid: int,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        self.sender.on_ack(mid, reason)
        self._wake.set()

    def _log_once(self, key: str, event: str, **kw: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(event, **kw)

    # -- the sender thread ------------------------------------------------------------------
    def _publish_row(
        self, topic: str, payload: bytes, qos: int, retain: bool
    ) -> mqtt.MQTTMessageInfo:
        return self._client.publish(topic, payload, qos=qos, retain=retain)

    def _publish_state(
        self, topic: str, payload: bytes, qos: int, retain: bool, props: Properties | None
    ) -> mqtt.MQTTMessageInfo:
        return self._client.publish(topic, payload, qos=qos, retain=retain, properties=props)

    def _run_sender(self) -> None:
        name_os_thread("mqtt-sender")
        last = -_PUMP_GAP_S
        while not (self._stop.is_set() or self._closing.is_set()):
            self._wake.wait(_TICK_S)
            gap = last + _PUMP_GAP_S - time.monotonic()
            if gap > 0:  # woken again soon after a pump: gather what else comes meanwhile
                self._closing.wait(gap)
            self._wake.clear()
            last = time.monotonic()
            try:
                self.sender.pump(self._connected.is_set())
            except Exception as e:  # the sender must outlive any one bad row or db hiccup
                self._log_once(f"pump:{type(e).__name__}", "mqtt_sender_error", error=str(e))
                self._stop.wait(1.0)

    # -- publishing -------------------------------------------------------------------------
    def _oversize(self, topic: str, payload: bytes) -> bool:
        if len(payload) <= self.settings.max_payload_bytes:
            return False
        self._rejected_oversize += 1
        self._log_once(
            f"oversize:{topic}",
            "mqtt_oversize_refused",
            topic=topic,
            bytes=len(payload),
            limit=self.settings.max_payload_bytes,
        )
        return True

    def publish_spooled(self, topic: str, payload: bytes, qos: int | None = None) -> bool:
        """Store-and-forward (detections, events). False if refused (counted): oversize, or,
        without write-behind, by the store (with it, the writer's refusals are the store's
        counts and ``stall_reason``'s)."""
        if self._oversize(topic, payload):
            return False
        qos = self.settings.qos if qos is None else qos
        self._last_offer = self._mono()
        if self._writer is not None:  # (no lock to take on a link without write-behind)
            with self._written:
                while self._writing and self._unwritten_bytes > WRITE_BEHIND_MAX_BYTES:
                    self._written.wait(0.1)  # the disk has fallen this far behind: wait
                if self._writing:
                    self._unwritten.append((topic, payload, qos))
                    self._unwritten_bytes += len(payload)
                    self._written.notify_all()
                    return True
        if self.store.append(topic, payload, qos) is None:
            return False
        self._last_stored = self._last_offer
        self._wake.set()
        return True

    def _run_writer(self) -> None:
        name_os_thread("spool-writer")
        while True:
            with self._written:
                while not self._unwritten and not self._closing.is_set():
                    self._written.wait()
                batch = list(self._unwritten)
                self._in_hand = len(batch)  # before the clear: stats never miss a message
                self._unwritten.clear()
                if not batch:  # closing, and everything offered is in the store
                    self._writing = False  # from now on publish_spooled writes itself
                    self._written.notify_all()
                    return
            for topic, payload, qos in batch:
                try:
                    stored = self.store.append(topic, payload, qos) is not None
                except Exception as e:  # the writer must outlive any one bad write
                    self._log_once(f"write:{type(e).__name__}", "mqtt_spool_error", error=str(e))
                    stored = False
                if stored:
                    self._last_stored = self._mono()
                self._in_hand -= 1
            self._wake.set()
            with self._written:  # the bound counts the batch in hand too: free it now
                self._unwritten_bytes -= sum(len(payload) for _, payload, _ in batch)
                self._written.notify_all()

    def _drain_writer(self, timeout: float) -> None:
        """Stop the writer once everything offered is in the store (``timeout`` at most)."""
        if self._writer is None or not self._writer.is_alive():
            return
        with self._written:
            self._written.notify_all()  # _closing is set: it ends once nothing is left
        self._writer.join(timeout)

    def publish_state(
        self, topic: str, payload: bytes, *, qos: int = 1, expiry_s: float | None = None
    ) -> None:
        """Retained state: remembered, published now if connected, again on every connect.

        ``expiry_s`` becomes the MQTT 5 message expiry (the heartbeat uses 3 intervals).
        """
        if not self._oversize(topic, payload):
            self.states.set(topic, payload, qos, expiry_s)

    def clear_state(self, topic: str) -> None:
        """Forget a retained topic and delete it from the broker."""
        self.states.clear(topic)

    def clear_unowned(self, topic: str) -> bool:
        """Delete a retained topic the agent does not publish (True if it was deleted)."""
        if topic == self.topics.status:
            return False  # the link's own: online/offline/stopped and the Last Will
        return self.states.clear_unowned(topic)

    def publish_event(self, topic: str, payload: bytes, *, qos: int = 1) -> bool:
        """A plain, not spooled, not retained publish (paho queues it while disconnected)."""
        if self._oversize(topic, payload):
            return False
        info = self._client.publish(topic, payload, qos=qos)
        return info.rc in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN)

    def publish_reply(
        self,
        name: str,
        payload: bytes,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
    ) -> None:
        """A command reply on ``<p>/<d>/reply/<name>`` and, with MQTT 5, the ResponseTopic."""
        if self._oversize(self.topics.reply(name), payload):
            return
        self._client.publish(self.topics.reply(name), payload, qos=1)
        if not (self._v5 and response_topic):
            return
        props = publish_properties()
        if correlation_data is not None:
            props.CorrelationData = correlation_data
        try:
            self._client.publish(response_topic, payload, qos=1, properties=props)
        except ValueError as e:  # a wildcard or empty ResponseTopic from the requester
            log.warning("mqtt_bad_response_topic", topic=response_topic[:200], error=str(e))

    # -- subscriptions ----------------------------------------------------------------------
    def subscribe(self, topic_filter: str, handler: Handler, qos: int = 1) -> None:
        """Call ``handler`` (on the network thread; keep it quick) for matching messages."""

        def deliver(client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
            try:
                props = getattr(msg, "properties", None)
                handler(
                    Inbound(
                        msg.topic,
                        bytes(msg.payload),
                        bool(msg.retain),
                        getattr(props, "ResponseTopic", None),
                        getattr(props, "CorrelationData", None),
                    )
                )
            except Exception as e:  # a handler bug must not kill paho's network thread
                log.exception("mqtt_handler_failed", filter=topic_filter, error=str(e))

        self._client.message_callback_add(topic_filter, deliver)
        with self._subs_lock:
            self._subs[topic_filter] = qos
            if self._connected.is_set():
                self._client.subscribe([(topic_filter, self._sub_options(qos))])

    def _sub_options(self, qos: int) -> Any:
        """MQTT 5: Retain As Published, so a retained command is recognisable as one even
        when it arrives live (the broker otherwise clears the flag on live delivery)."""
        if not self._v5:
            return qos
        return SubscribeOptions(qos=qos, retainAsPublished=True)

    # -- observation and shutdown -----------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def network_alive(self) -> bool:
        """paho's network thread and our sender thread are running (watchdog input).

        True while the broker is down too: reconnecting is progress, not a hang.
        """
        # paho exposes no accessor for its loop thread; _thread is set by loop_start().
        net = getattr(self._client, "_thread", None)
        return isinstance(net, threading.Thread) and net.is_alive() and self._thread.is_alive()

    def stall_reason(self, after_s: float | None = None) -> str | None:
        """Why nothing has moved for ``after_s`` although it should have, or None.

        A stall: the sender stopped pumping; connected with messages waiting, but no PUBACK
        (the resend wait after a reconnect is shorter than this); or messages offered to
        the spool but none stored. A broker outage is not a stall.
        """
        after = self.stall_after_s if after_s is None else after_s
        now = self._mono()
        if now - self.sender.last_pump > after:
            return f"sender_stalled: no send attempt for {now - self.sender.last_pump:.0f} s"
        if self.connected and now - self.sender.last_progress > after:
            return (
                f"sender_stalled: connected, {self.store.depth} message(s) waiting, "
                f"no PUBACK for {now - self.sender.last_progress:.0f} s"
            )
        if self._last_offer - self._last_stored > after:
            return (
                f"spool_stalled: nothing stored for {self._last_offer - self._last_stored:.0f} s"
                f" ({self.store.degraded_reason or 'store refused every message'})"
            )
        return None

    def wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    def stats(self) -> LinkStats:
        s = self.sender.stats()
        return LinkStats(
            connected=self.connected,
            connects=self._connects,
            spool_depth=self.store.depth + len(self._unwritten) + self._in_hand,
            spool_bytes=self.store.nbytes,
            inflight=s.inflight,
            published=s.published,
            dropped_overflow=self.store.dropped_overflow,
            dropped_expired=self.store.dropped_expired,
            rejected_oversize=self._rejected_oversize + s.rejected_oversize,
            rejected_by_broker=s.rejected_by_broker,
            corrupt_resets=self.store.corrupt_resets,
            write_errors=self.store.write_errors,
            dropped_disk_full=self.store.dropped_disk_full,
            degraded_reason=self.store.degraded_reason or self.stall_reason(),
        )

    def flush(self, timeout: float) -> bool:
        """Wait until everything stored is acknowledged (True) or ``timeout`` passes."""
        deadline = self._mono() + timeout
        while self._unwritten or self._in_hand or not self.sender.idle:
            if self._mono() >= deadline:
                return False
            if not self._thread.is_alive():
                self.sender.pump(self.connected)
            time.sleep(0.02)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Flush what the broker can take, publish ``stopped``, disconnect; bounded time."""
        if self._closing.is_set():
            return
        deadline = self._mono() + timeout
        self._closing.set()
        self._drain_writer(max(0.1, (deadline - self._mono()) * 0.5))
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(max(0.1, deadline - self._mono()))
        if self.connected:
            self.flush(max(0.0, (deadline - self._mono()) * 0.6))
            info = self._client.publish(
                self.topics.status, self._status("stopped"), qos=1, retain=True
            )
            try:
                info.wait_for_publish(max(0.1, deadline - self._mono() - 0.2))
            except (RuntimeError, ValueError) as e:
                log.warning("mqtt_stopped_not_sent", error=str(e))
        self._client.disconnect()
        self._client.loop_stop()
        self.sender.pump(False)  # apply the last PUBACKs to the store
        if self._owns_store:
            self.store.close()
        log.info("mqtt_closed", spool_depth=self.store.depth)
