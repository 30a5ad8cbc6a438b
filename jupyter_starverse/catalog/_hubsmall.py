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
import errno
import hashlib
import os
import queue
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

    # the loop thread hashes and checks; creating and writing the files (a create in one folder
    # costs more than the GET on loopback) happens on writer threads, off the network's path
    writes: queue.Queue[tuple[Get, bytes, Downloaded] | None] = queue.Queue(maxsize=_WRITE_QUEUE)
    write_failed: list[GetFailed] = []

    def write_one(get: Get, body: memoryview, got: Downloaded) -> None:
        name = get.key[0]
        try:
            fd = os.open(name, _STAGE_FLAGS, 0o444, dir_fd=dir_fd)
            try:
                while body:
                    body = body[os.write(fd, body) :]
            finally:
                os.close(fd)
        except OSError as e:
            write_failed.append(GetFailed(get, e))
            return
        with lock:
            digests[name] = got.sha256
            staged.append(name)

    def write() -> None:
        while (item := writes.get()) is not None:
            if not (write_failed or errors):  # else the batch stops: drain what is queued
                write_one(item[0], memoryview(item[1]), item[2])

    writers = [threading.Thread(target=write, name="starverse-write", daemon=True) for _ in range(_WRITERS)]

    def stop_writers() -> None:
        for w in writers:
            if w.is_alive():
                writes.put(None)
        for w in writers:
            if w.is_alive():
                w.join()

    def done(get: Get, body: memoryview, got: Downloaded) -> None:
        f = get.key[1]
        if f.lfs is None and got.extra["git"] != str(f.blob_id):
            raise ChecksumError(f"git blob id {got.extra['git']} does not match the listed {f.blob_id}")
        if writers:
            writes.put((get, bytes(body), got))  # body is valid only during this call
        else:
            write_one(get, body, got)
            if write_failed:
                raise write_failed[0]
        report[0] += 1
        report[1] += got.size
        now = time.monotonic()
        if report[0] >= _REPORT_EVERY or report[1] >= _REPORT_BYTES or now - reported[0] >= _REPORT_SECONDS:
            tracker.add_files(report[0], report[1])
            report[:], reported[0] = [0, 0], now

    def check() -> None:
        if write_failed:
            raise write_failed[0]
        if errors:
            raise errors[0]
        if lease is not None and lease.lost.is_set():
            raise LeaseLostError(str(storage))

    def run() -> None:
        try:
            gets = [Get(url(f), target(f), (name, f)) for name, f in todo]
            for w in writers:
                w.start()
            try:
                fetch_many(gets, headers=headers, connections=connections, done=done, check=check)
            finally:
                stop_writers()
            if write_failed:
                raise write_failed[0]
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

    def commit_staged(final: bool = False) -> None:
        """Every staged file so far durable, then moved into ``blobs/`` (the fence first).

        The last commit of a fresh pull (nothing in ``blobs/`` yet, nothing committed before)
        renames the staging folder itself onto the empty ``blobs/``: one rename, not one per file."""
        nonlocal committed
        with lock:
            batch = staged[committed:]
        if not batch:
            return
        sync_filesystem(staging)  # every byte durable before any name points at it
        if lease is not None and not lease.renew():
            raise LeaseLostError(str(storage))  # the fence: a holder that was taken over moves nothing in
        if final and committed == 0 and _swap_onto_empty(staging, blobs, len(batch)):
            committed += len(batch)
            return
        for name in batch:
            os.replace(name, name, src_dir_fd=dir_fd, dst_dir_fd=blobs_fd)
        committed += len(batch)

    snapshot = storage / "snapshots" / commit
    staged_snapshot = top / f"{holder}.snapshot"  # the links, made while the files come; moved in at the end

    def make_links() -> None:
        try:
            _stage_links(files, staged_snapshot, stop=lambda: bool(errors))
        except BaseException as e:
            errors.append(e)

    linker: threading.Thread | None = None
    try:
        worker = threading.Thread(target=run, name="starverse-small", daemon=True)  # one loop, N connections
        worker.start()
        if _LINK_WHILE_FETCHING:
            linker = threading.Thread(target=make_links, name="starverse-links", daemon=True)  # syscalls: no GIL
            linker.start()
        while not finished.wait(COMMIT_SECONDS):
            commit_staged()  # while the batch runs: a killed pull keeps what was committed
        worker.join()
        if linker is not None:
            linker.join()
        else:
            make_links()
        if errors and not isinstance(errors[0], LeaseLostError):
            with contextlib.suppress(OSError, LeaseLostError):
                commit_staged()  # a failed pull keeps what it verified; the next one fetches the rest
                sync_filesystem(blobs)
        if errors:
            raise errors[0]
        commit_staged(final=True)
        _move_tree(staged_snapshot, snapshot)  # one rename on a fresh pull; merged into an existing snapshot
        sync_filesystem(blobs)  # the renames and links durable before the manifest names them
    except BaseException as e:
        errors.append(e)  # the workers still running stop at their next file
        if linker is not None:
            linker.join()  # it stops at its next link: nothing made in the folder once it is gone
        discard(staging)
        discard(staged_snapshot)
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


