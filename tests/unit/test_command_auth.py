"""Signed commands, replays, ResponseTopics and unencodable ids at the command router."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.service.control import CommandRouter, Reply, Request
from agent.service.guard import CommandGuard, command_keys
from agent.settings import CommandsSettings, ModelsSettings
from agent.update.command_auth import sign_command
from agent.update.keys import parse_public_key, public_key_b64

PAUSE = "vision/cam-1/cmd/pause"
RESUME = "vision/cam-1/cmd/resume"
OTHER = "vision/cam-2/cmd/pause"


class Sink:
    def __init__(self) -> None:
        self.replies: list[Reply] = []

    def __call__(self, reply: Reply) -> None:
        self.replies.append(reply)

    def wait(self, n: int, timeout: float = 5.0) -> list[Reply]:
        deadline = time.monotonic() + timeout
        while len(self.replies) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.replies


KEY = Ed25519PrivateKey.generate()
STRANGER = Ed25519PrivateKey.generate()


def make_guard(tmp_path: Path | None, *, require: bool = True, **kw: object) -> CommandGuard:
    settings = CommandsSettings(require_signature=require, **kw)  # type: ignore[arg-type]
    models = ModelsSettings(trusted_keys=[public_key_b64(KEY.public_key())])
    return CommandGuard(
        settings,
        command_keys(settings, models),
        reply_space="vision/cam-1/reply/",
        forbidden=["vision/cam-1/cmd/#", "vision/#", "homeassistant/#"],
        state_dir=tmp_path,
    )


class Rig:
    def __init__(self, guard: CommandGuard) -> None:
        self.stop = threading.Event()
        self.sink = Sink()
        self.router = CommandRouter(self.sink, self.stop, guard)
        self.calls: list[str] = []
        for name in ("pause", "resume"):
            self.router.register(name, self._handler(name))
        self.router.start()

    def _handler(self, name: str):  # type: ignore[no-untyped-def]
        def run(req: Request) -> dict[str, str]:
            self.calls.append(f"{name}:{req.id}")
            return {"state": name}

        return run

    def send(self, topic: str, body: dict[str, object], **kw: object) -> Reply:
        n = len(self.sink.replies)
        name = topic.rsplit("/cmd/", 1)[1]
        self.router.submit(name, json.dumps(body).encode(), topic=topic, **kw)  # type: ignore[arg-type]
        return self.sink.wait(n + 1)[n]

    def close(self) -> None:
        self.stop.set()
        self.router.join(2)


@pytest.fixture
def rig(tmp_path):
    r = Rig(make_guard(tmp_path))
    yield r
    r.close()


def code(reply: Reply) -> str | None:
    return None if reply.error is None else reply.error["code"]


@pytest.mark.timeout(10)
def test_unsigned_command_is_refused_and_counted(rig):
    """With require_signature an unsigned pause gets unsigned_command and never runs."""
    reply = rig.send(PAUSE, {"id": "u1"})
    assert (reply.ok, code(reply)) == (False, "unsigned_command")
    assert "--key" in reply.error["message"]
    assert rig.calls == []
    assert rig.router.refused["unsigned_command"] == 1


@pytest.mark.timeout(10)
def test_signed_command_runs_once_and_its_replay_is_refused(rig):
    """A signed pause runs; the same bytes again are replayed_command and do not run."""
    signed = sign_command(KEY, PAUSE, {"id": "s1"})
    assert rig.send(PAUSE, signed).ok is True
    replay = rig.send(PAUSE, signed)
    assert (replay.ok, code(replay)) == (False, "replayed_command")
    assert rig.calls == ["pause:s1"]
    assert rig.router.refused["replayed_command"] == 1


@pytest.mark.timeout(10)
def test_resigned_repeat_of_an_id_is_answered_not_rerun(rig):
    """An operator's re-send (fresh signature, same id) gets the first reply again."""
    first = rig.send(PAUSE, sign_command(KEY, PAUSE, {"id": "r1"}))
    again = rig.send(PAUSE, sign_command(KEY, PAUSE, {"id": "r1"}))
    assert again.ok is True and again.ts == first.ts
    assert rig.calls == ["pause:r1"]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("signed_for", "sent_to", "why"),
    [(OTHER, PAUSE, "another device"), (RESUME, PAUSE, "another command")],
)
def test_command_signed_for_another_topic_is_refused(rig, signed_for, sent_to, why):
    """A signature binds device and command: moved to another topic it is bad_signature."""
    reply = rig.send(sent_to, sign_command(KEY, signed_for, {"id": "m1"}))
    assert (reply.ok, code(reply)) == (False, "bad_signature"), why
    assert rig.calls == []


@pytest.mark.timeout(10)
def test_untrusted_or_tampered_signature_is_refused(rig):
    """An untrusted key, changed data, or extra unsigned fields never run."""
    assert code(rig.send(PAUSE, sign_command(STRANGER, PAUSE, {"id": "k1"}))) == "bad_signature"
    signed = sign_command(KEY, PAUSE, {"id": "k2"})
    data = json.loads(base64.b64decode(signed["signed"]["data"]))
    data["topic"] = OTHER
    forged = json.dumps(data).encode()
    signed["signed"]["data"] = base64.b64encode(forged).decode()
    assert code(rig.send(PAUSE, signed)) == "bad_signature"
    extra = {**sign_command(KEY, PAUSE, {"id": "k3"}), "mask": "everything"}
    assert code(rig.send(PAUSE, extra)) == "bad_request"
    assert rig.calls == []
    assert rig.router.refused["bad_signature"] == 2


