"""Remote commands: parse, de-duplicate, dispatch off the network thread, reply.

A command is a JSON object with an ``id`` on ``<p>/<d>/cmd/<name>`` (or a fleet topic).
Every command that is not retained gets exactly one reply per id; a repeated id is
answered again from the reply cache, never executed twice. Malformed, oversize and
unknown commands get an error reply; nothing here may raise into the MQTT thread.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from agent.errors import CommandError
from agent.log import get_logger
from agent.osthread import name_os_thread

if TYPE_CHECKING:
    from agent.service.guard import CommandGuard

log = get_logger("control")

MAX_COMMAND_BYTES = 65536
MAX_ID_LEN = 128
MAX_DEPTH = 32
REPLY_CACHE = 512


@dataclass(frozen=True, slots=True)
class Reply:
    """What goes back on ``<p>/<d>/reply/<name>``."""

    name: str
    id: str | None
    ok: bool
    result: dict[str, Any] | None
    error: dict[str, str] | None
    response_topic: str | None
    correlation_data: bytes | None
    ts: float = field(default_factory=time.time)


class Request:
    """One accepted command. Handlers return a result dict, or None and call ``reply`` later."""

    def __init__(
        self,
        router: CommandRouter,
        name: str,
        cmd_id: str,
        body: dict[str, Any],
        response_topic: str | None,
        correlation_data: bytes | None,
    ) -> None:
        self.name = name
        self.id = cmd_id
        self.body = body
        self._router = router
        self._response_topic = response_topic
        self._correlation = correlation_data
        self._done = threading.Event()

    def reply(
        self,
        ok: bool,
        result: dict[str, Any] | None = None,
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        """Send the reply (once; later calls are ignored)."""
        if self._done.is_set():
            return
        self._done.set()
        error = None if ok else {"code": code or "error", "message": message or ""}
        self._router.finish(
            Reply(
                self.name,
                self.id,
                ok,
                result if ok else None,
                error,
                self._response_topic,
                self._correlation,
            )
        )


Handler = Callable[[Request], "dict[str, Any] | None"]


class _RefusedError(Exception):
    """A command refused before it runs: its id (if known), reply code and message."""

    def __init__(self, cmd_id: str | None, code: str, message: str) -> None:
        super().__init__(message)
        self.cmd_id, self.code, self.message = cmd_id, code, message


def _parse(payload: bytes) -> tuple[str, dict[str, Any]]:
    """The id and body of a command payload; _RefusedError with the reason if it is not one."""
    if len(payload) > MAX_COMMAND_BYTES:
        raise _RefusedError(
            None, "too_large", f"command payload {len(payload)} B > {MAX_COMMAND_BYTES} B"
        )
    try:
        body = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _RefusedError(None, "bad_json", f"payload is not UTF-8 JSON: {str(e)[:120]}") from e
    if not isinstance(body, dict):
        raise _RefusedError(None, "bad_request", "payload must be a JSON object with an 'id'")
    cmd_id = body.get("id")
    if not isinstance(cmd_id, str) or not 0 < len(cmd_id) <= MAX_ID_LEN:
        raise _RefusedError(
            None, "bad_request", f"'id' must be a string of 1..{MAX_ID_LEN} characters"
        )
    if not _encodable(json.dumps(body, ensure_ascii=False)):
        # JSON's \ud800 escapes decode to lone surrogates, which no reply can carry as
        # UTF-8: refused before it runs, the id escaped so the sender can match it.
        escaped = cmd_id.encode("utf-8", "backslashreplace").decode("utf-8")
        raise _RefusedError(
            escaped, "bad_request", "the payload holds a lone surrogate (not UTF-8)"
        )
    if _depth(body, MAX_DEPTH) > MAX_DEPTH:
        raise _RefusedError(cmd_id, "bad_request", f"payload nested deeper than {MAX_DEPTH} levels")
    return cmd_id, body


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value, stopping early past ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    deepest = 0
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


class CommandRouter:
    """Validates incoming commands and runs their handlers on one worker thread."""

    def __init__(
        self,
        send_reply: Callable[[Reply], None],
        stop: threading.Event,
        guard: CommandGuard | None = None,
    ) -> None:
        self._send = send_reply
        self._stop = stop
        self.guard = guard
        self._handlers: dict[str, Handler] = {}
        self._queue: queue.Queue[Request] = queue.Queue(maxsize=64)
        self._cache: OrderedDict[tuple[str, str], Reply] = OrderedDict()
        self._inflight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="commands", daemon=True)
        self.received = 0
        self.rejected = 0

    def register(self, name: str, handler: Handler) -> None:
        self._handlers[name] = handler

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.ident is not None:  # an agent whose start failed never started it
            self._thread.join(timeout)

    # -- called on the MQTT network thread: must be quick and must not raise ---------------
    def submit(
        self,
        name: str,
        payload: bytes,
        *,
        retained: bool = False,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
        topic: str = "",
    ) -> None:
        """``topic``: where it came from, which a signed command must have been signed for."""
        try:
            self._submit(name, payload, retained, response_topic, correlation_data, topic)
        except Exception as e:  # last line of defence: a command never kills the agent
            log.exception("command_submit_failed", command=name, error=str(e))

    def _submit(
        self,
        name: str,
        payload: bytes,
        retained: bool,
        response_topic: str | None,
        correlation: bytes | None,
        topic: str,
    ) -> None:
        self.received += 1
        if retained:
            # A retained command would re-run on every reconnect: never act on one.
            log.warning("command_retained_ignored", command=name)
            return
        if response_topic is not None and not self._response_allowed(response_topic):
            # A reply must never land where something acts on it (a command topic): the
            # command does not run, and its refusal goes to the reply topic only.
            try:
                cmd_id: str | None = _parse(payload)[0]
            except _RefusedError as e:
                cmd_id = e.cmd_id
            self._refuse(
                name,
                _RefusedError(
                    cmd_id,
                    "bad_response_topic",
                    "the MQTT 5 ResponseTopic must be under this device's reply/ topics or "
                    "commands.response_topic_prefixes, never a command topic",
                ),
                None,
                None,
            )
            return
        try:
            self._accept(name, payload, topic, response_topic, correlation)
        except _RefusedError as e:
            self._refuse(name, e, response_topic, correlation)

    def _refuse(
        self, name: str, e: _RefusedError, response_topic: str | None, correlation: bytes | None
    ) -> None:
        self.rejected += 1
        log.warning("command_rejected", command=name, id=e.cmd_id, code=e.code, reason=e.message)
        error = {"code": e.code, "message": e.message}
        self._send(Reply(name, e.cmd_id, False, None, error, response_topic, correlation))

    def _accept(
        self,
        name: str,
        payload: bytes,
        topic: str,
        response_topic: str | None,
        correlation: bytes | None,
    ) -> None:
        cmd_id, body = _parse(payload)
        key = (name, cmd_id)
        opened = None
        if self.guard is not None:
            try:
                opened = self.guard.open(topic, body)
            except CommandError as e:
                raise _RefusedError(cmd_id, e.code, str(e)) from e
            if opened is not None:
                body = opened.body
        with self._lock:
            cached = self._cache.get(key)
            busy = key in self._inflight
        if opened is not None and self.guard is not None and not self.guard.record(opened):
            if busy:  # the broker delivered it twice while it runs: one reply is coming
                log.info("command_repeated_in_flight", command=name, id=cmd_id)
                return
            raise _RefusedError(
                cmd_id,
                "replayed_command",
                "this signed command was received before; it is not run again "
                "(an operator re-sends with a fresh signature)",
            )
        if cached is not None:
            log.info("command_repeated", command=name, id=cmd_id)
            # The same reply, not a new one.
            self._send(replace(cached, response_topic=response_topic, correlation_data=correlation))
            return
        if busy:
            log.info("command_repeated_in_flight", command=name, id=cmd_id)
            return
        if name not in self._handlers:
            known = ", ".join(sorted(self._handlers))
            raise _RefusedError(
                cmd_id, "unknown_command", f"unknown command {name!r} (known: {known})"
            )
        request = Request(self, name, cmd_id, body, response_topic, correlation)
        with self._lock:
            self._inflight.add(key)
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            with self._lock:
                self._inflight.discard(key)
            raise _RefusedError(cmd_id, "busy", "too many commands queued; retry later") from None

    def _response_allowed(self, topic: str) -> bool:
        if self.guard is not None:
            return self.guard.response_allowed(topic)
        return bool(topic) and "/cmd/" not in f"/{topic}/"

    @property
    def refused(self) -> dict[str, int]:
        """Refusals by the guard, per reply code (unsigned, bad signature, stale, replay)."""
        return dict(self.guard.refused) if self.guard is not None else {}

    # -- worker thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        name_os_thread("commands")
        while not self._stop.is_set():
            try:
                request = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            t0 = time.monotonic()
            try:
                result = self._handlers[request.name](request)
            except CommandError as e:
                request.reply(False, code=e.code, message=str(e))
                continue
            except Exception as e:
                log.exception("command_failed", command=request.name, id=request.id)
                request.reply(False, code="internal_error", message=f"{type(e).__name__}: {e}")
                continue
            if result is not None:
                request.reply(True, result)
            log.info(
                "command_handled",
                command=request.name,
                id=request.id,
                ms=round((time.monotonic() - t0) * 1e3, 1),
            )

    def finish(self, reply: Reply) -> None:
        """Record and send a reply (called by Request.reply, from any thread)."""
        if reply.id is not None:
            key = (reply.name, reply.id)
            with self._lock:
                self._inflight.discard(key)
                self._cache[key] = reply
                while len(self._cache) > REPLY_CACHE:
                    self._cache.popitem(last=False)
        try:
            self._send(reply)
        except Exception as e:
            log.exception("reply_failed", command=reply.name, id=reply.id, error=str(e))
