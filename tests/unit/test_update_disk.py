"""A model transfer into a full state dir is persist_failed naming the disk, not a crash."""

from __future__ import annotations

import os
import time

import pytest

from agent.errors import VerifyError
from agent.update import codes
from agent.update.transfer import ChunkAssembler, download
from tests.tmpfs import tmpfs
from tests.update.harness import file_server

CHUNK = 256 * 1024
N = 8  # 2 MiB into a 1 MiB disk


@pytest.mark.timeout(30)
def test_chunks_into_a_full_disk_say_so(tmp_path):
    """Chunks that do not fit: persist_failed with 'No space left' and the free bytes."""
    with tmpfs(tmp_path / "state", "1m") as state:
        asm = ChunkAssembler(
            "t-1", N, CHUNK, max_bytes=1 << 24, deadline=time.monotonic() + 30,
            tmp_dir=state / "tmp", total_size=N * CHUNK,
        )  # fmt: skip

        def send_all() -> None:
            for i in range(N):
                asm.add(i, os.urandom(CHUNK))

        with pytest.raises(VerifyError) as err:
            send_all()
        asm.abort()
        assert err.value.code == codes.PERSIST_FAILED
        assert "No space left on device" in str(err.value) and "B free" in str(err.value)


@pytest.mark.timeout(30)
def test_download_into_a_full_disk_is_not_a_network_error(tmp_path):
    """A download the disk cannot hold is persist_failed, not transfer_incomplete, and
    leaves no temp file behind."""
    model = tmp_path / "big.onnx"
    model.write_bytes(os.urandom(N * CHUNK))
    with file_server({"/m.onnx": model}) as url, tmpfs(tmp_path / "state", "1m") as state:
        with pytest.raises(VerifyError) as err:
            download(f"{url}/m.onnx", state / "tmp", max_bytes=1 << 24)
        assert err.value.code == codes.PERSIST_FAILED, err.value
        assert "No space left on device" in str(err.value)
        assert list((state / "tmp").iterdir()) == []


@pytest.mark.timeout(30)
def test_a_state_dir_that_cannot_hold_a_temp_file(tmp_path):
    """No room for the temp file itself: persist_failed naming the directory."""
    with tmpfs(tmp_path / "state", "64k") as state:
        (state / "tmp").write_bytes(b"")  # a file where the temp directory should be
        with pytest.raises(VerifyError) as err:
            download("http://127.0.0.1:9/m.onnx", state / "tmp", max_bytes=1 << 20)
        assert err.value.code == codes.PERSIST_FAILED
        assert str(state / "tmp") in str(err.value)
