"""Who may steer the device: signed commands, replays, and where replies may go.

The router asks the guard before anything runs. Without ``commands.require_signature`` an
unsigned command is let through as before (and a signed one is still verified); with it,
every command must carry a valid, fresh, unseen signature by a trusted key.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paho.mqtt.client import topic_matches_sub

from agent.errors import CommandError
from agent.settings import CommandsSettings, ModelsSettings
from agent.update.command_auth import (
    REJECT_CODES,
    REPLAYED,
    UNSIGNED,
    NonceBook,
    Opened,
    is_signed,
    open_command,
)
from agent.update.keys import TrustedKey, load_trusted_keys, parse_public_key, read_keys_file

NONCE_FILE = "command-nonces"


def command_keys(commands: CommandsSettings, models: ModelsSettings) -> tuple[TrustedKey, ...]:
    """The operators' keys: ``commands.trusted_keys`` (+ file), or the model publishers'."""
    if commands.trusted_keys is None and commands.trusted_keys_file is None:
        return load_trusted_keys(models)
    keys = [
        parse_public_key(k, f"commands.trusted_keys[{i}]")
        for i, k in enumerate(commands.trusted_keys or [])
    ]
    if commands.trusted_keys_file is not None:
        keys += read_keys_file(commands.trusted_keys_file)
    return tuple({k.key_id: k for k in keys}.values())


class CommandGuard:
    """Signature, freshness and replay checks, and the ResponseTopic rule; counts refusals."""

    def __init__(
        self,
        settings: CommandsSettings,
        keys: Sequence[TrustedKey],
        *,
        reply_space: str,
        forbidden: Sequence[str],
        state_dir: Path | None,
    ) -> None:
        self.settings = settings
        self._keys = tuple(keys)
        self._reply_space = reply_space
        self._forbidden = tuple(forbidden)
        path = state_dir / NONCE_FILE if state_dir is not None else None
        self._nonces = NonceBook(path, settings.max_skew_s * 2, time.time())
        self.refused: Counter[str] = Counter({code: 0 for code in REJECT_CODES})

    def response_allowed(self, topic: str) -> bool:
        """A ResponseTopic is honoured in the device's reply space, and elsewhere only
        outside the forbidden filters (commands, the agents' own topics, Home Assistant's)
        and, when ``response_topic_prefixes`` is set, under one of them."""
        if not topic or "+" in topic or "#" in topic or "\x00" in topic:
            return False
        if topic.startswith(self._reply_space):
            return True
        if any(topic_matches_sub(f, topic) for f in self._forbidden):
            return False
        prefixes = self.settings.response_topic_prefixes
        return prefixes is None or any(topic.startswith(p) for p in prefixes)

    def open(self, topic: str, body: dict[str, Any]) -> Opened | None:
        """The verified command, or None for an unsigned one the settings let through.

        CommandError (a reply code of docs/mqtt.md) when the command must not run; the
        nonce is not yet recorded (``record``), so a duplicate in flight is told apart.
        """
        if not is_signed(body):
            if self.settings.require_signature:
                self.refused[UNSIGNED] += 1
                raise CommandError(
                    UNSIGNED,
                    "this device takes only signed commands (commands.require_signature): "
                    "send it with `edge-agent ... --key KEY`",
                )
            return None
        try:
            return open_command(
                body,
                topic,
                self._keys,
                now=time.time(),
                max_skew_s=self.settings.max_skew_s,
            )
        except CommandError as e:
            if e.code in self.refused:
                self.refused[e.code] += 1
            raise

    def record(self, opened: Opened) -> bool:
        """Record the nonce; False (and counted) when it was seen before: a replay."""
        if self._nonces.check_and_add(opened.nonce, opened.ts, time.time()):
            return True
        self.refused[REPLAYED] += 1
        return False
