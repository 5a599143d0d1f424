"""`edge-agent fleet status|rollout`: the fleet table and staged rollouts over MQTT.

Parses the options and prints; the session is agent/fleet/session.py's, the rollout's
waves, deploys and waits agent/fleet/runner.py's, the table agent/fleet/status.py's.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from pathlib import Path

from agent.commands.remote import add_broker_args, signer_from_args, target_from_args
from agent.commands.sign import add_model_args, signed_manifest
from agent.fleet.rollout import FINAL
from agent.fleet.runner import RolloutPlan, run_rollout
from agent.fleet.session import Session, status_filter
from agent.fleet.status import DEFAULT_STALE_AFTER_S, KINDS, build_rows, format_table

EXIT_ABORTED = 1


def _add_common(p: argparse.ArgumentParser) -> None:
    add_broker_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fleet", help="fleet status table and staged model rollouts")
    fsub = p.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)

    st = fsub.add_parser("status", help="one row per device from the retained topics")
    _add_common(st)
    st.add_argument(
        "--stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER_S,
        metavar="S",
        help="flag an online device whose heartbeat is older than S seconds (default %(default)g)",
    )
    st.set_defaults(handler=run_status)

    ro = fsub.add_parser("rollout", help="deploy a model in waves, stop on failures")
    _add_common(ro)
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
    ro.set_defaults(handler=run_rollout_cmd)


def run_status(args: argparse.Namespace) -> int:
    target = target_from_args(args)
    session = Session(target, f"edge-agent-fleet-{secrets.token_hex(4)}")
    session.connect([status_filter(target.prefix, k) for k in KINDS])
    try:
        retained = session.snapshot()
    finally:
        session.close()
    rows = build_rows(retained, time.time(), args.stale_after)
    if args.json:
        print(json.dumps({"devices": [r.to_json() for r in rows]}))
    else:
        print(format_table(rows) if rows else f"no device under {target.prefix}/ on {target.where}")
    return 0


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


def run_rollout_cmd(args: argparse.Namespace) -> int:
    devices = None
    if args.devices is not None:
        devices = tuple(d.strip() for d in args.devices.split(",") if d.strip())
    plan = RolloutPlan(
        model=args.model,
        devices=devices,
        group=args.group,
        canary=args.canary,
        step_factor=args.step_factor,
        max_failure_pct=args.max_failure_pct,
        device_timeout_s=args.device_timeout,
        state_path=args.state,
        rollback_failed=args.rollback_failed,
        url=args.url,
        chunk_size=args.chunk_size,
    )
    target = target_from_args(args)
    signed = signed_manifest(args)
    manifest = signed["manifest"]
    progress: _Progress | None = None

    def on_device(device: str, state: str, code: str | None, states: dict[str, str]) -> None:
        nonlocal progress
        progress = progress or _Progress(len(states))
        progress.device(device, state, code, states)

    try:
        st = run_rollout(target, plan, signed, on_device, signer_from_args(args))
    finally:
        if progress is not None:
            progress.close()
    report = st.report()
    if args.json:
        print(json.dumps(report))
    else:
        width = max(len(d) for d in report["devices"])
        for d, v in report["devices"].items():
            print(f"{d.ljust(width)}  {v['state']}{'  ' + v['code'] if v['code'] else ''}")
        print(f"rollout {report['state']}: {manifest['name']} v{manifest['version']}")
    return EXIT_ABORTED if report["state"] == "aborted" else 0