@pytest.mark.timeout(10)
@pytest.mark.parametrize("offset_s", [-301.0, 301.0])
def test_stale_command_is_refused(rig, offset_s):
    """A signature further than max_skew_s from the device's clock is stale_command."""
    reply = rig.send(PAUSE, sign_command(KEY, PAUSE, {"id": "t1"}, now=time.time() + offset_s))
    assert (reply.ok, code(reply)) == (False, "stale_command")
    assert "commands.max_skew_s" in reply.error["message"]
    assert rig.calls == []


@pytest.mark.timeout(10)
def test_replay_after_a_restart_is_refused(tmp_path):
    """Nonces are kept in state_dir: a command captured before a restart is refused after."""
    signed = sign_command(KEY, PAUSE, {"id": "p1"})
    before = Rig(make_guard(tmp_path))
    try:
        assert before.send(PAUSE, signed).ok is True
    finally:
        before.close()
    after = Rig(make_guard(tmp_path))
    try:
        assert code(after.send(PAUSE, signed)) == "replayed_command"
        assert after.calls == []
    finally:
        after.close()


@pytest.mark.timeout(10)
def test_without_require_unsigned_runs_but_bad_signatures_do_not(tmp_path):
    """require_signature off: unsigned commands run as before; a bad signature is refused."""
    r = Rig(make_guard(tmp_path, require=False))
    try:
        assert r.send(PAUSE, {"id": "a"}).ok is True
        assert code(r.send(PAUSE, sign_command(STRANGER, PAUSE, {"id": "b"}))) == "bad_signature"
        assert r.calls == ["pause:a"]
    finally:
        r.close()


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "response_topic",
    ["vision/cam-1/cmd/pause", "vision/cam-9/cmd/config/set", "homeassistant/x/config", "a/#"],
)
def test_reply_never_goes_to_a_command_topic(rig, response_topic):
    """A resume whose ResponseTopic is a command topic does not run; its refusal goes only
    to the reply topic."""
    body = sign_command(KEY, RESUME, {"id": "rt"})
    reply = rig.send(RESUME, body, response_topic=response_topic, correlation_data=b"c")
    assert (reply.ok, code(reply)) == (False, "bad_response_topic")
    assert reply.response_topic is None
    assert rig.calls == []


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("response_topic", "ok"),
    [
        ("vision/cam-1/reply/mine", True),
        ("edge-agent/operator/op-1/reply", True),
        ("vision/cam-1/health", False),
        ("vision/cam-2/reply/pause", False),
        ("elsewhere/inbox", True),
    ],
)
def test_response_topic_outside_the_agents_space(rig, response_topic, ok):
    """ResponseTopics are honoured in <p>/<d>/reply/ and outside <p>/ and Home Assistant's."""
    reply = rig.send(
        PAUSE, sign_command(KEY, PAUSE, {"id": response_topic}), response_topic=response_topic
    )
    assert reply.ok is ok
    assert reply.response_topic == (response_topic if ok else None)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("response_topic", "ok"),
    [("vision/cam-1/reply/x", True), ("ops/inbox/1", True), ("elsewhere/inbox", False)],
)
def test_configured_response_prefixes_narrow_it(tmp_path, response_topic, ok):
    """With response_topic_prefixes set, only those prefixes and the reply space are used."""
    r = Rig(make_guard(tmp_path, response_topic_prefixes=["ops/inbox/"]))
    try:
        body = sign_command(KEY, PAUSE, {"id": "p"})
        assert r.send(PAUSE, body, response_topic=response_topic).ok is ok
    finally:
        r.close()


@pytest.mark.timeout(10)
def test_unencodable_id_is_refused_with_escaped_id(tmp_path):
    """An id with a lone surrogate gets a reply (id escaped) and the command never runs."""
    r = Rig(make_guard(tmp_path, require=False))
    try:
        reply = r.send(PAUSE, {"id": "\ud800x"})
        assert (reply.ok, code(reply), reply.id) == (False, "bad_request", "\\ud800x")
        assert reply.id is not None
        reply.id.encode("utf-8")
        assert r.calls == []
    finally:
        r.close()


def test_command_keys_fall_back_to_model_keys():
    """commands.trusted_keys null means the models' keys; set, it replaces them."""
    other = public_key_b64(STRANGER.public_key())
    models = ModelsSettings(trusted_keys=[public_key_b64(KEY.public_key())])
    own = parse_public_key(models.trusted_keys[0], "x").key_id
    assert [k.key_id for k in command_keys(CommandsSettings(), models)] == [own]
    chosen = command_keys(CommandsSettings(trusted_keys=[other]), models)
    assert [k.key_id for k in chosen] == [parse_public_key(other, "x").key_id]


@pytest.mark.timeout(10)
def test_readable_body_must_match_what_was_signed(rig):
    """The body beside 'signed' is what a reader sees: changed, the command is refused."""
    signed = sign_command(KEY, PAUSE, {"id": "b1", "camera": "front"})
    assert signed["camera"] == "front" and "signed" in signed
    forged = {**signed, "camera": "back"}
    assert code(rig.send(PAUSE, forged)) == "bad_request"
    minimal = {"id": "b2", "signed": sign_command(KEY, PAUSE, {"id": "b2"})["signed"]}
    assert rig.send(PAUSE, minimal).ok is True
    assert rig.calls == ["pause:b2"]
