"""`edge-agent fleet status|rollout`: the fleet table and staged rollouts over MQTT.

Thin CLI around agent.fleet (pure logic); the MQTT session, signing and chunk sending are
push-model's (agent/commands/push_model.py).
"""

from __future__ import annotations

import argparse
import json
import queue
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.commands.push_model import (
    CONNECT_TIMEOUT_S,
    DEPLOY,
    Session,
    chunk_source,
    route,
    send_chunks,
    wait_acked,
)
from agent.commands.sign import add_model_args, signed_manifest
from agent.errors import ConfigError
from agent.fleet.rollout import FINAL, RolloutState, outcome, plan_waves, should_abort
from agent.fleet.status import DEFAULT_STALE_AFTER_S, KINDS, build_rows, format_table, parse_topic
from agent.mqtt.topics import Topics
from agent.update.codes import BUSY, VERSION_NOT_NEWER

ROLLBACK = "model/rollback"
RESEND_S = 10.0  # a device silent this long after its deploy gets the same command again
RESENDS = 3
EXIT_ABORTED = 1
QUIET_S = 0.5  # retained messages stop arriving: the snapshot is complete
SNAPSHOT_MAX_S = 5.0


def _add_broker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker", required=True, metavar="HOST[:PORT]", help="MQTT broker")
    p.add_argument("--prefix", default="vision", help="topic prefix (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--username", default=None, help="broker user name")
    p.add_argument("--password", default=None, help="broker password")
    p.add_argument("--ca", type=Path, default=None, help="CA bundle: connect with TLS")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fleet", help="fleet status table and staged model rollouts")
    fsub = p.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)

    st = fsub.add_parser("status", help="one row per device from the retained topics")
    _add_broker_args(st)
    st.add_argument(
        "--stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER_S,
        metavar="S",
        help="flag an online device whose heartbeat is older than S seconds (default %(default)g)",
    )
    st.set_defaults(handler=run_status)

    ro = fsub.add_parser("rollout", help="deploy a model in waves, stop on failures")
    _add_broker_args(ro)
    add_model_args(ro)
    target = ro.add_mutually_exclusive_group(required=True)
    target.add_argument("--group", help="every device whose retained status lists this group")
    target.add_argument("--devices", help="comma-separated device ids, deployed in this order")
    ro.add_argument("--canary", type=int, default=1, help="devices in the first wave (default 1)")
    ro.add_argument(
        "--step-factor", type=float, default=2.0, help="each wave is F times the last (default 2)"
    )
    ro.add_argument(
        "--max-failure-pct",
        type=float,
        default=0.0,
        metavar="P",
        help="abort when more than P %% of attempted devices failed (default 0)",
    )
    ro.add_argument(
        "--device-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds from a device's deploy to its final reply (default %(default)g)",
    )
    ro.add_argument("--state", type=Path, default=None, help="resumable state file (JSON)")
    ro.add_argument(
        "--rollback-failed",
        action="store_true",
        help="on abort, send model/rollback to the devices of the failed wave that committed",
    )
    ro.add_argument("--url", default=None, help="devices download the model from this URL")
    ro.add_argument("--chunk-size", type=int, default=262144, help="bytes per chunk")
    ro.set_defaults(handler=run_rollout)


# -- snapshot of the retained topics ----------------------------------------------------------
def _snapshot(session: Session, prefix: str) -> dict[tuple[str, str], bytes]:
    retained: dict[tuple[str, str], bytes] = {}
    deadline = time.monotonic() + SNAPSHOT_MAX_S
    while time.monotonic() < deadline:
        try:
            topic, payload = session.messages.get(timeout=QUIET_S)
        except queue.Empty:
            break
        key = parse_topic(prefix, topic)
        if key is not None and payload:
            retained[key] = payload
    return retained


def _connect(args: argparse.Namespace, extra: list[str]) -> Session:
    try:
        Topics(args.prefix, "x")
    except ValueError as e:
        raise ConfigError(f"--prefix: {e}") from e
    session = Session(args, f"edge-agent-fleet-{secrets.token_hex(4)}")
    session.connect(args.broker, [f"{args.prefix}/+/{k}" for k in KINDS] + extra)
    return session


def run_status(args: argparse.Namespace) -> int:
    session = _connect(args, [])
    try:
        retained = _snapshot(session, args.prefix)
    finally:
        session.close()
    rows = build_rows(retained, time.time(), args.stale_after)
    if args.json:
        print(json.dumps({"devices": [r.to_json() for r in rows]}))
    else:
        print(format_table(rows) if rows else f"no device under {args.prefix}/")
    return 0


