"""Capture contracts: the ``FrameSource`` protocol and the camera state machine.

A camera is something that can be swapped or restarted, so its life is an explicit state
machine (house style): a state enum, the allowed transitions, one lock, and a status record
published on every change.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from agent.errors import SourceError
from agent.log import get_logger
from agent.settings import CameraSettings

Image = npt.NDArray[np.uint8]

log = get_logger("capture")


class StreamFailedError(SourceError):
    """A source failure whose cause is known: ``cause`` is a word of agent.causes."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class SourceUnavailableError(SourceError):
    """A source that can never open on this machine (retrying would not help)."""

    cause = "unsupported"


class FrameSource(Protocol):
    """One camera/media backend. Not thread-safe: one reader thread owns it.

    ``open`` raises ``SourceError`` (``SourceUnavailableError`` when retrying is pointless).
    ``read`` returns a BGR uint8 HxWx3 image, written into ``out`` when the backend can
    (the caller passes a buffer it owns), or None at the end of a file or on a failed read.
    ``skip`` advances one frame without decoding it (cheaper than ``read``) and returns
    False where ``read`` would have returned None.
    """

    @property
    def fps(self) -> float | None:
        """Native frame rate of a file, None when the source has none (images, live)."""
        ...

    @property
    def is_live(self) -> bool:
        """True for cameras and streams (they pace themselves; a failed read is an error)."""
        ...

    @property
    def detect_frozen(self) -> bool:
        """Whether byte-identical frames for ``stall_timeout_s`` mean the source is stuck."""
        ...

    @property
    def name(self) -> str:
        """The source for logs and status reasons, credentials removed."""
        ...

    def open(self) -> None: ...

    def read(self, out: Image | None = None) -> Image | None: ...

    def skip(self) -> bool: ...

    def close(self) -> None: ...


#: Builds an unopened source for a camera; the worker calls it once per connection.
SourceFactory = Callable[[CameraSettings], FrameSource]


class CameraState(enum.Enum):
    STARTING = "starting"
    STREAMING = "streaming"
    RECONNECTING = "reconnecting"
    OFFLINE = "offline"
    STOPPED = "stopped"

    @property
    def contract(self) -> str:
        """The value of the camera status topic (MQTT contract v1 has three states)."""
        if self is CameraState.STREAMING:
            return "streaming"
        if self in (CameraState.STARTING, CameraState.RECONNECTING):
            return "reconnecting"
        return "offline"


_S = CameraState
#: OFFLINE is final for a worker (end of a file, a source this machine cannot open): a new
#: worker is needed to try again. RECONNECTING -> RECONNECTING only changes the reason.
ALLOWED: dict[CameraState, frozenset[CameraState]] = {
    _S.STARTING: frozenset({_S.STREAMING, _S.RECONNECTING, _S.OFFLINE, _S.STOPPED}),
    _S.STREAMING: frozenset({_S.RECONNECTING, _S.OFFLINE, _S.STOPPED}),
    _S.RECONNECTING: frozenset({_S.STREAMING, _S.RECONNECTING, _S.OFFLINE, _S.STOPPED}),
    _S.OFFLINE: frozenset({_S.STOPPED}),
    _S.STOPPED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class CameraStatus:
    """A camera's state as published: ``ts`` is wall-clock epoch seconds of the change.

    ``cause``: one word (agent.causes), published as the status ``reason``;
    ``reason``: the human sentence, published as ``detail``.
    """

    camera_id: str
    state: CameraState
    reason: str
    ts: float
    cause: str = ""


StatusCallback = Callable[[CameraStatus], None]


class InvalidTransitionError(RuntimeError):
    """A bug: the worker asked for a transition the state machine does not allow."""


class CameraStateMachine:
    """Current state plus the allowed transitions; notifies ``on_status`` on each change.

    The callback runs on the camera's thread while the lock is held, so statuses reach it
    in the order they happened; it must be quick (queue an MQTT publish, set a gauge).
    """

    def __init__(self, camera_id: str, on_status: StatusCallback | None = None) -> None:
        self._lock = threading.RLock()
        self._on_status = on_status
        self._status = CameraStatus(camera_id, CameraState.STARTING, "starting", time.time())

    @property
    def status(self) -> CameraStatus:
        return self._status

    @property
    def lock(self) -> threading.RLock:
        """Held by callers that must check a condition and transition atomically."""
        return self._lock

    def transition(self, new: CameraState, reason: str, cause: str = "") -> bool:
        """Move to ``new``; False when nothing changed (same state, reason and cause)."""
        with self._lock:
            old = self._status
            # STOPPED is terminal; a thread still winding down may report late: ignored.
            same = old.state is new and old.reason == reason and old.cause == cause
            if old.state is CameraState.STOPPED or same:
                return False
            if new not in ALLOWED[old.state]:
                raise InvalidTransitionError(
                    f"camera {old.camera_id}: {old.state.value} -> {new.value}"
                )
            self._status = CameraStatus(old.camera_id, new, reason, time.time(), cause)
            if self._on_status is not None:
                try:
                    self._on_status(self._status)
                except Exception as e:  # a broken subscriber must not stop the camera
                    log.exception("status_callback_failed", camera=old.camera_id, error=str(e))
            return True
