"""Model store: atomic persistence, rollback, crash-loop fallback, SIGKILL at any point."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.errors import VerifyError
from agent.update import codes
from agent.update import store as store_mod
from agent.update.store import STATE_FILE, ModelRecord, ModelStore
from agent.update.transfer import PART_PREFIX

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]


def _file(tmp: Path, name: str, size: int = 4096) -> tuple[Path, str]:
    data = os.urandom(size)
    path = tmp / name
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def _manifest(version: int) -> dict:
    return {"name": "m", "version": version, "sha256": "0" * 64, "size": 1}


@pytest.fixture
def bundled(tmp_path) -> ModelRecord:
    path, sha = _file(tmp_path, "bundled.onnx")
    return ModelRecord.external(path, sha, "bundled", 1)


def _stage(store: ModelStore, version: int, previous: ModelRecord | None):
    src, sha = _file(store.tmp_dir, f"{PART_PREFIX}{version}")
    return store.stage(src, sha, _manifest(version), previous=previous)


def _names(store: ModelStore) -> set[str]:
    return {p.name for p in store.dir.iterdir()}


def test_stage_commit_rollback_and_gc(tmp_path, bundled):
    """Staging keeps one previous model, commit persists, old files are collected."""
    s = ModelStore(tmp_path / "state")
    assert s.active_path() is None
    v2 = _stage(s, 2, bundled)
    assert s.active == v2 and not v2.committed and s.previous == bundled
    assert s.active_path() == s.dir / f"{v2.sha256}.onnx"
    s.commit()
    v3 = _stage(s, 3, s.active)
    v4 = _stage(s, 4, s.commit())
    assert _names(s) == {STATE_FILE, v3.file, v4.file}  # v2 collected
    reloaded = ModelStore(tmp_path / "state")
    assert reloaded.active.version == 4 and reloaded.previous.version == 3
    back = reloaded.rollback()
    assert back.version == 3 and reloaded.previous.version == 4
    assert ModelStore(tmp_path / "state").active.version == 3


def test_rollback_without_previous(tmp_path):
    """Rolling back with nothing before is no_previous."""
    s = ModelStore(tmp_path)
    with pytest.raises(VerifyError) as e:
        s.rollback()
    assert e.value.code == codes.NO_PREVIOUS


def test_crash_between_temp_write_and_rename(tmp_path, bundled, monkeypatch):
    """Dying before the rename leaves the old state; the temp file is removed at start."""
    s = ModelStore(tmp_path / "state")
    v2 = _stage(s, 2, bundled)

    def die(*args):
        raise SystemExit("killed")

    monkeypatch.setattr(store_mod.os, "replace", die)
    with pytest.raises(SystemExit):
        _stage(s, 3, v2)
    monkeypatch.undo()
    assert any(n.startswith(PART_PREFIX) for n in _names(s))
    again = ModelStore(tmp_path / "state")
    assert again.active == v2
    assert _names(again) == {STATE_FILE, v2.file}


def test_crash_between_rename_and_state_write(tmp_path, bundled, monkeypatch):
    """Dying after the model rename but before the state write: old model, orphan collected."""
    s = ModelStore(tmp_path / "state")
    v2 = _stage(s, 2, bundled)

    def die(self, state):
        raise SystemExit("killed")

    monkeypatch.setattr(ModelStore, "_write", die)
    with pytest.raises(SystemExit):
        _stage(s, 3, v2)
    monkeypatch.undo()
    again = ModelStore(tmp_path / "state")
    assert again.active == v2 and _names(again) == {STATE_FILE, v2.file}
    assert again.record_start().path == again.dir / v2.file


def test_corrupt_active_file_falls_back(tmp_path, bundled):
    """An active file whose sha256 no longer matches is not loaded: previous is used."""
    s = ModelStore(tmp_path / "state")
    v2 = _stage(s, 2, bundled)
    v3 = _stage(s, 3, s.commit())
    path = s.dir / v3.file
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(data)
    decision = ModelStore(tmp_path / "state").record_start()
    assert decision.fell_back and decision.record.version == 2
    assert decision.path == s.dir / v2.file
    assert "sha256" in decision.reasons[0]


def test_missing_files_fall_back_to_bundled(tmp_path, bundled):
    """With active and previous files gone the agent starts on the configured model."""
    s = ModelStore(tmp_path / "state")
    v2 = _stage(s, 2, None)
    (s.dir / v2.file).unlink()
    decision = ModelStore(tmp_path / "state").record_start()
    assert decision.path is None and decision.fell_back


def test_crash_loop_falls_back_after_k_starts(tmp_path, bundled):
    """K starts of an uncommitted model fall back to the last committed one."""
    s = ModelStore(tmp_path / "state", crash_loop_starts=3)
    v2 = _stage(s, 2, bundled)
    v2 = s.commit()
    v3 = _stage(s, 3, v2)
    for starts in (1, 2):
        d = ModelStore(tmp_path / "state", crash_loop_starts=3).record_start()
        assert not d.fell_back and d.record.sha256 == v3.sha256 and d.needs_health_window
        assert json.loads((s.dir / STATE_FILE).read_text())["pending_starts"] == starts
    d = ModelStore(tmp_path / "state", crash_loop_starts=3).record_start()
    assert d.fell_back and d.record.version == 2 and "crash loop" in d.reasons[0]
    after = ModelStore(tmp_path / "state")
    assert after.active.version == 2 and after.previous.version == 3  # kept for a retry
    assert not after.record_start().fell_back


def test_commit_stops_the_crash_loop_count(tmp_path, bundled):
    """A committed model is never counted as crash-looping."""
    s = ModelStore(tmp_path / "state", crash_loop_starts=1)
    _stage(s, 2, bundled)
    s.commit()
    for _ in range(3):
        assert not ModelStore(tmp_path / "state", crash_loop_starts=1).record_start().fell_back


def test_crash_loop_to_bundled_model(tmp_path, bundled):
    """A crash loop of the first deployed model goes back to the bundled one."""
    s = ModelStore(tmp_path / "state", crash_loop_starts=1)
    _stage(s, 2, bundled)
    d = ModelStore(tmp_path / "state", crash_loop_starts=1).record_start()
    assert d.fell_back and d.record == bundled and d.path == Path(bundled.file)


def test_corrupt_state_file_is_set_aside(tmp_path):
    """An unreadable state.json means the bundled model; the file is kept for a human."""
    s = ModelStore(tmp_path)
    (s.dir / STATE_FILE).write_text("{not json")
    again = ModelStore(tmp_path)
    assert again.active is None
    assert any(n.startswith(f"{STATE_FILE}.corrupt-") for n in _names(again))


_CHILD = textwrap.dedent(
    """
    import hashlib, os, sys
    from pathlib import Path
    from agent.update.store import ModelStore, ModelRecord
    s = ModelStore(Path(sys.argv[1]))
    print("ready", flush=True)
    v = (s.active.version if s.active else 1)
    while True:
        v += 1
        data = os.urandom(256 * 1024 + v)
        tmp = s.tmp_dir / f".part-{v}"
        with open(tmp, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            f.write(data[len(data) // 2 :])
        rec = s.stage(tmp, hashlib.sha256(data).hexdigest(),
                      {"name": "m", "version": v}, previous=s.active)
        s.commit()
    """
)


def test_sigkill_at_random_points_never_leaves_a_partial_model(tmp_path):
    """SIGKILL during repeated stage/commit: every restart finds a complete model or none."""
    state = tmp_path / "state"
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(state)], stdout=subprocess.PIPE, env=env
        )
        assert child.stdout.readline().strip() == b"ready"
        try:
            child.wait(timeout=rng.uniform(0.02, 0.25))
        except subprocess.TimeoutExpired:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        child.stdout.close()
        s = ModelStore(state)
        assert not any(n.startswith((PART_PREFIX, ".state-")) for n in _names(s))
        decision = s.record_start()
        assert not decision.reasons, decision.reasons
        if decision.record is not None:
            assert s.check_file(decision.record) is None
            assert decision.path.stat().st_size == 256 * 1024 + decision.record.version
    assert ModelStore(state).active is not None  # the child got to deploy something
