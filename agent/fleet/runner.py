"""``fleet rollout`` over MQTT: deploy a signed model in waves, stop on failures, resume.

The pure rules (waves, abort, state file) are agent/fleet/rollout.py; this module sends the
deploys, streams the chunks once a device accepted, resends what a device lost, and reads
the replies and retained topics. The CLI (agent/commands/fleet.py) only parses and prints.
"""

from __future__ import annotations

import json
import queue
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.errors import ConfigError
from agent.fleet.broker import BrokerTarget
from agent.fleet.rollout import FINAL, RolloutState, outcome, plan_waves, should_abort
from agent.fleet.session import (
    CONNECT_TIMEOUT_S,
    Session,
    route,
    status_filter,
    wait_acked,
)
from agent.fleet.status import KINDS, build_rows, parse_topic, require_known
from agent.fleet.transfer import DEPLOY, ROLLBACK, chunk_source, send_chunks
from agent.mqtt.topics import Topics
from agent.update.codes import BUSY, VERSION_NOT_NEWER

RESEND_S = 10.0  # a device silent this long after its deploy gets the same command again
RESENDS = 3

#: ``on_device(device, state, code, states_of_all)`` as each device reaches a final state.
OnDevice = Callable[[str, str, str | None, dict[str, str]], None]


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """What to roll out where, and the rules (the options of ``fleet rollout``)."""

    model: Path
    devices: tuple[str, ...] | None  # in this order; None: every member of ``group``
    group: str | None
    canary: int = 1
    step_factor: float = 2.0
    max_failure_pct: float = 0.0
    device_timeout_s: float = 300.0
    state_path: Path | None = None
    rollback_failed: bool = False
    url: str | None = None
    chunk_size: int = 262144

    def __post_init__(self) -> None:
        if self.device_timeout_s <= 0:
            raise ConfigError("--device-timeout must be > 0 seconds")
        if not 0 <= self.max_failure_pct <= 100:
            raise ConfigError("--max-failure-pct must be 0..100")
        if self.devices is not None and not self.devices:
            raise ConfigError("--devices: no device id given")


@dataclass
class _Pending:
    """One device's deploy while its wave runs."""

    cmd_id: str
    source: dict[str, Any]
    boot: str | None = None  # boot_id when the deploy was (last) sent
    sent_at: float = 0.0
    resends: int = 0
    streamed: bool = False
    restarted: bool = False


def _committed(cmd_id: str) -> dict[str, Any]:
    return {"id": cmd_id, "ok": True, "result": {"state": "committed"}}


