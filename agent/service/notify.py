"""systemd notification protocol (sd_notify) over $NOTIFY_SOCKET, no extra dependency."""

from __future__ import annotations

import os
import socket

from agent.log import get_logger

log = get_logger("notify")


class Notifier:
    """Sends READY=1, WATCHDOG=1, STATUS=..., STOPPING=1 to systemd when run under it.

    Outside systemd (no NOTIFY_SOCKET) every call is a cheap no-op.
    """

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        addr = env.get("NOTIFY_SOCKET", "")
        self._addr: str | None = None
        if addr:
            # A leading '@' is the Linux abstract namespace.
            self._addr = "\0" + addr[1:] if addr.startswith("@") else addr
        self._sock: socket.socket | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        wd_for_us = not pid or pid == str(os.getpid())
        self.watchdog_interval_s: float | None = (
            int(usec) / 1e6 / 2 if usec.isdigit() and int(usec) > 0 and wd_for_us else None
        )

    @property
    def enabled(self) -> bool:
        return self._addr is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=VALUE`` fields in one datagram; False if not under systemd or on error."""
        if self._addr is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(fields).encode(), self._addr)
        except OSError as e:
            log.warning("sd_notify_failed", error=str(e))
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text.splitlines()[0] if text else ''}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