# -- rollout ----------------------------------------------------------------------------------
class _Progress:
    """A bar on a TTY, one plain line per finished device otherwise (stderr)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()

    def device(self, device: str, state: str, code: str | None, states: dict[str, str]) -> None:
        done = sum(1 for s in states.values() if s in FINAL)
        if not self.tty:
            print(
                f"{device}: {state}{f' ({code})' if code else ''} [{done}/{self.total}]",
                file=sys.stderr,
                flush=True,
            )
            return
        width = 30
        fill = width * done // max(1, self.total)
        failed = sum(1 for s in states.values() if s in ("failed", "timed_out", "rolled_back"))
        print(
            f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} failed {failed}",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


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


class _Rollout:
    def __init__(self, args: argparse.Namespace, session: Session, signed: dict[str, Any]) -> None:
        self.args = args
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
        key = parse_topic(self.args.prefix, topic)
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

    def _send(self, device: str, name: str, body: dict[str, Any]) -> None:
        t = Topics(self.args.prefix, device)
        props = self.session.response_props(f"edge-agent/fleet/{device}/reply", body["id"].encode())
        info = self.session.publish(t.cmd(name), json.dumps(body).encode(), props)
        wait_acked([info], time.monotonic() + CONNECT_TIMEOUT_S)

    def send_deploy(self, device: str, cmd_id: str, source: dict[str, Any]) -> None:
        """The deploy command alone; the file follows once the device accepted it."""
        self._send(device, DEPLOY, {"id": cmd_id, **self.signed, "source": source})

    def stream(self, device: str, source: dict[str, Any]) -> None:
        if "transfer_id" in source:
            r = route(self.args.prefix, device, None, "fleet", DEPLOY)
            send_chunks(self.session, r, self.args.model, source)

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


def _targets(args: argparse.Namespace, retained: dict[tuple[str, str], bytes]) -> list[str]:
    if args.devices is not None:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
        for d in devices:
            try:
                Topics(args.prefix, d)
            except ValueError as e:
                raise ConfigError(f"--devices: {e}") from e
        if not devices:
            raise ConfigError("--devices: no device id given")
        return list(dict.fromkeys(devices))
    rows = build_rows(retained, time.time())
    devices = [r.device for r in rows if args.group in r.groups]
    if not devices:
        raise ConfigError(
            f"--group {args.group}: no device under {args.prefix}/ lists this group in its "
            "retained status (see `edge-agent fleet status`)"
        )
    return devices


def run_rollout(args: argparse.Namespace) -> int:
    if args.device_timeout <= 0:
        raise ConfigError("--device-timeout must be > 0 seconds")
    if not 0 <= args.max_failure_pct <= 100:
        raise ConfigError("--max-failure-pct must be 0..100")
    signed = signed_manifest(args)
    manifest = signed["manifest"]
    session = _connect(
        args,
        [
            f"{args.prefix}/+/reply/{DEPLOY}",
            f"{args.prefix}/+/reply/{ROLLBACK}",
            f"{args.prefix}/+/progress/{DEPLOY}",
        ],
    )
    try:
        retained = _snapshot(session, args.prefix)
        devices = _targets(args, retained)
        waves = plan_waves(devices, args.canary, args.step_factor)
        st = RolloutState.load_or_new(args.state, devices, manifest["sha256"], manifest["version"])
        ro = _Rollout(args, session, signed)
        ro.take_retained(retained)
        progress = _Progress(len(devices))
        # Resume: a device marked "sending" by a run that died may already run the model.
        for d in devices:
            e = st.devices[d]
            if e.state == "sending" and ro.runs_version(d):
                e.state, e.code = "committed", None
        st.save(args.state)
        try:
            _run_waves(args, ro, st, waves, progress)
        finally:
            progress.close()
        st.save(args.state)
    finally:
        session.close()
    report = st.report()
    if args.json:
        print(json.dumps(report))
    else:
        width = max(len(d) for d in report["devices"])
        for d, v in report["devices"].items():
            print(f"{d.ljust(width)}  {v['state']}{'  ' + v['code'] if v['code'] else ''}")
        print(f"rollout {report['state']}: {manifest['name']} v{manifest['version']}")
    return EXIT_ABORTED if report["state"] == "aborted" else 0


def _run_waves(
    args: argparse.Namespace,
    ro: _Rollout,
    st: RolloutState,
    waves: list[list[str]],
    progress: _Progress,
) -> None:
    for wave in waves:
        if should_abort(st.states(), args.max_failure_pct):
            st.state = "aborted"
            return
        todo = [d for d in wave if st.devices[d].state not in FINAL]
        plan: dict[str, tuple[str, dict[str, Any], bool]] = {}
        for d in todo:
            e = st.devices[d]
            if e.state != "sending" or e.cmd_id is None or e.source is None:
                e.state = "pending"
                # Fresh: the id and source are stored before the deploy leaves, so a
                # re-run re-sends the *same* command, which the agent never runs twice.
                e.cmd_id = f"rollout-{secrets.token_hex(6)}"
                e.source = {"url": args.url} if args.url else chunk_source(ro.size, args.chunk_size)
            plan[d] = (e.cmd_id, e.source, e.state == "sending")
            e.state = "sending"
        st.save(args.state)  # every device of the wave is "sending" before any deploy leaves
        got = ro.run_deploys(plan, args.device_timeout)
        for d in todo:
            e = st.devices[d]
            e.state, e.code = outcome(got.get(d))
            st.save(args.state)
            progress.device(d, e.state, e.code, st.states())
        if should_abort(st.states(), args.max_failure_pct):
            st.state = "aborted"
            if args.rollback_failed:
                _roll_back(args, ro, st, wave, progress)
            st.save(args.state)
            return
    st.state = "completed"


def _roll_back(
    args: argparse.Namespace, ro: _Rollout, st: RolloutState, wave: list[str], progress: _Progress
) -> None:
    """model/rollback to the devices of the failed wave that committed the new model."""
    ids = {
        d: f"rollback-{secrets.token_hex(6)}" for d in wave if st.devices[d].state == "committed"
    }
    deadlines = {d: time.monotonic() + args.device_timeout for d in ids}
    for d, cmd_id in ids.items():
        ro._send(d, ROLLBACK, {"id": cmd_id})
    got = ro.wait(ROLLBACK, ids, deadlines)
    for d in ids:
        reply = got.get(d)
        if reply is not None and reply.get("ok") is True:
            st.devices[d].state, st.devices[d].code = "rolled_back", None
            progress.device(d, "rolled_back", None, st.states())
