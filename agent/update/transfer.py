"""Model transfers into a temp file in the state dir: by URL, or by chunks over MQTT.

Neither keeps the model in memory: a download streams in blocks with the size cap enforced
as bytes arrive and the sha256 computed on the fly; chunks are written at their offset as
they come (any order, duplicates ignored). Temp files start with ``.part-`` and are
deleted on every failure; one left by a crash is never mistaken for a model (the store
only adopts files it renamed itself).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from agent.errors import VerifyError
from agent.log import get_logger
from agent.update import codes

log = get_logger("update.transfer")

PART_PREFIX = ".part-"
BLOCK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Received:
    """A complete transfer: the temp file, its size and sha256."""

    path: Path
    size: int
    sha256: str
    seconds: float


def store_error(where: Path, e: OSError) -> VerifyError:
    """A write into the state dir that failed (a full or read-only disk): persist_failed,
    saying how much room there was, never a crash."""
    try:
        free = f"{shutil.disk_usage(where).free} B free"
    except OSError:
        free = "free space unknown"
    why = e.strerror or str(e)
    return VerifyError(
        codes.PERSIST_FAILED, f"cannot store the model in {where}: {why} ({free}); free space there"
    )


class _DiskSink:
    """The temp file of a download: a failed write is the disk's fault (persist_failed),
    not the connection's."""

    def __init__(self, f: IO[bytes], where: Path) -> None:
        self._f, self._where = f, where

    def write(self, data: bytes) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            raise store_error(self._where, e) from e

    def flush(self) -> None:
        try:
            self._f.flush()
        except OSError as e:
            raise store_error(self._where, e) from e


def new_part_file(tmp_dir: Path) -> tuple[int, Path]:
    """An exclusive, owner-only temp file in ``tmp_dir``: (fd, path)."""
    try:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=PART_PREFIX, suffix=".onnx", dir=tmp_dir)
    except OSError as e:
        raise store_error(tmp_dir, e) from e
    return fd, Path(name)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("temp_cleanup_failed", path=str(path), error=str(e))


