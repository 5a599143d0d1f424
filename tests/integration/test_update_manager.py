"""Model deploys through the UpdateManager: real models, real ORT, a stand-in pipeline."""

from __future__ import annotations

import random

import pytest

from agent.settings import ModelsSettings
from agent.update import codes
from agent.update.manager import State
from agent.update.store import ModelStore
from agent.update.transfer import PART_PREFIX
from tests.brokers import wait_until
from tests.update import models
from tests.update.harness import Replies, chunks_of, file_server, running
from tests.update.signing import deploy_body, manifest_of, new_key

pytestmark = pytest.mark.timeout(60)
CHUNK = 256 * 1024


@pytest.fixture(scope="module")
def base():
    return models.base_model()


@pytest.fixture(scope="module")
def built(tmp_path_factory, base):
    d = tmp_path_factory.mktemp("manager-models")
    other = models.other_model(base)
    return {
        "v2": other or models.variant(base, d / "v2.onnx"),
        "nan": models.nan_model(base, d / "nan.onnx"),
        "slow": models.slow_model(base, d / "slow.onnx", extra_ms=models.slow_extra_ms(base)),
        "external": models.external_data_model(base, d / "ext.onnx"),
        "pickle": models.pickle_file(d / "m.pkl"),
        "pt": models.torch_pt_file(d / "m.pt"),
    }


@pytest.fixture(scope="module")
def keys():
    return new_key()


def _settings(b64: str, **kw) -> ModelsSettings:
    args = {"trusted_keys": [b64], "health_frames": 3, "transfer_timeout_s": 20.0}
    args.update(kw)
    return ModelsSettings(**args)


def _chunk_source(path, size=CHUNK, tid="t-1"):
    n = len(chunks_of(path, size))
    return {"transfer_id": tid, "chunks": n, "chunk_size": size}


def _push(manager, path, tid="t-1", size=CHUNK, order=None, skip=()):
    parts = chunks_of(path, size)
    for i in order if order is not None else range(len(parts)):
        if i not in skip:
            manager.on_chunk(tid, i, parts[i])


def _no_temp_files(state_dir):
    return not any(p.name.startswith(PART_PREFIX) for p in (state_dir / "models").iterdir())


def test_chunked_deploy_commits(tmp_path, base, built, keys):
    """Chunks out of order, duplicated and one before the command: validated, swapped, committed."""
    key, _, b64 = keys
    path = built["v2"]
    manifest = manifest_of(path, version=2)
    with running(tmp_path, base, _settings(b64)) as (manager, pipe):
        parts = chunks_of(path, CHUNK)
        order = [*list(range(1, len(parts))), 1, 2]
        random.Random(3).shuffle(order)
        manager.on_chunk("t-1", 0, parts[0])  # overtook its deploy command
        replies = Replies()
        manager.deploy(deploy_body(manifest, key, _chunk_source(path)), replies)
        _push(manager, path, order=order)
        ok, result, code, msg = replies.wait()
        assert ok, (code, msg)
        assert result["state"] == "committed" and result["model"]["version"] == 2
        assert result["health"]["frames"] == 3 and result["health"]["errors"] == 0
        assert [r.version for _, r in pipe.swaps] == [2]
        assert manager.state is State.COMMITTED
        assert manager.current.sha256 == manifest["sha256"] and manager.current.committed
    store = ModelStore(tmp_path)
    assert store.active.committed and store.active.sha256 == manifest["sha256"]
    assert store.previous.version == 1 and _no_temp_files(tmp_path)


def test_url_deploy_then_rollback_commands(tmp_path, base, built, keys):
    """Deploy by URL commits; model/rollback goes back and forth; no_previous without one."""
    key, _, b64 = keys
    path = built["v2"]
    with (
        file_server({"/m.onnx": path}) as url,
        running(tmp_path, base, _settings(b64)) as (manager, pipe),
    ):
        r0 = Replies()
        manager.rollback(r0)
        assert r0.wait()[2] == codes.NO_PREVIOUS
        r1 = Replies()
        body = deploy_body(manifest_of(path, version=2), key, {"url": f"{url}/m.onnx"})
        manager.deploy(body, r1)
        assert r1.wait()[0], r1.got
        r2 = Replies()
        manager.rollback(r2)
        ok, result, _, _ = r2.wait()
        assert ok and result["model"]["version"] == 1 and result["previous"]["version"] == 2
        assert pipe.swaps[-1][0] == base.resolve()
        r3 = Replies()
        manager.rollback(r3)
        assert r3.wait()[1]["model"]["version"] == 2
        assert [r.version for _, r in pipe.swaps] == [2, 1, 2]