def _stage_links(files: Sequence[Any], root: Path, *, stop: Callable[[], bool]) -> None:
    """``root/<path>`` -> ``../../blobs/<name>`` for every file: the snapshot's links, relative as
    huggingface_hub writes them (counted from ``snapshots/<commit>/``), before it is moved there."""
    made: set[str] = set()
    top = str(root)
    make_dirs(root)
    for f in files:  # paths checked against the store when the listing came (pull_model)
        parent, _, _ = f.path.rpartition("/")
        if stop():
            return  # the pull failed: its staging folder goes
        if parent not in made:
            make_dirs(root / parent if parent else root)
            made.add(parent)
        # what os.path.relpath gives from snapshots/<commit>/<parent>/ to blobs/<name>, without its cost
        up = "../" * (f.path.count("/") + 2)
        with contextlib.suppress(FileExistsError):  # the same path twice in a listing: one link
            os.symlink(f"{up}blobs/{_blob_name(f)}", f"{top}/{f.path}")  # noqa: PTH211 (no Path per file)


def _swap_onto_empty(staging: Path, blobs: Path, count: int) -> bool:
    """``staging`` renamed onto ``blobs`` when that is an empty folder and ``staging`` holds just
    the ``count`` staged files; False (nothing moved) otherwise."""
    with os.scandir(staging) as it:
        if sum(1 for _ in it) != count:
            return False
    try:
        staging.rename(blobs)  # rename(2) replaces an empty folder, atomically; refuses one with files
    except OSError as err:
        if err.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EBUSY):
            return False
        raise
    return True


def _move_tree(src: Path, dst: Path) -> None:
    """``src`` into ``dst``: one rename where ``dst`` is not there yet, else folder by folder,
    each link replacing what is at its path (as :func:`_link` does)."""
    try:
        src.rename(dst)  # a fresh snapshot: every link in one step
        return
    except FileNotFoundError:
        if not src.exists():
            return
        make_dirs(dst.parent)
        src.rename(dst)
        return
    except OSError as err:
        if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
    with os.scandir(src) as it:
        entries = list(it)
    for e in entries:
        target = os.path.join(dst, e.name)  # noqa: PTH118 (no Path per entry)
        if e.is_dir(follow_symlinks=False) and os.path.isdir(target) and not os.path.islink(target):  # noqa: PTH112, PTH114
            _move_tree(Path(e.path), Path(target))
        else:
            Path(e.path).replace(target)
    with contextlib.suppress(OSError):
        src.rmdir()


_LINK_WHILE_FETCHING = True  # the snapshot's links made on their own thread while the files come
_WRITERS = 2  # threads creating the staged files (the syscalls run without the GIL)
_WRITE_QUEUE = 1024  # verified bodies waiting for a writer: the loop waits beyond this
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
