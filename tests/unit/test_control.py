"""Command router: validation, de-duplication, error replies, fuzzed payloads."""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.errors import CommandError
from agent.service.control import MAX_COMMAND_BYTES, CommandRouter, Reply, Request


class Collector:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.event = threading.Event()

    def __call__(self, reply: Reply) -> None:
        self.replies.append(reply)
        self.event.set()

    def wait(self, n: int, timeout: float = 5.0) -> list[Reply]:
        deadline = time.monotonic() + timeout
        while len(self.replies) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.replies


@pytest.fixture
def router():
    stop = threading.Event()
    sink = Collector()
    r = CommandRouter(sink, stop)
    calls: list[str] = []

    def pause(req: Request):
        calls.append(req.id)
        return {"paused": True}

    def boom(req: Request):
        raise CommandError("bad_patch", "threshold out of range")

    def later(req: Request):
        threading.Timer(0.05, lambda: req.reply(True, {"late": True})).start()

    r.register("pause", pause)
    r.register("config/set", boom)
    r.register("model/deploy", later)
    r.start()
    yield r, sink, calls
    stop.set()
    r.join(2)


@pytest.mark.timeout(10)
def test_ok_reply_carries_id_and_response_topic(router):
    """A valid command runs once and its reply carries the id and MQTT 5 response data."""
    r, sink, calls = router
    r.submit("pause", b'{"id":"a1"}', response_topic="me/inbox", correlation_data=b"c1")
    (reply,) = sink.wait(1)
    assert (reply.id, reply.ok, reply.result) == ("a1", True, {"paused": True})
    assert (reply.response_topic, reply.correlation_data) == ("me/inbox", b"c1")
    assert calls == ["a1"]


@pytest.mark.timeout(10)
def test_repeated_id_is_answered_not_rerun(router):
    """The same id again gets the same reply and the handler does not run twice."""
    r, sink, calls = router
    r.submit("pause", b'{"id":"dup"}')
    sink.wait(1)
    r.submit("pause", b'{"id":"dup"}')
    replies = sink.wait(2)
    assert len(replies) == 2
    assert replies[0].result == replies[1].result
    assert calls == ["dup"]


@pytest.mark.timeout(10)
def test_retained_command_is_ignored(router):
    """A retained command is never executed nor answered."""
    r, sink, calls = router
    r.submit("pause", b'{"id":"r1"}', retained=True)
    time.sleep(0.3)
    assert sink.replies == []
    assert calls == []


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("name", "payload", "code"),
    [
        ("pause", b"\xff\xfe", "bad_json"),
        ("pause", b"{not json", "bad_json"),
        ("pause", b"[1,2]", "bad_request"),
        ("pause", b'{"no_id":1}', "bad_request"),
        ("pause", b'{"id":5}', "bad_request"),
        ("pause", json.dumps({"id": "x" * 500}).encode(), "bad_request"),
        ("pause", b"{" + b'"a":{' * 40 + b"}" * 40 + b',"id":"deep"}', "bad_request"),
        ("pause", b" " * (MAX_COMMAND_BYTES + 1), "too_large"),
        ("self-destruct", b'{"id":"u1"}', "unknown_command"),
        ("config/set", b'{"id":"c1"}', "bad_patch"),
    ],
)
def test_bad_commands_get_error_replies(router, name, payload, code):
    """Malformed, oversize, unknown and failing commands each get one error reply."""
    r, sink, _ = router
    r.submit(name, payload)
    (reply,) = sink.wait(1)
    assert reply.ok is False
    assert reply.error is not None
    assert reply.error["code"] == code
    assert reply.error["message"]


@pytest.mark.timeout(10)
def test_deferred_reply(router):
    """A handler may reply later from another thread; the reply is cached for repeats."""
    r, sink, _ = router
    r.submit("model/deploy", b'{"id":"d1"}')
    (reply,) = sink.wait(1)
    assert reply.result == {"late": True}
    r.submit("model/deploy", b'{"id":"d1"}')
    assert sink.wait(2)[1].result == {"late": True}


@pytest.mark.timeout(120)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payload=st.one_of(
        st.binary(max_size=2048),
        st.text(max_size=2048).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
            lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner),
            max_leaves=50,
        ).map(lambda v: json.dumps(v).encode()),
    ),
    name=st.sampled_from(["pause", "config/set", "nope", "model/deploy"]),
)
def test_fuzzed_payloads_never_raise_and_always_answered(payload, name):
    """Any bytes on a command topic produce at most one reply and never an exception."""
    sink = Collector()
    stop = threading.Event()
    r = CommandRouter(sink, stop)
    r.register("pause", lambda req: {"ok": 1})
    r.register("config/set", lambda req: {"ok": 1})
    r.submit(name, payload)
    # Synchronous failures reply at once; valid ones are queued (worker not started here).
    assert len(sink.replies) <= 1
    stop.set()


def test_join_before_start_returns():
    """An agent whose start failed shuts down without a second error hiding the first."""
    r = CommandRouter(Collector(), threading.Event())
    r.join(0.1)
    assert r.received == 0