class Rollout:
    """The devices' deploys of one rollout: what is sent, what came back (one session)."""

    def __init__(self, session: Session, plan: RolloutPlan, signed: dict[str, Any]) -> None:
        self.plan = plan
        self.prefix = session.target.prefix
        self.session = session
        self.signed = signed
        self.size = int(signed["manifest"]["size"])
        self.models: dict[str, dict[str, Any]] = {}
        self.replies: dict[str, dict[str, Any]] = {}  # device -> latest deploy/rollback reply
        self.accepted: dict[str, str] = {}  # device -> id of its last accepted deploy
        self.boots: dict[str, str] = {}  # device -> boot_id of its last "online" status

    def take_retained(self, retained: dict[tuple[str, str], bytes]) -> None:
        """The snapshot's model and status topics (what each device runs, its boot)."""
        for (device, kind), payload in retained.items():
            try:
                body = json.loads(payload)
            except ValueError:
                continue
            if isinstance(body, dict):
                self._take_retained(device, kind, body)

    def _take_retained(self, device: str, kind: str, body: dict[str, Any]) -> None:
        if kind == "model":
            self.models[device] = body
        elif kind == "status" and body.get("state") == "online" and "boot_id" in body:
            self.boots[device] = str(body["boot_id"])

    def _pump(self, timeout: float) -> None:
        """Take one message: a reply, an acceptance, or an updated model/status topic."""
        try:
            topic, payload = self.session.messages.get(timeout=timeout)
        except queue.Empty:
            return
        key = parse_topic(self.prefix, topic)
        try:
            body = json.loads(payload) if payload else None
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        if key is not None:
            self._take_retained(key[0], key[1], body)
            return
        head, sep, name = topic.partition("/progress/")
        if sep and name == DEPLOY and body.get("stage") == "accepted":
            self.accepted[head.rsplit("/", 1)[-1]] = str(body.get("id"))
            return
        head, sep, name = topic.partition("/reply/")
        if sep and name in (DEPLOY, ROLLBACK):
            self.replies[f"{name}:{head.rsplit('/', 1)[-1]}"] = body

    def send(self, device: str, name: str, body: dict[str, Any]) -> None:
        """Command ``name`` to one device, acknowledged by the broker."""
        topic = Topics(self.prefix, device).cmd(name)
        response = f"edge-agent/fleet/{device}/reply"
        info = self.session.command(topic, body, response, body["id"].encode())
        wait_acked([info], time.monotonic() + CONNECT_TIMEOUT_S)

    def send_deploy(self, device: str, cmd_id: str, source: dict[str, Any]) -> None:
        """The deploy command alone; the file follows once the device accepted it."""
        self.send(device, DEPLOY, {"id": cmd_id, **self.signed, "source": source})

    def stream(self, device: str, source: dict[str, Any]) -> None:
        if "transfer_id" in source:
            r = route(self.prefix, device, None, "fleet", DEPLOY)
            send_chunks(self.session, r, self.plan.model, source)

    def run_deploys(
        self, todo: dict[str, tuple[str, dict[str, Any], bool]], timeout_s: float
    ) -> dict[str, Any]:
        """Deploy ``{device: (cmd_id, source, resend)}`` at once; final replies by device.

        Chunks go to a device only after its ``accepted`` (a refusing or absent device
        costs one small message), or at once for a resend of a command the device may be
        running already (it ignores a repeated id, so no second acceptance comes). A
        device silent for RESEND_S gets the same command again (at most RESENDS times):
        a command published while a bridge was down is lost, a repeated id is harmless.

        A device that comes back online with a new ``boot_id`` before it answered lost the
        deploy with its process: it gets the same command again (a new boot has no memory
        of the id) and, once it accepts, the file again. One that restarted inside its
        health window resumes the window by itself: it answers ``busy`` (then it is judged
        by its retained model topic at the deadline) or, window over, ``version_not_newer``
        while running the new version (committed).
        """
        deadline = time.monotonic() + timeout_s
        pending = {d: _Pending(cmd_id, source) for d, (cmd_id, source, _) in todo.items()}
        for d, (_, source, resend) in todo.items():
            pending[d].boot = self.boots.get(d)
            self._deploy(d, pending[d])
            if resend:
                self.stream(d, source)
                pending[d].streamed = True
        got: dict[str, Any] = {}
        while len(got) < len(todo) and time.monotonic() < deadline:
            self._pump(0.2)
            for d in [d for d in todo if d not in got]:
                reply = self._advance(d, pending[d], deadline)
                if reply is not None:
                    got[d] = reply
        for d in todo.keys() - got.keys():
            if pending[d].restarted and self.runs_version(d):
                got[d] = _committed(pending[d].cmd_id)
        return got

    def _deploy(self, device: str, p: _Pending) -> None:
        self.send_deploy(device, p.cmd_id, p.source)
        p.sent_at = time.monotonic()

    def _advance(self, d: str, p: _Pending, deadline: float) -> dict[str, Any] | None:
        """One look at device ``d``'s deploy: its final reply, or None (sends what is due)."""
        reply = self.replies.get(f"{DEPLOY}:{d}")
        boot = self.boots.get(d)
        if reply is not None and reply.get("id") == p.cmd_id:
            code = _code(reply)
            if p.restarted and code == VERSION_NOT_NEWER and self.runs_version(d):
                return _committed(p.cmd_id)  # back at rest on this version: window passed
            if p.restarted and code == BUSY:
                return None  # judging the model itself: see run_deploys
            return reply
        if boot is not None and boot != p.boot:
            p.restarted, p.boot, p.streamed = True, boot, False
            self.accepted.pop(d, None)
            self._deploy(d, p)
        elif self.accepted.get(d) == p.cmd_id:
            if not p.streamed:
                self.stream(d, p.source)
                p.streamed = True
        elif time.monotonic() - p.sent_at > RESEND_S and p.resends < RESENDS:
            self._deploy(d, p)
            p.resends += 1
        return None

    def wait(self, name: str, ids: dict[str, str], deadlines: dict[str, float]) -> dict[str, Any]:
        """Final replies of ``{device: cmd_id}`` until each device's deadline."""
        got: dict[str, Any] = {}
        while len(got) < len(ids):
            open_ = [d for d in ids if d not in got]
            now = time.monotonic()
            if all(deadlines[d] <= now for d in open_):
                break
            self._pump(0.2)
            for d in open_:
                reply = self.replies.get(f"{name}:{d}")
                if reply is not None and reply.get("id") == ids[d]:
                    got[d] = reply
        return got

    def runs_version(self, device: str) -> bool:
        m = self.models.get(device, {})
        mf = self.signed["manifest"]
        return bool(m.get("version") == mf["version"] and m.get("sha256") == mf["sha256"])


