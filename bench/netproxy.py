"""A loopback TCP forwarder for the benches' network cuts (bench/fleet.py, bench/faultsoak.py)."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """A loopback TCP forwarder (an agent or a leaf bridge -> a broker) that can drop every
    connection and refuse new ones (accepted and closed at once) while cut."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.cut_now = False
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy").start()

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.sock.accept()
            except OSError:
                return
            if self.cut_now:
                a.close()
                continue
            try:
                b = socket.create_connection(self.target, timeout=2)
                b.settimeout(None)
            except OSError:
                a.close()
                continue
            with self.lock:
                self.conns += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        with self.lock:
            self.conns = [c for c in self.conns if c not in (src, dst)]

    def cut(self) -> None:
        self.cut_now = True
        with self.lock:
            for s in self.conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self.conns.clear()

    def restore(self) -> None:
        self.cut_now = False

    def close(self) -> None:
        self.cut()
        self.sock.close()
