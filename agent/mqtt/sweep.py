"""Reading what the broker keeps retained under a device's topics, on a connection apart.

The agent owns its retained topics (docs/mqtt.md, "Retained state is owned"): at start it
reads what the broker holds for it, and clears what its configuration no longer produces
(a zone removed from the YAML, a label of an earlier model, a camera gone). The read uses
its own short-lived connection: subscribing the link itself to ``<p>/<d>/#`` would overlap
its command subscription, and a broker may then deliver a command twice.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from agent.errors import BrokerError
from agent.mqtt.client import apply_credentials
from agent.settings import MqttSettings


def read_retained(
    settings: MqttSettings,
    filters: list[str],
    *,
    client_id: str,
    quiet_s: float = 0.5,
    timeout_s: float = 10.0,
) -> dict[str, bytes]:
    """Every retained message under ``filters``: topic -> payload.

    Retained messages come right after the SUBACK; the read ends ``quiet_s`` after the last
    one (or at ``timeout_s``). BrokerError when the broker cannot be reached or refuses.
    """
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=mqtt.MQTTv5 if settings.protocol == 5 else mqtt.MQTTv311,
    )
    apply_credentials(client, settings)
    found: dict[str, bytes] = {}
    lock = threading.Lock()
    subscribed = threading.Event()
    refused: list[str] = []
    last = [time.monotonic()]

    def on_connect(c: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            refused.append(str(reason))
            subscribed.set()
            return
        c.subscribe([(f, 1) for f in filters])

    def on_subscribe(c: Any, userdata: Any, mid: int, reasons: Any, props: Any) -> None:
        last[0] = time.monotonic()
        subscribed.set()

    def on_message(c: Any, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        if not msg.retain:
            return  # published live since: not what the broker kept
        with lock:
            found[msg.topic] = bytes(msg.payload)
            last[0] = time.monotonic()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    deadline = time.monotonic() + timeout_s
    try:
        client.connect(settings.host, settings.port, keepalive=max(5, int(timeout_s)))
    except OSError as e:
        raise BrokerError(f"cannot reach {settings.host}:{settings.port}: {e}") from e
    client.loop_start()
    try:
        if not subscribed.wait(max(0.0, deadline - time.monotonic())):
            raise BrokerError(
                f"{settings.host}:{settings.port} did not answer the retained-state read "
                f"within {timeout_s:g} s"
            )
        if refused:
            raise BrokerError(f"broker refused the retained-state read: {refused[0]}")
        while time.monotonic() < deadline:
            with lock:
                if time.monotonic() - last[0] >= quiet_s:
                    break
            time.sleep(0.05)
    finally:
        client.disconnect()
        client.loop_stop()
    with lock:
        return dict(found)
