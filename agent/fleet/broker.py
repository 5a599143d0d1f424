"""Where an operator command connects: the broker, account and TLS files, and why it failed.

The values come from the config's ``mqtt`` section (with its ``EDGE_AGENT__MQTT__*``
environment), and explicit options override them one by one. Every error names the
option or config key that gave the bad value and says what to change.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import BrokerError, ConfigError
from agent.settings import MqttSettings

#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and _IP_ADDRESS_MISMATCH: made for another host.
_HOST_MISMATCH = {62, 64}
#: MQTT CONNACK reason codes (v5; v3.1.1's 4 and 5 map onto them) of a refused account.
_BAD_LOGIN = {134, 135, 4, 5}


def parse_broker(value: str) -> tuple[str, int]:
    """``host[:port]`` (``[v6]:port`` too) -> ``(host, port)``; 1883 when no port."""
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and "]" not in port:
        return host.strip("[]"), int(port)
    return value.strip("[]"), 1883


@dataclass(frozen=True, slots=True)
class TlsFile:
    """One of the TLS files and where it was named (``--ca`` or ``mqtt.tls.ca``)."""

    path: Path
    named_by: str


@dataclass(frozen=True, slots=True)
class BrokerTarget:
    """Broker, topic prefix, account and TLS of one operator session."""

    host: str
    port: int
    prefix: str
    username: str | None = None
    password: str | None = None
    ca: TlsFile | None = None
    cert: TlsFile | None = None
    key: TlsFile | None = None
    insecure: bool = False

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def tls(self) -> bool:
        return self.ca is not None or self.cert is not None

    @classmethod
    def from_settings(
        cls,
        mqtt: MqttSettings,
        *,
        broker: str | None = None,
        prefix: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ca: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
    ) -> BrokerTarget:
        """The config's broker with every explicit value (an option) put over it."""
        host, port = parse_broker(broker) if broker else (mqtt.host, mqtt.port)
        if (cert is None) != (key is None):
            raise ConfigError("--tls-cert and --tls-key go together: pass both or neither")
        tls = mqtt.tls

        def pick(flag: Path | None, option: str, conf: Path | None, k: str) -> TlsFile | None:
            if flag is not None:
                return TlsFile(flag, option)
            return TlsFile(conf, f"mqtt.tls.{k}") if conf is not None else None

        secret = mqtt.password.get_secret_value() if mqtt.password is not None else None
        return cls(
            host=host,
            port=port,
            prefix=prefix or mqtt.topic_prefix,
            username=username if username is not None else mqtt.username,
            password=password if password is not None else secret,
            ca=pick(ca, "--ca", tls.ca, "ca"),
            cert=pick(cert, "--tls-cert", tls.cert, "cert"),
            key=pick(key, "--tls-key", tls.key, "key"),
            insecure=tls.insecure,
        )

    def apply(self, client: Any) -> None:
        """Account and TLS onto a paho client; a missing or bad TLS file is named."""
        if self.username is not None:
            client.username_pw_set(self.username, self.password)
        if not self.tls:
            return
        files = [f for f in (self.ca, self.cert, self.key) if f is not None]
        for f in files:
            try:
                with f.path.open("rb"):
                    pass
            except OSError as e:
                raise ConfigError(
                    f"{f.named_by} {f.path}: cannot read it ({e.strerror or e})"
                ) from e
        try:
            client.tls_set(
                ca_certs=str(self.ca.path) if self.ca else None,
                certfile=str(self.cert.path) if self.cert else None,
                keyfile=str(self.key.path) if self.key else None,
            )
        except (ssl.SSLError, ValueError) as e:
            names = ", ".join(f"{f.named_by} {f.path}" for f in files)
            raise ConfigError(f"cannot load the TLS files ({names}): {e}") from e
        client.tls_insecure_set(self.insecure)

    def connect_error(self, e: OSError) -> BrokerError:
        """Why ``connect()`` raised, in one line naming the broker and what to check."""
        return BrokerError(f"cannot connect to broker {self.where}: {self._why(e)}")

    def _why(self, e: OSError) -> str:
        ca = f"{self.ca.named_by} {self.ca.path}" if self.ca else "the system CAs"
        if isinstance(e, ssl.SSLCertVerificationError):
            if e.verify_code in _HOST_MISMATCH:
                return (
                    f"TLS: the broker's certificate is not for host '{self.host}' "
                    f"({e.verify_message}); connect by the name the certificate carries"
                )
            return f"TLS: the broker's certificate is not trusted by {ca} ({e.verify_message})"
        if isinstance(e, ssl.SSLError):
            return f"TLS handshake failed: {e.reason or e} (check {ca} and the client certificate)"
        if isinstance(e, ConnectionResetError) and self.tls:
            return (
                "reset during the TLS handshake (a plain MQTT port? use the broker's TLS "
                "port, usually 8883, or drop --ca / mqtt.tls.ca)"
            )
        if isinstance(e, ConnectionRefusedError):
            return "connection refused (no broker listens on that port)"
        if isinstance(e, socket.gaierror):
            return f"unknown host ({e.strerror})"
        if isinstance(e, TimeoutError):
            return "timed out (a firewall, or the wrong host)"
        return str(e.strerror or e)

    def refused(self, rc: Any) -> BrokerError:
        """The broker's CONNACK refused us: say whether it was the account."""
        if getattr(rc, "value", rc) in _BAD_LOGIN:
            who = f"user '{self.username}'" if self.username else "an anonymous client"
            return BrokerError(
                f"broker {self.where} refused {who}: not authorised ({rc}); check --username "
                "and the password (--password-file, mqtt.password or EDGE_AGENT__MQTT__PASSWORD)"
            )
        return BrokerError(f"broker {self.where} refused the connection: {rc}")

    def closed_early(self) -> BrokerError:
        """The link closed before the CONNACK (a TLS port spoken to in plain, or the
        reverse; a broker that wants a client certificate we did not give)."""
        hint = (
            "a broker that requires a client certificate does this: --tls-cert/--tls-key "
            "or mqtt.tls.cert/key"
            if self.tls
            else "does it expect TLS? pass --ca or set mqtt.tls.ca"
        )
        return BrokerError(
            f"broker {self.where} closed the connection before accepting it ({hint})"
        )
