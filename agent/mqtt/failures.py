"""Why a connection to the broker failed, in words that name the setting to fix.

paho calls ``on_connect_fail`` without the exception (a TLS verification failure and a
refused port look the same: "connect failed"), so ``ReasonClient`` keeps the last one.
"""

from __future__ import annotations

import socket
import ssl

import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode

#: CONNACK reason codes that mean the broker refused our credentials (MQTT 5 and 3.1.1).
_AUTH_CODES = frozenset({0x86, 0x87, 0x8C})  # paho maps 3.1.1 codes 4 and 5 to these


class ReasonClient(mqtt.Client):
    """paho's client, remembering why the last connection attempt raised."""

    last_error: OSError | None = None

    def reconnect(self) -> MQTTErrorCode:
        try:
            rc = super().reconnect()
        except OSError as e:
            _close_leaked_sockets(e)
            self.last_error = e.with_traceback(None)
            raise
        self.last_error = None
        return rc


def _close_leaked_sockets(e: BaseException) -> None:
    """paho 2.2 leaves the socket of a failed TLS handshake open (a ResourceWarning each
    retry): close the sockets its frames still hold."""
    tb = e.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, socket.socket):
                value.close()
        tb = tb.tb_next


def describe_connect_error(e: BaseException, host: str, port: int) -> str:
    """One line: what failed and which setting to look at."""
    if isinstance(e, ssl.SSLCertVerificationError):
        why = e.verify_message or str(e)
        if "mismatch" in why.lower() or "hostname" in why.lower():
            return (
                f"TLS hostname mismatch: the broker's certificate does not name {host!r} "
                f"({why}); set mqtt.host to a name the certificate carries"
            )
        return f"TLS certificate verify failed: {why}; check mqtt.tls.ca is the broker's CA"
    if isinstance(e, ssl.SSLError):
        why = e.reason or str(e)
        return f"TLS handshake failed: {why} (is {host}:{port} a TLS listener? mqtt.tls.*)"
    if isinstance(e, ConnectionRefusedError):
        return f"connection refused by {host}:{port} (is the broker running? mqtt.port)"
    if isinstance(e, TimeoutError):
        return f"no answer from {host}:{port} (firewall or wrong mqtt.host)"
    if isinstance(e, socket.gaierror):
        return f"unknown host {host!r}: {e.strerror or e} (mqtt.host)"
    return f"{type(e).__name__}: {e}"


def describe_refusal(reason: ReasonCode | int | str) -> str:
    """A refused CONNACK: credentials get a hint at mqtt.username / mqtt.password."""
    value = reason.value if isinstance(reason, ReasonCode) else reason
    if isinstance(value, int) and value in _AUTH_CODES:
        return (
            f"not authorised: the broker refused the credentials ({reason}); check "
            "mqtt.username and mqtt.password (or the client certificate and the ACL)"
        )
    return f"broker refused the connection: {reason}"
