"""One download engine for every file the store pulls.

A file of known size at least :data:`SPLIT_AT` bytes is cut into :data:`PIECE`-sized ranges
fetched over ``connections`` connections at once and written in place (``os.pwrite``) into
``.NAME.part``; smaller files (and origins without ``Range``) come as one stream each, and
callers fetch several of them at once. Bytes are hashed (sha256, plus any extra digest the
caller wants) *in file order while they arrive*, from the buffers that were just written, so
the file is never read a second time; a flusher thread ``fdatasync``s the part file while
data arrives, so the final sync at the end has little left to do.

A split file starts on two connections and opens the rest once their rate is measured; the
rest are closed again when they add less than a quarter (an origin that is fast over one link,
not limited per connection, gains nothing from more and only loses CPU to them).

Resume: every ~:data:`SYNC_EVERY` bytes, after a sync, the pieces that are on disk are recorded
in a small sidecar (``.NAME.ranges``: size, ETag, piece size, completed pieces). A pull killed
with ``kill -9`` continues from those pieces (they are re-read once to hash them); an origin
whose ETag or size changed restarts the file from zero, with a note in the log.

Each piece is retried with exponential backoff on 5xx/429, resets, timeouts and short bodies,
from the byte where it stopped. 401/403/404 are not retried: the caller turns them into a
clear error naming the file.

This module is the engine's front: :func:`download`, :func:`fetch_small`, :func:`copy_local`
and the single-stream path. The parts live beside it: :mod:`._origins` (HTTP / fsspec origins
and the errors), :mod:`._ranged` (a split file and its connection ramp), :mod:`._journal`
(targets, digests, the resume sidecar, the final check) and :mod:`._tuning` (sizes and times).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from . import _tuning
from ._journal import Downloaded, Target, _check, _Digests, _hex, _read_sidecar, part_paths
from ._lease import Lease
from ._origins import (
    Aborted,
    AccessError,
    ChecksumError,
    FsspecOrigin,
    HttpOrigin,
    LeaseLost,
    Origin,
    OriginChangedError,
    Response,
    RetryableError,
    ShortBodyError,
    TransferError,
    _same_short,
)
from ._perms import make_dirs
from ._progress import ProgressTracker
from ._ranged import _Ranged
from ._tuning import BACKOFF, BACKOFF_MAX, CHUNK, PIECE, RETRIES, SPLIT_AT, TIMEOUT

__all__ = [
    "BACKOFF",
    "BACKOFF_MAX",
    "CHUNK",
    "PIECE",
    "RETRIES",
    "SPLIT_AT",
    "TIMEOUT",
    "Aborted",
    "AccessError",
    "ChecksumError",
    "Downloaded",
    "FsspecOrigin",
    "HttpOrigin",
    "LeaseLost",
    "Origin",
    "OriginChangedError",
    "Response",
    "RetryableError",
    "ShortBodyError",
    "Target",
    "TransferError",
    "copy_local",
    "download",
    "fetch_small",
    "part_paths",
    "share_connections",
]

log = logging.getLogger(__name__)


def share_connections(connections: int, files: int) -> tuple[int, int]:
    """``(files at once, connections per file)`` for ``files`` large files.

    Up to :data:`FILES_AT_ONCE` files at once, each with ``connections`` (as ``aria2c -x N``
    with ``-j``): files one after the other leave connections idle while each file's last
    pieces arrive and hash on one core. Each file's ramp keeps its extra connections only
    while they add to the host's rate, so a fast origin ends with 2 per file.
    """
    return max(1, min(files, _tuning.FILES_AT_ONCE)), connections


def download(
    origin: Origin,
    dest: Path,
    target: Target,
    *,
    connections: int = 8,
    tracker: ProgressTracker | None = None,
    leases: Sequence[Lease] = (),
    sync: bool = True,
) -> Downloaded:
    """Fetch ``origin`` into ``dest``'s part file, verify it and leave it there (fsync'ed).

    ``sync=False`` skips the fsync of a file that comes in one stream: for callers that sync
    the whole file system once after a batch of small files (:func:`sync_filesystem`).

    The caller renames the part file (``part_paths(dest)[0]``) into place after its own
    checks. Raises :class:`TransferError` subclasses; an interrupted download keeps its part
    file and sidecar for the next call.
    """
    part, sidecar = part_paths(dest)
    make_dirs(dest.parent)
    restarted = False
    while True:
        try:
            return _download_once(origin, part, sidecar, target, connections, tracker, leases, sync)
        except OriginChangedError as e:
            part.unlink(missing_ok=True)
            sidecar.unlink(missing_ok=True)
            if restarted:
                raise
            restarted = True
            log.warning("%s: %s; starting this file again from zero", target.name, e)
            if tracker is not None:
                tracker.note(f"{target.name}: the origin changed ({e}); restarted the file")


def _download_once(
    origin: Origin,
    part: Path,
    sidecar: Path,
    target: Target,
    connections: int,
    tracker: ProgressTracker | None,
    leases: Sequence[Lease],
    sync: bool = True,
) -> Downloaded:
    state = _read_sidecar(sidecar) if part.exists() else None
    if state is not None and (
        state["piece"] != _tuning.PIECE or (target.size is not None and state["size"] != target.size)
    ):
        state = None
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(part, flags, 0o644)
    try:
        if state is None:
            os.ftruncate(fd, 0)
            sidecar.unlink(missing_ok=True)
        digests = _Digests(target)
        done_before: set[int] = set(state["done"]) if state is not None else set()
        size = target.size
        if size is not None and size >= _tuning.SPLIT_AT:
            start = next((i * _tuning.PIECE for i in range(-(-size // _tuning.PIECE)) if i not in done_before), size)
            resp = _open_first(origin, start, min(size, start + _tuning.PIECE) if start < size else None)
            if resp is None or not resp.ranged:
                if resp is not None and resp.size is not None and resp.size != size:
                    resp.close()
                    raise OriginChangedError(f"the origin has {resp.size} bytes, the listing said {size}")
                os.ftruncate(fd, 0)
                sidecar.unlink(missing_ok=True)
                return _single(origin, fd, target, digests, tracker, leases, resp, True)  # no Range: one stream
            if resp.size is not None and resp.size != size:
                resp.close()
                raise OriginChangedError(f"the origin has {resp.size} bytes, the listing said {size}")
            etag = resp.etag
            if state is not None and state.get("etag") != etag:
                resp.close()
                raise OriginChangedError(f"ETag {state.get('etag')} -> {etag} since the last try")
            os.ftruncate(fd, size)
            resumed = sum(
                min(size, (i + 1) * _tuning.PIECE) - i * _tuning.PIECE for i in done_before if i * _tuning.PIECE < size
            )
            if tracker is not None and resumed:
                tracker.advance(resumed)
            first = (start // _tuning.PIECE, resp)
            args = (origin, fd, size, etag, done_before, sidecar, digests, connections, tracker, leases, first)
            _Ranged(*args).run()
            _tuning._datasync(fd)
            out = Downloaded(size, digests.sha.hexdigest(), etag, _hex(digests), resumed)
        else:
            out = _single(origin, fd, target, digests, tracker, leases, None, sync)
    finally:
        os.close(fd)
    _check(target, out)
    sidecar.unlink(missing_ok=True)
    return out


def _open_first(origin: Origin, start: int, end: int | None) -> Response | None:
    if end is None:
        return None  # nothing missing: every piece is on disk already
    tries = 0
    while True:
        try:
            return origin.stream(start, end)
        except RetryableError:
            tries += 1
            if tries > _tuning.RETRIES:
                raise
            time.sleep(min(_tuning.BACKOFF_MAX, _tuning.BACKOFF * 2 ** (tries - 1)))


def _single(
    origin: Origin,
    fd: int,
    target: Target,
    digests: _Digests,
    tracker: ProgressTracker | None,
    leases: Sequence[Lease],
    resp: Response | None,
    sync: bool,
) -> Downloaded:
    """One stream from byte 0 (small files, unknown sizes, origins without Range); retried whole."""
    tries = 0
    short: int | None = None
    while True:
        done = 0
        try:
            if resp is None:
                resp = origin.stream(0, None)
            etag = resp.etag
            unsynced = 0
            buf = memoryview(bytearray(_tuning.CHUNK))
            while True:
                if any(lease.lost.is_set() for lease in leases):
                    raise LeaseLost()
                n = resp.readinto(buf)
                if not n:
                    break
                os.pwrite(fd, buf[:n], done)
                digests.update(buf[:n])
                done += n
                unsynced += n
                if tracker is not None:
                    tracker.advance(n)
                if unsynced >= _tuning.SYNC_EVERY:
                    _tuning._datasync(fd)
                    unsynced = 0
            os.ftruncate(fd, done)
            if resp.size is not None and not resp.ranged and done != resp.size:
                raise ShortBodyError(origin.label, done, resp.size)
            if sync:
                _tuning._datasync(fd)
            return Downloaded(done, digests.sha.hexdigest(), etag, _hex(digests))
        except RetryableError as e:
            short = _same_short(e, short)
            tries += 1
            if tries > _tuning.RETRIES:
                raise
            if tracker is not None and done:
                tracker.advance(-done)
            digests.reset()
            time.sleep(min(_tuning.BACKOFF_MAX, _tuning.BACKOFF * 2 ** (tries - 1)))
        finally:
            if resp is not None:
                resp.close()
                resp = None


def fetch_small(origin: Origin, target: Target) -> tuple[memoryview, Downloaded]:
    """A small file whole into one buffer (one GET on this thread's kept-alive connection), hashed from it.

    For batches of small files (:mod:`._models`, :mod:`._localbatch`): nothing is written here, so
    the caller writes the buffer where its batch stages and syncs the batch once. Retried whole on
    5xx/429, resets and short bodies, as :func:`download`; the size and sha256 are checked against
    ``target`` (:class:`ChecksumError`, :class:`OriginChangedError`).
    """
    tries = 0
    short: int | None = None
    want = (target.size + 1) if target.size is not None else _tuning.CHUNK  # +1: a longer body shows at once
    while True:
        resp: Response | None = None
        try:
            resp = origin.stream(0, None)
            buf = bytearray(want if resp.size is None else max(want, resp.size + 1))
            view = memoryview(buf)
            done = 0
            while True:
                if done == len(buf):
                    buf.extend(bytes(len(buf)))  # an unannounced size: grow
                    view = memoryview(buf)
                n = resp.readinto(view[done:])
                if not n:
                    break
                done += n
            if resp.size is not None and not resp.ranged and done != resp.size:
                raise ShortBodyError(origin.label, done, resp.size)
            data = view[:done]
            digests = _Digests(target)
            digests.update(data)
            out = Downloaded(done, digests.sha.hexdigest(), resp.etag, _hex(digests))
            _check(target, out)
            return data, out
        except RetryableError as e:
            short = _same_short(e, short)
            tries += 1
            if tries > _tuning.RETRIES:
                raise
            time.sleep(min(_tuning.BACKOFF_MAX, _tuning.BACKOFF * 2 ** (tries - 1)))
        finally:
            if resp is not None:
                resp.close()


# -- local and network-mounted sources ---------------------------------------------------------------
_ZERO = bytes(_tuning.CHUNK * 8)


def copy_local(
    src: str,
    dest: Path,
    target: Target,
    *,
    tracker: ProgressTracker | None = None,
    leases: Sequence[Lease] = (),
    sync: bool = True,
) -> Downloaded:
    """Copy a local or NFS file into ``dest``'s part file with ``copy_file_range`` (no user-space copy).

    Each block is read once to hash it (from the page cache the copy fills, or the NFS
    server's); all-zero blocks are left as holes. Falls back to ``pwrite`` where the kernel
    or file system cannot copy between the two files.
    """
    part, sidecar = part_paths(dest)
    make_dirs(dest.parent)
    sidecar.unlink(missing_ok=True)
    digests = _Digests(target)
    step = len(_ZERO)
    can_copy = hasattr(os, "copy_file_range")
    sfd = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        dfd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            pos = 0
            while True:
                if any(lease.lost.is_set() for lease in leases):
                    raise LeaseLost()
                data = os.pread(sfd, step, pos)
                if not data:
                    break
                n = len(data)
                digests.update(data)
                if not (data == _ZERO if n == step else data == bytes(n)):
                    copied = 0
                    if can_copy:
                        try:
                            copied = _copy_range(sfd, dfd, n, pos)
                        except OSError:
                            can_copy = False
                            copied = 0
                    if copied < n:
                        os.pwrite(dfd, memoryview(data)[copied:], pos + copied)
                pos += n
                if tracker is not None:
                    tracker.advance(n)
            os.ftruncate(dfd, pos)  # trailing holes
            if sync:
                _tuning._datasync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    out = Downloaded(pos, digests.sha.hexdigest(), None, _hex(digests))
    _check(target, out)
    return out


def boot_id() -> str | None:
    """This boot of this host (Linux): page-cache contents written before a kill -9 survive within it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f"{socket.gethostname()}/{f.read().strip()}"
    except OSError:
        return None


def sync_filesystem(path: Path) -> None:
    """Make everything written to ``path``'s file system durable (``syncfs``; ``sync`` where missing)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if getattr(libc, "syncfs", None) is not None and libc.syncfs(fd) == 0:
                return
        except OSError:
            pass
        os.sync()
    finally:
        os.close(fd)


def _copy_range(sfd: int, dfd: int, n: int, pos: int) -> int:
    copied = 0
    while copied < n:
        got = os.copy_file_range(sfd, dfd, n - copied, pos + copied, pos + copied)
        if got == 0:
            break
        copied += got
    return copied