CASES = ["bad_sig", "untrusted", "unsigned", "old_version", "size", "sha", "pickle", "pt",
         "external", "contract", "truncated", "too_large", "nan"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_rejected_deploys_leave_the_model_serving(tmp_path, base, built, keys, case):
    """Each bad deploy gets its error code; nothing is swapped, stored or left behind."""
    key, _, b64 = keys
    other_key = new_key()[0]
    path = {"pickle": built["pickle"], "pt": built["pt"], "external": built["external"],
            "nan": built["nan"]}.get(case, built["v2"])  # fmt: skip
    manifest = manifest_of(path, version=2)
    settings = {"transfer_timeout_s": 1.0} if case == "truncated" else {}
    skip: tuple[int, ...] = ()
    signer = key
    expect = {
        "bad_sig": codes.BAD_SIGNATURE, "untrusted": codes.BAD_SIGNATURE,
        "unsigned": codes.UNSIGNED_NOT_ALLOWED, "old_version": codes.VERSION_NOT_NEWER,
        "size": codes.SIZE_MISMATCH, "sha": codes.SHA256_MISMATCH, "pickle": codes.NOT_ONNX,
        "pt": codes.NOT_ONNX, "external": codes.EXTERNAL_DATA,
        "contract": codes.CONTRACT_MISMATCH, "truncated": codes.TRANSFER_TIMEOUT,
        "too_large": codes.TOO_LARGE, "nan": codes.NON_FINITE_OUTPUT,
    }[case]  # fmt: skip
    body = deploy_body(manifest, signer, _chunk_source(path))
    if case == "bad_sig":
        body["manifest"] = {**manifest, "labels": ["person", "intruder"]}
    elif case == "untrusted":
        body = deploy_body(manifest, other_key, _chunk_source(path))
    elif case == "unsigned":
        body.pop("signature")
    elif case == "old_version":
        body = deploy_body({**manifest, "version": 1}, key, _chunk_source(path))
    elif case == "size":
        body = deploy_body({**manifest, "size": manifest["size"] - CHUNK}, key, _chunk_source(path))
    elif case == "sha":
        body = deploy_body({**manifest, "sha256": "0" * 64}, key, _chunk_source(path))
    elif case == "contract":
        labels = {**manifest, "labels": ["person", "car"]}
        body = deploy_body(labels, key, _chunk_source(path))
    elif case == "truncated":
        skip = (2,)
    elif case == "too_large":
        settings["max_bytes"] = manifest["size"] - 1
    with running(tmp_path, base, _settings(b64, **settings)) as (manager, pipe):
        replies = Replies()
        manager.deploy(body, replies)
        _push(manager, path, skip=skip)
        ok, _result, code, msg = replies.wait()
        assert (ok, code) == (False, expect), msg
        assert pipe.swaps == [] and manager.current.version == 1
        assert wait_until(lambda: manager.state is not State.RECEIVING, 5)
    assert ModelStore(tmp_path).active is None
    assert _no_temp_files(tmp_path)


def test_busy_while_a_deploy_runs(tmp_path, base, built, keys):
    """A second deploy or a rollback while one transfer waits for chunks is refused: busy."""
    key, _, b64 = keys
    path = built["v2"]
    with running(tmp_path, base, _settings(b64, transfer_timeout_s=0.5)) as (manager, _):
        first, second, third = Replies(), Replies(), Replies()
        manager.deploy(deploy_body(manifest_of(path), key, _chunk_source(path)), first)
        manager.deploy(deploy_body(manifest_of(path), key, _chunk_source(path, tid="t-2")), second)
        manager.rollback(third)
        assert second.wait()[2] == codes.BUSY and third.wait()[2] == codes.BUSY
        assert first.wait()[2] == codes.TRANSFER_TIMEOUT


def test_slow_model_is_rolled_back(tmp_path, base, built, keys):
    """A model several times slower than the running one is rolled back in the window."""
    key, _, b64 = keys
    path = built["slow"]
    with running(tmp_path, base, _settings(b64), real=True) as (manager, pipe):
        assert wait_until(lambda: pipe.frames.get(pipe.sha, 0) >= 8, 20)
        replies = Replies()
        manager.deploy(deploy_body(manifest_of(path), key, _chunk_source(path)), replies)
        _push(manager, path)
        ok, _, code, msg = replies.wait(40)
        assert (ok, code) == (False, codes.HEALTH_LATENCY), msg
        assert "rolled back to" in msg and "x the previous model" in msg
        assert "ms allowed: models.latency_budget" in msg
        assert [r.version for _, r in pipe.swaps] == [2, 1]
        assert manager.state is State.ROLLED_BACK and manager.current.version == 1
    assert ModelStore(tmp_path).active is None and _no_temp_files(tmp_path)


def test_inference_errors_roll_back(tmp_path, base, built, keys):
    """Inference errors of the new model in the health window roll it back at once."""
    key, _, b64 = keys
    path = built["v2"]
    manifest = manifest_of(path)
    with running(tmp_path, base, _settings(b64, health_frames=50)) as (manager, pipe):
        pipe.errors_for.add(manifest["sha256"])
        replies = Replies()
        manager.deploy(deploy_body(manifest, key, _chunk_source(path)), replies)
        _push(manager, path)
        ok, _, code, msg = replies.wait()
        assert (ok, code) == (False, codes.HEALTH_ERRORS) and "boom" in msg
        assert pipe.sha != manifest["sha256"]
    assert ModelStore(tmp_path).active is None


def test_health_timeout_and_swap_failure(tmp_path, base, built, keys):
    """No frames in the window: health_timeout; a failing swap: swap_failed, store restored."""
    key, _, b64 = keys
    path = built["v2"]
    with running(tmp_path, base, _settings(b64), health_timeout_s=0.5) as (manager, pipe):
        pipe.close()  # the camera is gone: no frame will come
        replies = Replies()
        manager.deploy(deploy_body(manifest_of(path), key, _chunk_source(path)), replies)
        _push(manager, path)
        assert replies.wait()[2] == codes.HEALTH_TIMEOUT
        pipe.fail_swap = True
        again = Replies()
        manager.deploy(deploy_body(manifest_of(path), key, _chunk_source(path)), again)
        _push(manager, path)
        ok, _, code, msg = again.wait()
        assert (ok, code) == (False, codes.SWAP_FAILED) and "provider exploded" in msg
    assert ModelStore(tmp_path).active is None


def test_restart_mid_window_is_judged_again(tmp_path, base, built, keys):
    """An uncommitted model found at start gets a health window and is committed after it."""
    _key, _, b64 = keys
    path = built["v2"]
    manifest = manifest_of(path)
    store = ModelStore(tmp_path)
    copy = store.tmp_dir / f"{PART_PREFIX}x"
    copy.write_bytes(path.read_bytes())
    store.stage(copy, manifest["sha256"], manifest, previous=None)
    with running(tmp_path, base, _settings(b64)) as (manager, pipe):
        assert pipe.sha == manifest["sha256"]
        assert wait_until(lambda: manager.state is State.COMMITTED, 10), manager.status()
    assert ModelStore(tmp_path).active.committed


def test_crash_loop_leftover_can_be_rolled_back_to_and_earns_commit(tmp_path, base, built, keys):
    """After a crash-loop fallback, model/rollback to the failed model runs a health window."""
    path = built["v2"]
    manifest = manifest_of(path)
    store = ModelStore(tmp_path)
    copy = store.tmp_dir / f"{PART_PREFIX}x"
    copy.write_bytes(path.read_bytes())
    store.stage(copy, manifest["sha256"], manifest, previous=None)
    settings = _settings(keys[2], crash_loop_starts=1)
    with running(tmp_path, base, settings) as (manager, pipe):
        assert manager.current.version == 1 and manager.previous.version == 2
        replies = Replies()
        manager.rollback(replies)
        ok, result, code, msg = replies.wait()
        assert ok, (code, msg)
        assert result["health"]["frames"] == 3 and pipe.sha == manifest["sha256"]
    assert ModelStore(tmp_path).active.committed
