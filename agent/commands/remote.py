"""Operator-command options (broker, account, TLS, target) and sending one command.

Shared by ``push-model``, ``rollback``, ``config set`` and ``fleet``: the options become a
``BrokerTarget`` (agent/fleet/broker.py) over the config's ``mqtt`` section; the session,
routes and replies are agent/fleet/session.py's.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.commands.common import add_config_arg, settings_from_args
from agent.errors import ConfigError
from agent.fleet.broker import BrokerTarget
from agent.fleet.session import (
    CONNECT_TIMEOUT_S,
    Session,
    collect,
    open_session,
    route,
    wait_acked,
)
from agent.update.keys import load_private_key

EXIT_ERROR_REPLY = 1
EXIT_NO_REPLY = 3


def add_broker_args(p: argparse.ArgumentParser) -> None:
    """--config, --broker, --prefix and the account and TLS options; each one given
    overrides the config's (and its EDGE_AGENT__MQTT__* environment's) value."""
    add_config_arg(p)
    p.add_argument(
        "--broker", default=None, metavar="HOST[:PORT]", help="MQTT broker (default: mqtt.host)"
    )
    p.add_argument("--prefix", default=None, help="topic prefix (default: mqtt.topic_prefix)")
    p.add_argument("--username", default=None, help="broker user name (default: mqtt.username)")
    secret = p.add_mutually_exclusive_group()
    secret.add_argument(
        "--password-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="read the broker password from FILE (default: EDGE_AGENT__MQTT__PASSWORD or "
        "mqtt.password)",
    )
    secret.add_argument(
        "--password", default=None, help="broker password (visible in `ps`: prefer the above)"
    )
    p.add_argument("--ca", type=Path, default=None, help="CA bundle: TLS (default: mqtt.tls.ca)")
    p.add_argument(
        "--tls-cert", type=Path, default=None, metavar="FILE", help="client certificate (PEM)"
    )
    p.add_argument("--tls-key", type=Path, default=None, metavar="FILE", help="its private key")


def target_from_args(args: argparse.Namespace) -> BrokerTarget:
    """The broker of an operator command: the config's, with the options put over it."""
    password = args.password
    if args.password_file is not None:
        try:
            lines = args.password_file.read_text(encoding="utf-8").splitlines()
            password = lines[0] if lines else ""
        except OSError as e:
            raise ConfigError(
                f"--password-file {args.password_file}: cannot read it ({e.strerror or e})"
            ) from e
        except UnicodeDecodeError as e:
            raise ConfigError(f"--password-file {args.password_file}: not UTF-8 text") from e
    return BrokerTarget.from_settings(
        settings_from_args(args).mqtt,
        broker=args.broker,
        prefix=args.prefix,
        username=args.username,
        password=password,
        ca=args.ca,
        cert=args.tls_cert,
        key=args.tls_key,
    )


def add_key_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--key",
        type=Path,
        default=None,
        metavar="FILE",
        help="sign the command with this private key (PEM, from `edge-agent keygen`); "
        "devices with commands.require_signature run only signed commands",
    )


def signer_from_args(args: argparse.Namespace) -> Ed25519PrivateKey | None:
    """The key that signs the commands of ``args`` (``--key``), if one was given."""
    return load_private_key(args.key) if getattr(args, "key", None) is not None else None


def open_target_session(
    args: argparse.Namespace, target: BrokerTarget, client_id: str, filters: list[str]
) -> Session:
    """The session of a command to ``args.device`` or ``args.group`` (known ones only),
    signing with ``--key`` when one is given."""
    return open_session(
        target,
        client_id,
        filters,
        device=args.device,
        group=args.group,
        signer=signer_from_args(args),
    )


def add_target_args(p: argparse.ArgumentParser, *, timeout: float, key: bool = True) -> None:
    """The broker options, --device | --group, --timeout, --expect, --id, and (``key``)
    --key; push-model's --key is its model key, which signs the command too."""
    add_broker_args(p)
    if key:
        add_key_arg(p)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--device", help="device id")
    target.add_argument("--group", help="fleet group")
    p.add_argument(
        "--timeout",
        type=float,
        default=timeout,
        help="seconds to wait for replies (default: %(default)s)",
    )
    p.add_argument(
        "--expect",
        type=int,
        default=None,
        metavar="N",
        help="with --group: stop waiting once N devices replied (default: wait --timeout)",
    )
    p.add_argument("--id", default=None, help="command id (default: random)")


def send_command(args: argparse.Namespace, name: str, body: dict[str, Any], *, summary: Any) -> int:
    """Send command ``name`` with ``body`` to ``args.device`` or ``args.group``, await replies.

    Prints one line per reply (``summary(device, reply)``), or the reply JSON with
    ``--json``. Exit status: 0 every reply ok, 1 an error reply, 3 no reply in time.
    """
    cmd_id = args.id or f"{name.replace('/', '-')}-{secrets.token_hex(4)}"
    client_id = f"edge-agent-op-{secrets.token_hex(4)}"
    target = target_from_args(args)
    r = route(target.prefix, args.device, args.group, client_id, name)
    filters = [r.reply_filter, r.response_topic]
    session = open_target_session(args, target, client_id, filters)

    def show(device: str | None, reply: dict[str, Any]) -> None:
        who = device or args.device
        if args.json:
            print(json.dumps({"device": who, "reply": reply}), flush=True)
        else:
            print(summary(who, reply), flush=True)

    try:
        info = session.command(r.command, {"id": cmd_id, **body}, r.response_topic, cmd_id.encode())
        wait_acked([info], time.monotonic() + CONNECT_TIMEOUT_S)
        replies = collect(session, r, cmd_id, args.timeout, args.expect, on_group_reply=show)
    finally:
        session.close()
    if not replies:
        print(f"no reply to {name} {cmd_id} within {args.timeout:g} s", file=sys.stderr)
        return EXIT_NO_REPLY
    if args.group is None:
        show(None, replies[0][1])
    return 0 if all(reply.get("ok") is True for _, reply in replies) else EXIT_ERROR_REPLY


def error_text(reply: dict[str, Any]) -> str:
    """'code: message' of an error reply."""
    error = reply.get("error") or {}
    return f"{error.get('code', 'error')}: {error.get('message', '')}".rstrip(": ")