# -- by URL ------------------------------------------------------------------------------------
class _HttpOnlyRedirect(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to http(s): never to file:, ftp: or data: URLs."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"redirect to {newurl!r}", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(ssl_context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    # Built by hand: build_opener() would add the file:, ftp: and data: handlers.
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(context=ssl_context or ssl.create_default_context()),
        urllib.request.HTTPDefaultErrorHandler(),
        _HttpOnlyRedirect(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def _over(received: int, max_bytes: int, expected: int | None) -> VerifyError | None:
    if received > max_bytes:
        return VerifyError(
            codes.TOO_LARGE, f"download passed models.max_bytes ({max_bytes}) and was stopped"
        )
    if expected is not None and received > expected:
        return VerifyError(
            codes.SIZE_MISMATCH,
            f"download is longer than the manifest size ({expected} bytes) and was stopped",
        )
    return None


def download(
    url: str,
    tmp_dir: Path,
    *,
    max_bytes: int,
    expected_size: int | None = None,
    timeout_s: float = 30.0,
    deadline: float | None = None,
    ssl_context: ssl.SSLContext | None = None,
    cancel: threading.Event | None = None,
) -> Received:
    """Stream ``url`` (http/https, TLS verified) into a temp file in ``tmp_dir``.

    ``timeout_s`` bounds the connect and every read; ``deadline`` (``time.monotonic()``)
    bounds the whole transfer. Raises VerifyError: download_failed, too_large,
    size_mismatch, transfer_timeout, transfer_incomplete; the temp file is then removed.
    """
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise VerifyError(codes.BAD_SOURCE, f"URL scheme {scheme!r} is not http or https")
    t0 = time.monotonic()
    fd, path = new_part_file(tmp_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            size, digest = _stream(
                url,
                _DiskSink(f, tmp_dir),
                max_bytes,
                expected_size,
                timeout_s,
                deadline,
                ssl_context,
                cancel,
            )
    except OSError as e:  # the buffered tail, written at close, did not fit
        _unlink(path)
        raise store_error(tmp_dir, e) from e
    except BaseException:
        _unlink(path)
        raise
    return Received(path, size, digest, time.monotonic() - t0)


def _stream(
    url: str,
    out: _DiskSink,
    max_bytes: int,
    expected: int | None,
    timeout_s: float,
    deadline: float | None,
    ssl_context: ssl.SSLContext | None,
    cancel: threading.Event | None,
) -> tuple[int, str]:
    host = urllib.parse.urlsplit(url).netloc
    # The scheme is checked by download() and the opener has no file:/ftp: handlers.
    request = urllib.request.Request(url, headers={"Accept-Encoding": "identity"})  # noqa: S310
    progress = _Progress()
    try:
        with _opener(ssl_context).open(request, timeout=timeout_s) as resp:
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit():
                err = _over(int(length), max_bytes, expected)
                if err is not None:
                    raise VerifyError(err.code, f"Content-Length {length}: {err}")
            _copy(resp, out, progress, max_bytes, expected, deadline, cancel)
            if length is not None and length.isdigit() and progress.received != int(length):
                raise VerifyError(
                    codes.TRANSFER_INCOMPLETE,
                    f"{host} closed the connection after {progress.received} of {length} bytes",
                )
    except VerifyError:
        raise
    except Exception as e:
        raise _translate(e, host, progress.received, timeout_s) from e
    out.flush()
    return progress.received, progress.hash.hexdigest()


class _Progress:
    def __init__(self) -> None:
        self.received = 0
        self.hash = hashlib.sha256()


def _copy(
    resp: Any,
    out: _DiskSink,
    progress: _Progress,
    max_bytes: int,
    expected: int | None,
    deadline: float | None,
    cancel: threading.Event | None,
) -> None:
    while True:
        if cancel is not None and cancel.is_set():
            raise VerifyError(codes.SHUTTING_DOWN, "download cancelled: the agent is stopping")
        if deadline is not None and time.monotonic() > deadline:
            raise VerifyError(
                codes.TRANSFER_TIMEOUT,
                f"download not finished in time ({progress.received} bytes received)",
            )
        block = resp.read(BLOCK_BYTES)
        if not block:
            return
        progress.received += len(block)
        err = _over(progress.received, max_bytes, expected)
        if err is not None:
            raise err
        progress.hash.update(block)
        out.write(block)


def _translate(e: Exception, host: str, received: int, timeout_s: float) -> VerifyError:
    """A library error of a download as the protocol's error code."""
    if isinstance(e, urllib.error.HTTPError):
        e.close()  # it holds the response socket
        return VerifyError(codes.DOWNLOAD_FAILED, f"HTTP {e.code} {e.reason} from {host}")
    if isinstance(e, TimeoutError):
        return VerifyError(
            codes.TRANSFER_TIMEOUT, f"{host} sent nothing for {timeout_s:g} s ({received} bytes)"
        )
    if isinstance(e, http.client.IncompleteRead):
        return VerifyError(
            codes.TRANSFER_INCOMPLETE,
            f"{host} closed the connection early ({received + len(e.partial)} bytes received)",
        )
    if isinstance(e, urllib.error.URLError):
        reason = e.reason
        if isinstance(reason, TimeoutError):
            return VerifyError(
                codes.TRANSFER_TIMEOUT, f"connecting to {host} timed out after {timeout_s:g} s"
            )
        if isinstance(reason, ssl.SSLCertVerificationError):
            return VerifyError(
                codes.DOWNLOAD_FAILED, f"TLS verification of {host} failed: {reason.verify_message}"
            )
        return VerifyError(codes.DOWNLOAD_FAILED, f"cannot download from {host}: {reason}")
    if isinstance(e, (ConnectionError, http.client.HTTPException, ssl.SSLError, OSError)):
        return VerifyError(
            codes.TRANSFER_INCOMPLETE,
            f"connection to {host} failed after {received} bytes: {type(e).__name__}: {e}",
        )
    return VerifyError(codes.DOWNLOAD_FAILED, f"download from {host} failed: {e!r}")


# -- by chunks ---------------------------------------------------------------------------------
class ChunkAssembler:
    """Writes the chunks of one transfer into a temp file at ``index * chunk_size``.

    Any order; duplicates ignored; a chunk of the wrong size (every chunk but the last is
    exactly ``chunk_size``; with ``total_size`` the last is exact too) is rejected and
    counted. Memory: one byte per chunk. Not thread-safe: one writer thread.
    """

    def __init__(
        self,
        transfer_id: str,
        chunks: int,
        chunk_size: int,
        max_bytes: int,
        deadline: float,
        tmp_dir: Path,
        *,
        total_size: int | None = None,
    ) -> None:
        if chunks < 1 or chunk_size < 1:
            raise VerifyError(codes.BAD_SOURCE, "chunks and chunk_size must be positive")
        smallest = (chunks - 1) * chunk_size + 1
        if smallest > max_bytes or (total_size is not None and total_size > max_bytes):
            raise VerifyError(
                codes.TOO_LARGE,
                f"{chunks} chunks of {chunk_size} bytes exceed models.max_bytes ({max_bytes})",
            )
        if total_size is not None and not smallest <= total_size <= chunks * chunk_size:
            raise VerifyError(
                codes.SIZE_MISMATCH,
                f"{chunks} chunks of {chunk_size} bytes cannot hold {total_size} bytes",
            )
        self.transfer_id = transfer_id
        self.chunks = chunks
        self.chunk_size = chunk_size
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.total_size = total_size
        self._have = bytearray(chunks)
        self._count = 0
        self.received_bytes = 0
        self.rejected = 0
        self.duplicates = 0
        self._t0 = time.monotonic()
        self._fd: int | None
        self._fd, self.path = new_part_file(tmp_dir)

    @property
    def complete(self) -> bool:
        return self._count == self.chunks

    @property
    def count(self) -> int:
        return self._count

    def expired(self, now: float) -> bool:
        """Whether the deadline passed before the last chunk came (``time.monotonic()``)."""
        return not self.complete and now >= self.deadline

    def missing(self, limit: int = 10) -> list[int]:
        out: list[int] = []
        start = 0
        while len(out) < limit:
            i = self._have.find(0, start)
            if i < 0:
                break
            out.append(i)
            start = i + 1
        return out

    def _wanted_len(self, index: int) -> tuple[int, int]:
        """Allowed (min, max) length of chunk ``index``."""
        if index < self.chunks - 1:
            return self.chunk_size, self.chunk_size
        if self.total_size is not None:
            last = self.total_size - index * self.chunk_size
            return last, last
        return 1, self.chunk_size

    def add(self, index: int, data: bytes) -> bool:
        """Write chunk ``index``; False (and counted) if rejected or already written."""
        if self._fd is None:
            return False
        if not 0 <= index < self.chunks:
            self.rejected += 1
            log.warning("chunk_rejected", transfer=self.transfer_id, index=index, why="index")
            return False
        lo, hi = self._wanted_len(index)
        if not lo <= len(data) <= hi:
            self.rejected += 1
            log.warning(
                "chunk_rejected",
                transfer=self.transfer_id,
                index=index,
                why=f"size {len(data)}, expected {lo if lo == hi else f'{lo}..{hi}'}",
            )
            return False
        if self._have[index]:
            self.duplicates += 1
            return False
        if self.received_bytes + len(data) > self.max_bytes:  # only possible without total
            raise VerifyError(
                codes.TOO_LARGE, f"transfer passed models.max_bytes ({self.max_bytes})"
            )
        view = memoryview(data)
        offset = index * self.chunk_size
        while view:
            try:
                n = os.pwrite(self._fd, view, offset)
            except OSError as e:
                raise store_error(self.path.parent, e) from e
            view, offset = view[n:], offset + n
        self._have[index] = 1
        self._count += 1
        self.received_bytes += len(data)
        return True

    def timeout_error(self) -> VerifyError:
        missing = self.chunks - self._count
        return VerifyError(
            codes.TRANSFER_TIMEOUT,
            f"transfer {self.transfer_id}: {missing} of {self.chunks} chunks missing at the "
            f"deadline (first missing: {self.missing(5)})",
        )

    def finish(self) -> Received:
        """The assembled file (hashed now: chunks came out of order); the caller owns it."""
        if self._fd is None:
            raise VerifyError(codes.TRANSFER_INCOMPLETE, "transfer already closed")
        if not self.complete:
            raise VerifyError(
                codes.TRANSFER_INCOMPLETE,
                f"transfer {self.transfer_id}: {self.chunks - self._count} chunks missing "
                f"(first: {self.missing(5)})",
            )
        fd, self._fd = self._fd, None
        h = hashlib.sha256()
        try:
            size = os.fstat(fd).st_size
            os.lseek(fd, 0, os.SEEK_SET)
            while block := os.read(fd, 1 << 20):
                h.update(block)
        finally:
            os.close(fd)
        return Received(self.path, size, h.hexdigest(), time.monotonic() - self._t0)

    def abort(self) -> None:
        """Close and delete the temp file (safe to call twice, or after ``finish``)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            _unlink(self.path)


def discard(path: Path) -> None:
    """Delete a temp file a transfer produced (no error if it is gone)."""
    _unlink(path)
