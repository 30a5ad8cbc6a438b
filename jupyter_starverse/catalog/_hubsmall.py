"""The small files of a Hub pull: one staged batch over N kept-alive connections.

Files up to :data:`BATCH_MAX` come whole into memory through :func:`._multiget.fetch_many`,
are checked against the listing (LFS sha256 or git blob id) from the buffer, written into a
staging folder of the repo's cache and made durable with one sync before any name points at
them; then they are renamed into ``blobs/`` and linked from ``snapshots/<commit>/`` at least
every :data:`COMMIT_SECONDS` (what a killed pull of a large collection keeps). Also the blob
naming, the one scan of ``blobs/`` and the relative snapshot links the model pull shares.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._download import ChecksumError, Downloaded, Target, sync_filesystem
from ._fetch import LeaseLostError, transfer
from ._lease import Lease
from ._localbatch import discard, discard_others
from ._multiget import Get, GetFailed, fetch_many
from ._names import safe_join
from ._perms import make_dirs, make_writable
from ._progress import ProgressTracker
from ._types import FileRecord


def _blob_name(f: Any) -> str:
    # huggingface_hub names a blob by the file's ETag: the LFS sha256, else the git blob id.
    return str(f.lfs.sha256) if f.lfs is not None else str(f.blob_id)


BATCH_MAX = 1024 * 1024  # files up to this size come whole into memory, in one staged batch (not resumed)
_REPORT_EVERY = 256  # small files between progress updates of one worker
_REPORT_BYTES = 4 * 1024 * 1024  # or this many bytes
_REPORT_SECONDS = 0.25  # or this long, whichever comes first
COMMIT_SECONDS = 5.0  # a batch's staged files are synced and moved into blobs/ at least this often


def _stage_small(
    files: Sequence[Any],
    storage: Path,
    commit: str,
    url: Callable[[Any], str],
    headers: dict[str, str],
    tracker: ProgressTracker,
    lease: Lease | None,
    connections: int,
    auth: str,
) -> dict[str, FileRecord]:
    """The small files of a Hub pull (up to :data:`BATCH_MAX` each) as one batch, at the speed of N parallel GETs.

    ``connections`` threads share the files, each on its own kept-alive connection (the
    engine's connection per thread and host); each file comes whole into one buffer, is
    hashed from it (sha256, and the git blob sha1 for a file that is not on LFS), checked
    against the tree listing and written into a staging folder (``<repo>/.staging/HOLDER``,
    created read-only), unsynced. What is staged is committed at the end, and every
    :data:`COMMIT_SECONDS` while the batch runs (so a killed pull of a large collection
    loses at most that much): one ``syncfs``, the lease's fence check, one rename per blob
    into ``blobs/``. At the end one link per path into ``snapshots/<commit>/`` and one more
    ``syncfs`` for those names. A crash leaves only the staging folder of uncommitted files,
    which the next holder of the repo's lease removes and redoes (never synced, so never
    trusted); committed blobs are found by the next pull like any other.
    """
    blobs = storage / "blobs"
    top = storage / ".staging"
    holder = f"{lease.fence:06d}-{lease.token[:16]}" if lease is not None else uuid.uuid4().hex
    staging = top / holder
    make_dirs(top)
    make_writable(top)
    discard_others(top, keep=holder)  # left by a crashed or superseded holder: redone
    make_dirs(staging)
    unique: dict[str, Any] = {}
    for f in files:
        unique.setdefault(_blob_name(f), f)  # the same bytes at two paths: one blob, fetched once
    todo = list(unique.items())
    digests: dict[str, str] = {}
    staged: list[str] = []  # blob names written and verified, in order; staged[:committed] are in blobs/
    committed = 0
    errors: list[BaseException] = []
    lock = threading.Lock()
    finished = threading.Event()
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    dir_fd = os.open(staging, flags)
    blobs_fd = os.open(blobs, flags)
    report = [0, 0]  # files and bytes not yet reported: progress goes in groups
    reported = [time.monotonic()]

    def target(f: Any) -> Target:
        size = int(f.size)
        sha = str(f.lfs.sha256) if f.lfs is not None else None
        extra = {} if f.lfs is not None else {"git": hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)}
        return Target(f.path, size, sha, extra)

    def done(get: Get, body: memoryview, got: Downloaded) -> None:
        name, f = get.key
        if f.lfs is None and got.extra["git"] != str(f.blob_id):
            raise ChecksumError(f"git blob id {got.extra['git']} does not match the listed {f.blob_id}")
        try:
            fd = os.open(name, _STAGE_FLAGS, 0o444, dir_fd=dir_fd)
            try:
                while body:
                    body = body[os.write(fd, body) :]
            finally:
                os.close(fd)
        except OSError as e:
            raise GetFailed(get, e) from e
        with lock:
            digests[name] = got.sha256
            staged.append(name)
        report[0] += 1
        report[1] += got.size
        now = time.monotonic()
        if report[0] >= _REPORT_EVERY or report[1] >= _REPORT_BYTES or now - reported[0] >= _REPORT_SECONDS:
            tracker.add_files(report[0], report[1])
            report[:], reported[0] = [0, 0], now

    def check() -> None:
        if errors:
            raise errors[0]
        if lease is not None and lease.lost.is_set():
            raise LeaseLostError(str(storage))

    def run() -> None:
        try:
            gets = [Get(url(f), target(f), (name, f)) for name, f in todo]
            fetch_many(gets, headers=headers, connections=connections, done=done, check=check)
        except GetFailed as e:
            name, f = e.get.key
            error = e.error

            def fail() -> Downloaded:
                raise error

            try:
                transfer(f.path, staging / name, e.get.target, fail, auth_hint=auth)  # its StarverseError
            except BaseException as translated:
                errors.append(translated)
        except BaseException as e:
            errors.append(e)
        finally:
            if report[0]:
                tracker.add_files(report[0], report[1])
            finished.set()

    def commit_staged() -> None:
        """Every staged file so far durable, then moved into ``blobs/`` (the fence first)."""
        nonlocal committed
        with lock:
            batch = staged[committed:]
        if not batch:
            return
        sync_filesystem(staging)  # every byte durable before any name points at it
        if lease is not None and not lease.renew():
            raise LeaseLostError(str(storage))  # the fence: a holder that was taken over moves nothing in
        for name in batch:
            os.replace(name, name, src_dir_fd=dir_fd, dst_dir_fd=blobs_fd)
        committed += len(batch)

    try:
        worker = threading.Thread(target=run, name="starverse-small", daemon=True)  # one loop, N connections
        worker.start()
        while not finished.wait(COMMIT_SECONDS):
            commit_staged()  # while the batch runs: a killed pull keeps what was committed
        worker.join()
        if errors and not isinstance(errors[0], LeaseLostError):
            with contextlib.suppress(OSError, LeaseLostError):
                commit_staged()  # a failed pull keeps what it verified; the next one fetches the rest
                sync_filesystem(blobs)
        if errors:
            raise errors[0]
        commit_staged()
        snapshot = storage / "snapshots" / commit
        made: set[str] = set()
        snap = str(snapshot)
        for f in files:  # paths checked against the store when the listing came (pull_model)
            parent, _, _ = f.path.rpartition("/")
            if parent not in made:
                make_dirs(snapshot / parent if parent else snapshot)
                made.add(parent)
            # what os.path.relpath gives from snapshots/<commit>/<parent>/ to blobs/<name>, without its cost
            up = "../" * (f.path.count("/") + 2)
            try:
                os.symlink(f"{up}blobs/{_blob_name(f)}", f"{snap}/{f.path}")  # noqa: PTH211 (no Path per file)
            except FileExistsError:
                _link(snapshot, f.path, blobs / _blob_name(f))
        sync_filesystem(blobs)  # the renames and links durable before the manifest names them
    except BaseException as e:
        errors.append(e)  # the workers still running stop at their next file
        discard(staging)
        raise
    finally:
        os.close(dir_fd)
        os.close(blobs_fd)
        with contextlib.suppress(OSError):
            staging.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
    out = {}
    for f in files:
        name = _blob_name(f)
        out[f.path] = FileRecord(f.path, int(f.size), digests[name], name)
    return out


_STAGE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def _blob_sizes(blobs: Path) -> dict[str, int]:
    """Name -> size of every regular file in ``blobs/`` (what a pull already has)."""
    out: dict[str, int] = {}
    try:
        with os.scandir(blobs) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    if e.is_file(follow_symlinks=False):
                        out[e.name] = e.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        pass
    return out


def _link(snapshot: Path, rel: str, blob: Path) -> None:
    """``snapshots/<commit>/<rel>`` -> the blob, relative (what huggingface_hub writes)."""
    link = safe_join(snapshot, rel)
    make_dirs(link.parent)
    target = os.path.relpath(blob, link.parent)
    try:
        if str(link.readlink()) == target:
            return
    except OSError:
        pass
    tmp = link.with_name(f".{link.name}.{uuid.uuid4().hex}.tmp")
    tmp.symlink_to(target)
    tmp.replace(link)