def _code(reply: dict[str, Any]) -> str | None:
    error = reply.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def _targets(plan: RolloutPlan, target: BrokerTarget, retained: dict[Any, bytes]) -> list[str]:
    """The devices in rollout order; an unknown device or group fails before anything is sent."""
    if plan.devices is not None:
        for d in plan.devices:
            try:
                Topics(target.prefix, d)
            except ValueError as e:
                raise ConfigError(f"--devices: {e}") from e
        devices = list(dict.fromkeys(plan.devices))
        require_known(retained, target.prefix, target.where, devices=devices)
        return devices
    require_known(retained, target.prefix, target.where, group=plan.group)
    return [r.device for r in build_rows(retained, time.time()) if plan.group in r.groups]


def run_rollout(
    target: BrokerTarget,
    plan: RolloutPlan,
    signed: dict[str, Any],
    on_device: OnDevice,
    signer: Ed25519PrivateKey | None = None,
) -> RolloutState:
    """Roll ``signed`` (manifest + signature) out by ``plan``; the final state (``report()``
    is the contract's ``--json`` object). Saved to ``plan.state_path`` at every step."""
    manifest = signed["manifest"]
    p = target.prefix
    session = Session(target, f"edge-agent-fleet-{secrets.token_hex(4)}", signer)
    session.connect(
        [status_filter(p, k) for k in KINDS]
        + [f"{p}/+/reply/{DEPLOY}", f"{p}/+/reply/{ROLLBACK}", f"{p}/+/progress/{DEPLOY}"]
    )
    try:
        retained = session.snapshot()
        devices = _targets(plan, target, retained)
        waves = plan_waves(devices, plan.canary, plan.step_factor)
        path = plan.state_path
        st = RolloutState.load_or_new(path, devices, manifest["sha256"], manifest["version"])
        ro = Rollout(session, plan, signed)
        ro.take_retained(retained)
        # Resume: a device marked "sending" by a run that died may already run the model.
        for d in devices:
            e = st.devices[d]
            if e.state == "sending" and ro.runs_version(d):
                e.state, e.code = "committed", None
        st.save(path)
        _run_waves(plan, ro, st, waves, on_device)
        st.save(path)
    finally:
        session.close()
    return st


def _run_waves(
    plan: RolloutPlan, ro: Rollout, st: RolloutState, waves: list[list[str]], on_device: OnDevice
) -> None:
    for wave in waves:
        if should_abort(st.states(), plan.max_failure_pct):
            st.state = "aborted"
            return
        todo = [d for d in wave if st.devices[d].state not in FINAL]
        todo_plan: dict[str, tuple[str, dict[str, Any], bool]] = {}
        for d in todo:
            e = st.devices[d]
            if e.state != "sending" or e.cmd_id is None or e.source is None:
                e.state = "pending"
                # Fresh: the id and source are stored before the deploy leaves, so a
                # re-run re-sends the *same* command, which the agent never runs twice.
                e.cmd_id = f"rollout-{secrets.token_hex(6)}"
                e.source = {"url": plan.url} if plan.url else chunk_source(ro.size, plan.chunk_size)
            todo_plan[d] = (e.cmd_id, e.source, e.state == "sending")
            e.state = "sending"
        st.save(plan.state_path)  # every device of the wave is "sending" before any deploy
        got = ro.run_deploys(todo_plan, plan.device_timeout_s)
        for d in todo:
            e = st.devices[d]
            e.state, e.code = outcome(got.get(d))
            st.save(plan.state_path)
            on_device(d, e.state, e.code, st.states())
        if should_abort(st.states(), plan.max_failure_pct):
            st.state = "aborted"
            if plan.rollback_failed:
                _roll_back(plan, ro, st, wave, on_device)
            st.save(plan.state_path)
            return
    st.state = "completed"


def _roll_back(
    plan: RolloutPlan, ro: Rollout, st: RolloutState, wave: list[str], on_device: OnDevice
) -> None:
    """model/rollback to the devices of the failed wave that committed the new model."""
    ids = {
        d: f"rollback-{secrets.token_hex(6)}" for d in wave if st.devices[d].state == "committed"
    }
    deadlines = {d: time.monotonic() + plan.device_timeout_s for d in ids}
    for d, cmd_id in ids.items():
        ro.send(d, ROLLBACK, {"id": cmd_id})
    got = ro.wait(ROLLBACK, ids, deadlines)
    for d in ids:
        reply = got.get(d)
        if reply is not None and reply.get("ok") is True:
            st.devices[d].state, st.devices[d].code = "rolled_back", None
            on_device(d, "rolled_back", None, st.states())
