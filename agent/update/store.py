"""Deployed models on disk: ``<state_dir>/models/`` with the active and previous model files
and ``state.json`` naming them. Survives SIGKILL at any instant.

Model files are named by their sha256 and only ever appear by ``os.replace`` of a fully
written, fsynced temp file; ``state.json`` is replaced the same way, after the file it names.
So a crash leaves either the old state (the new file is then garbage, removed at the next
start) or the new one, never a state naming a partial file. At start the active file is
hashed again anyway: a file corrupted on disk is not loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.detect.detector import sha256_file
from agent.errors import VerifyError
from agent.log import get_logger
from agent.update import codes
from agent.update.transfer import PART_PREFIX

log = get_logger("update.store")

STATE_FILE = "state.json"
STATE_SCHEMA = "edge-vision/model-store/1"
_OWNED_NAME = re.compile(r"^[0-9a-f]{64}\.onnx$")
_STATE_TMP_PREFIX = ".state-"


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """One model the store knows: a file it owns (``<sha256>.onnx`` in the store) or an
    outside file (an absolute path: the bundled model, which is never deleted)."""

    file: str
    sha256: str
    name: str
    version: int
    committed: bool
    manifest: Mapping[str, Any] | None = None
    activated_at: str = field(default_factory=_utc_now)

    @classmethod
    def external(cls, path: Path, sha256: str, name: str, version: int) -> ModelRecord:
        """The configured (bundled) model, trusted as last good."""
        return cls(str(path.resolve()), sha256, name, version, committed=True)

    @property
    def owned(self) -> bool:
        return not Path(self.file).is_absolute()

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "sha256": self.sha256}

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "sha256": self.sha256,
            "name": self.name,
            "version": self.version,
            "committed": self.committed,
            "manifest": dict(self.manifest) if self.manifest is not None else None,
            "activated_at": self.activated_at,
        }

    @classmethod
    def from_json(cls, d: object) -> ModelRecord:
        if not isinstance(d, dict):
            raise ValueError("record is not an object")
        file, sha, name, version = d.get("file"), d.get("sha256"), d.get("name"), d.get("version")
        manifest = d.get("manifest")
        if not isinstance(file, str) or not (_OWNED_NAME.match(file) or Path(file).is_absolute()):
            raise ValueError(f"bad file {file!r}")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError("bad sha256")
        if not isinstance(name, str) or not isinstance(version, int):
            raise ValueError("bad name/version")
        if manifest is not None and not isinstance(manifest, dict):
            raise ValueError("bad manifest")
        return cls(
            file,
            sha,
            name,
            version,
            bool(d.get("committed", False)),
            manifest,
            str(d.get("activated_at", "")),
        )


@dataclass(frozen=True, slots=True)
class StoreState:
    active: ModelRecord | None = None
    previous: ModelRecord | None = None
    pending_starts: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": STATE_SCHEMA,
            "active": self.active.to_json() if self.active else None,
            "previous": self.previous.to_json() if self.previous else None,
            "pending_starts": self.pending_starts,
        }


@dataclass(frozen=True, slots=True)
class StartDecision:
    """What to start on. ``path`` None: the configured (bundled) model."""

    path: Path | None
    record: ModelRecord | None
    fell_back: bool
    reasons: tuple[str, ...]

    @property
    def needs_health_window(self) -> bool:
        return self.record is not None and not self.record.committed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ModelStore:
    """The ``models/`` directory of the state dir. One instance per agent; thread-safe."""

    def __init__(self, state_dir: Path, *, crash_loop_starts: int = 3) -> None:
        self.dir = state_dir / "models"
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:  # a full or read-only state_dir: start on the configured model
            log.error("model_store_unavailable", dir=str(self.dir), error=str(e))
        self.crash_loop_starts = crash_loop_starts
        self._lock = threading.RLock()
        self._state = self._load()
        self._remove_leftovers()
        self.gc()

    # -- reading -----------------------------------------------------------------------------
    @property
    def tmp_dir(self) -> Path:
        """Where transfers write: the same filesystem, so adopting a file is a rename."""
        return self.dir

    @property
    def state(self) -> StoreState:
        return self._state

    @property
    def active(self) -> ModelRecord | None:
        return self._state.active

    @property
    def previous(self) -> ModelRecord | None:
        return self._state.previous

    def path_of(self, record: ModelRecord) -> Path:
        return Path(record.file) if not record.owned else self.dir / record.file

    def active_path(self) -> Path | None:
        """The model to start on; None means the configured (bundled) model."""
        active = self._state.active
        return self.path_of(active) if active is not None else None

    def check_file(self, record: ModelRecord) -> str | None:
        """Why ``record``'s file cannot be used (missing, wrong sha256), or None if it can."""
        path = self.path_of(record)
        try:
            if not path.is_file():
                return f"{path} is missing"
            actual = sha256_file(path)
        except OSError as e:
            return f"{path} is unreadable: {e}"
        if actual != record.sha256:
            return f"{path} has sha256 {actual[:12]}..., expected {record.sha256[:12]}..."
        return None

    # -- start -------------------------------------------------------------------------------
    def record_start(self) -> StartDecision:
        """Call once at agent start, before loading a model: which model to start on.

        Drops records whose file is missing or corrupt; counts a start of an uncommitted
        model and, at ``crash_loop_starts`` such starts, falls back to the last good one.
        """
        with self._lock:
            st = self._state
            reasons: list[str] = []
            if st.previous is not None and (why := self.check_file(st.previous)):
                reasons.append(f"previous model v{st.previous.version} unusable: {why}")
                st = replace(st, previous=None)
            active = st.active
            if active is not None and (why := self.check_file(active)):
                reasons.append(f"active model v{active.version} unusable: {why}")
                st = StoreState(active=st.previous, previous=None, pending_starts=0)
            elif active is not None and not active.committed:
                starts = st.pending_starts + 1
                st = replace(st, pending_starts=starts)
                if starts >= self.crash_loop_starts:
                    reasons.append(
                        f"model {active.name} v{active.version} started {starts} times "
                        "without committing (crash loop)"
                    )
                    st = self._fallback_state(st)
            fell_back = st.active != self._state.active
            if st != self._state:
                try:
                    self._write(st)
                except OSError as e:  # full or read-only disk: this start is not counted
                    log.error("model_store_start_not_recorded", error=str(e))
                    self._state = st
            self.gc()
            for r in reasons:
                log.warning("model_store_fallback" if fell_back else "model_store_repair", why=r)
            return StartDecision(self.active_path(), st.active, fell_back, tuple(reasons))

    def fall_back(self, reason: str) -> StartDecision:
        """The active model cannot be loaded (``reason``): switch to the last good one now."""
        with self._lock:
            log.error("model_store_fallback", why=reason)
            st = self._fallback_state(self._state)
            self._write(st)
            self.gc()
            return StartDecision(self.active_path(), st.active, True, (reason,))

    @staticmethod
    def _fallback_state(st: StoreState) -> StoreState:
        """Active <- the previous model if it is good, else the bundled one (None).

        The failed model stays as ``previous`` (uncommitted), so an operator can still
        ``model/rollback`` to it on purpose.
        """
        prev = st.previous if st.previous is not None and st.previous.committed else None
        return StoreState(active=prev, previous=st.active, pending_starts=0)

    # -- changes -----------------------------------------------------------------------------
    def stage(
        self,
        src: Path,
        sha256: str,
        manifest: Mapping[str, Any],
        *,
        previous: ModelRecord | None,
    ) -> ModelRecord:
        """Install ``src`` (a verified file) as the active model, uncommitted.

        ``previous`` is what runs now (the store's active record, or the bundled model's).
        ``src`` is consumed: renamed when it is in ``tmp_dir``, else copied.
        """
        with self._lock:
            dest = self.dir / f"{sha256}.onnx"
            if src.parent.resolve() == self.dir.resolve():
                _fsync_file(src)
                os.replace(src, dest)
            else:
                self._copy_in(src, dest)
            _fsync_dir(self.dir)
            record = ModelRecord(
                dest.name,
                sha256,
                str(manifest["name"]),
                int(manifest["version"]),
                committed=False,
                manifest=dict(manifest),
            )
            self._write(StoreState(active=record, previous=previous, pending_starts=0))
            self.gc()
            return record

    def _copy_in(self, src: Path, dest: Path) -> None:
        tmp = self.dir / f"{PART_PREFIX}copy-{os.getpid()}-{threading.get_ident()}"
        try:
            with src.open("rb") as fin, tmp.open("wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.flush()
                os.fsync(fout.fileno())
            os.replace(tmp, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def commit(self) -> ModelRecord:
        """Mark the active model good (health window passed)."""
        with self._lock:
            active = self._state.active
            if active is None:
                raise RuntimeError("no staged model to commit")
            record = replace(active, committed=True)
            self._write(replace(self._state, active=record, pending_starts=0))
            return record

    def rollback(self, current: ModelRecord | None = None) -> ModelRecord:
        """Swap active and previous; returns the new active. VerifyError(no_previous).

        ``current`` is what runs when the store has no active record (the bundled model):
        it becomes the previous one.
        """
        with self._lock:
            st = self._state
            if st.previous is None:
                raise VerifyError(codes.NO_PREVIOUS, "there is no previous model to roll back to")
            why = self.check_file(st.previous)
            if why is not None:
                raise VerifyError(codes.NO_PREVIOUS, f"the previous model is unusable: {why}")
            target = replace(st.previous, activated_at=_utc_now())
            self._write(StoreState(target, st.active or current, pending_starts=0))
            return target

    def restore(self, state: StoreState) -> None:
        """Put back an earlier state (undo a ``stage``/``rollback`` whose swap failed)."""
        with self._lock:
            self._write(state)
            self.gc()

    def gc(self) -> list[str]:
        """Delete model files that neither the active nor the previous record names."""
        with self._lock:
            keep = {r.file for r in (self._state.active, self._state.previous) if r and r.owned}
            removed: list[str] = []
            for p in self._entries():
                if _OWNED_NAME.match(p.name) and p.name not in keep:
                    with contextlib.suppress(OSError):
                        p.unlink()
                    removed.append(p.name)
            if removed:
                log.info("model_store_gc", removed=removed)
            return removed

    # -- persistence -------------------------------------------------------------------------
    def _entries(self) -> list[Path]:
        try:
            return list(self.dir.iterdir())
        except OSError:  # no models/ (a read-only state_dir): nothing to tidy
            return []

    def _remove_leftovers(self) -> None:
        """Temp files of transfers or state writes a crash interrupted (at start only)."""
        for p in self._entries():
            if p.name.startswith((PART_PREFIX, _STATE_TMP_PREFIX)):
                with contextlib.suppress(OSError):
                    p.unlink()
                log.info("model_store_temp_removed", file=p.name)

    def _load(self) -> StoreState:
        path = self.dir / STATE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return StoreState()
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return self._corrupt(path, str(e))
        try:
            if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
                raise ValueError(f"schema is not {STATE_SCHEMA}")
            active, previous = data.get("active"), data.get("previous")
            starts = data.get("pending_starts", 0)
            return StoreState(
                ModelRecord.from_json(active) if active is not None else None,
                ModelRecord.from_json(previous) if previous is not None else None,
                starts if isinstance(starts, int) and starts >= 0 else 0,
            )
        except ValueError as e:
            return self._corrupt(path, str(e))

    def _corrupt(self, path: Path, why: str) -> StoreState:
        # Atomic writes make this disk corruption or a hand edit: keep it for a human.
        aside = path.with_name(f"{STATE_FILE}.corrupt-{int(time.time())}")
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        log.error("model_store_state_corrupt", path=str(path), why=why, kept_as=str(aside))
        return StoreState()

    def _write(self, state: StoreState) -> None:
        data = json.dumps(state.to_json(), indent=1, sort_keys=True).encode("utf-8")
        tmp = self.dir / f"{_STATE_TMP_PREFIX}{os.getpid()}-{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / STATE_FILE)
        _fsync_dir(self.dir)
        self._state = state
