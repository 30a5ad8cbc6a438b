"""A local or network-mounted folder pulled as one batch: staged, synced once, renamed once.

Pulling a folder file by file costs a file lease, a part file and a rename per file: for
10,000 small files that Python work is many times what ``cp -r`` takes. A first pull of a
folder source (nothing of the entry on disk yet) therefore goes here instead:

- the entry lease of the pull is the only lease (no per-file leases);
- every file is copied into a staging folder next to the entry's data folder; a small file
  is read once into a buffer, hashed from that buffer and written (created read-only); a
  large one is copied with ``copy_file_range`` and hashed block by block (:func:`copy_local`);
- the source file's size and mtime are checked against the listing after the copy;
- one ``syncfs`` for the whole batch, then one ``rename`` of the staging folder into place and
  an fsync of its parent: the entry's files become visible all at once, complete and durable.

A first pull of another source (HTTP, s3, ...) stages its small files the same way, fetched by
the download engine several at once, before its large files come one by one (each resumable
under its own lease); only the way a file is read differs.

Each holder of the entry lease stages into its own folder inside the staging folder
(``.NAME.staging/FENCE-TOKEN``): a holder whose lease was taken over (killed, paused, or one that
lost a race) never writes into the folder of the one that took it over, and the new holder only
discards the folders of earlier holders. A batch that fails while its lease is no longer its own
is a lost lease (the caller waits for the other's publication), not an error; the last step
before the rename into place is the lease's fence check.

A crash leaves only the staging folder, which the next pull removes and redoes. Lazy readers
(``catalog.fs``) wait while a live batch runs instead of copying a file a second time
(:meth:`Catalog.wait_for_batch`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from jupyter_starverse.errors import IntegrityError, NotFoundError

from ._download import CHUNK, SPLIT_AT, Target, copy_local, sync_filesystem
from ._fetch import LeaseLostError, SourceFile, publish_part, store_full, transfer
from ._lease import Lease
from ._perms import make_dirs, make_writable
from ._progress import ProgressTracker
from ._types import FileRecord

__all__ = ["copy_batch", "discard", "discard_others", "staging_dir"]

_FLAGS_IN = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_FLAGS_OUT = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_BLOCK = 64 * 1024  # larger small files are written block by block, zero blocks left as holes
_ZEROS = bytes(_BLOCK)
_REPORT_EVERY = 256  # files between progress updates of one worker


def staging_dir(data_dir: Path) -> Path:
    """Where a batch pull of ``data_dir`` stages its files (a hidden sibling)."""
    return data_dir.with_name(f".{data_dir.name}.staging")


def _changed(src: SourceFile, st: os.stat_result) -> bool:
    if src.size is not None and st.st_size != src.size:
        return True
    return src.etag is not None and src.etag.startswith("mtime:") and src.etag != f"mtime:{st.st_mtime}"


def _copy_small(src: SourceFile, dest: Path) -> FileRecord:
    sfd = os.open(src.path, _FLAGS_IN)
    try:
        chunks = []
        want = src.size + 1 if src.size is not None else CHUNK  # one read for the whole file
        while True:
            data = os.read(sfd, want)
            if data:
                chunks.append(data)
            if len(data) < want:
                break  # a short read of a regular file is its end: no extra read to see EOF
        after = os.fstat(sfd)
    finally:
        os.close(sfd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if _changed(src, after) or (src.size is not None and len(data) != src.size):
        raise IntegrityError(
            f"{src.rel}: the source changed during the pull ({src.size} bytes listed, {len(data)} read)",
            hint="wait until the source is no longer being written, then pull again",
        )
    sha = hashlib.sha256(data).hexdigest()
    dfd = os.open(dest, _FLAGS_OUT, 0o444)
    try:
        if len(data) <= _BLOCK:
            view = memoryview(data)
            while view:
                view = view[os.write(dfd, view) :]
        else:
            _write_sparse(dfd, data)
    finally:
        os.close(dfd)
    return FileRecord(src.rel, len(data), sha, src.etag)


def _write_sparse(fd: int, data: bytes) -> None:
    """Write ``data`` leaving all-zero blocks as holes (as :func:`copy_local` does)."""
    view = memoryview(data)
    for pos in range(0, len(data), _BLOCK):
        block = view[pos : pos + _BLOCK]
        if block != _ZEROS[: len(block)]:
            done = 0
            while done < len(block):
                done += os.pwrite(fd, block[done:], pos + done)
    os.ftruncate(fd, len(data))


def _copy_large(src: SourceFile, dest: Path, tracker: ProgressTracker | None, lease: Lease) -> FileRecord:
    target = Target(src.rel, src.size)
    hint = "check that the source folder is readable and pull again"
    got = transfer(
        src.rel,
        dest,
        target,
        lambda: copy_local(src.path, dest, target, tracker=tracker, leases=(lease,), sync=False),
        auth_hint=hint,
    )
    if _changed(src, Path(src.path).stat()):
        raise IntegrityError(
            f"{src.rel}: the source changed during the pull", hint="wait until the source is stable, then pull again"
        )
    publish_part(dest)
    return FileRecord(src.rel, got.size, got.sha256, src.etag)


def copy_batch(
    files: Sequence[SourceFile],
    data_dir: Path,
    *,
    lease: Lease,
    tracker: ProgressTracker | None = None,
    workers: int = 2,
    copy_small: Callable[[SourceFile, Path], FileRecord] | None = None,
) -> dict[str, FileRecord]:
    """Copy ``files`` into a fresh ``data_dir`` (absent or empty) as one batch; see the module doc.

    ``copy_small(src, dest)`` fetches one small file of another source (HTTP, s3, ...) into the
    staging folder (verified, read-only); without it files are read from a local folder.
    """
    fetch_small = copy_small or _copy_small
    top = staging_dir(data_dir)
    staging = top / f"{lease.fence:06d}-{lease.token[:16]}"  # this holder's own folder
    make_dirs(top)
    make_writable(top)
    discard_others(top, keep=staging.name)  # left by a crashed or superseded holder: never trusted, redone
    try:
        records = _stage(files, staging, data_dir, lease, tracker, workers, fetch_small)
        sync_filesystem(staging)  # every byte of the batch durable before any of it is visible
        if not lease.renew():  # the fence: a holder whose lease was taken over never moves its batch in
            raise LeaseLostError(str(data_dir))
        _move_into_place(staging, data_dir)
    except LeaseLostError:
        raise  # the holder that took over discards our folder
    except BaseException as e:
        if not _still_ours(lease):
            raise LeaseLostError(str(data_dir)) from e  # our folder was discarded by the new holder
        discard(staging)  # nothing in it is resumed: give its space back at once
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise store_full(data_dir) from e
        raise
    with contextlib.suppress(OSError):
        top.rmdir()  # the batch is in place: lazy readers stop waiting
    return records


def _still_ours(lease: Lease) -> bool:
    holder = lease.holder()
    return lease.held and holder is not None and (holder.token, holder.fence) == (lease.token, lease.fence)


def discard(folder: Path) -> None:
    """Remove ``folder`` whatever another process still writes into it (rename first, then remove)."""
    gone = folder.with_name(f".gone-{uuid.uuid4().hex}")
    try:
        folder.rename(gone)
    except FileNotFoundError:
        return
    except OSError:
        gone = folder
    make_writable(gone)
    shutil.rmtree(gone, ignore_errors=True)


def discard_others(top: Path, *, keep: str) -> None:
    for child in list(os.scandir(top)):
        if child.name != keep:
            if child.is_dir(follow_symlinks=False):
                discard(Path(child.path))
            else:
                with contextlib.suppress(OSError):
                    Path(child.path).unlink()


def _stage(
    files: Sequence[SourceFile],
    staging: Path,
    data_dir: Path,
    lease: Lease,
    tracker: ProgressTracker | None,
    workers: int,
    fetch_small: Callable[[SourceFile, Path], FileRecord],
) -> dict[str, FileRecord]:
    make_dirs(staging)
    for folder in sorted({str(Path(f.rel).parent) for f in files} - {"."}):
        make_dirs(staging / folder)
    records: dict[str, FileRecord] = {}
    errors: list[BaseException] = []
    stop = threading.Event()
    small = [f for f in files if f.size is None or f.size < SPLIT_AT]
    large = [f for f in files if f.size is not None and f.size >= SPLIT_AT]

    def run(part: Sequence[SourceFile]) -> None:
        nbytes = nfiles = 0
        try:
            for f in part:
                if stop.is_set():
                    return
                if lease.lost.is_set():
                    raise LeaseLostError(str(data_dir))
                rec = fetch_small(f, staging / f.rel)
                records[f.rel] = rec
                nbytes += rec.size
                nfiles += 1
                if nfiles == _REPORT_EVERY and tracker is not None:
                    tracker.add_files(nfiles, nbytes)
                    nbytes = nfiles = 0
        except FileNotFoundError as e:
            if not staging.is_dir():
                errors.append(e)  # our staging folder is gone: judged by the caller (a lost lease)
            else:
                errors.append(
                    NotFoundError(f"{e.filename} disappeared from the source during the pull", hint="check the source")
                )
            stop.set()
        except BaseException as e:
            errors.append(e)
            stop.set()
        finally:
            if tracker is not None and nfiles:
                tracker.add_files(nfiles, nbytes)

    n = max(1, min(workers, len(small) // 64 or 1))
    threads = [threading.Thread(target=run, args=(small[k::n],), name=f"starverse-copy-{k}") for k in range(n - 1)]
    for t in threads:
        t.start()
    run(small[n - 1 :: n])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for f in large:
        records[f.rel] = _copy_large(f, staging / f.rel, tracker, lease)
        if tracker is not None:
            tracker.file_done()
    return records


def _move_into_place(staging: Path, data_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError, OSError):
        data_dir.rmdir()  # an empty folder made before the batch; not empty: merged below
    try:
        staging.rename(data_dir)
    except OSError:
        # A reader filled a file while the batch ran (it started before the batch): move ours
        # in beside its files, one rename each, keeping the files already there.
        for dirpath, _dirs, names in os.walk(staging):
            rel = Path(dirpath).relative_to(staging)
            make_dirs(data_dir / rel)
            for name in names:
                dest = data_dir / rel / name
                if not dest.exists():
                    (Path(dirpath) / name).rename(dest)
        make_writable(staging)
        shutil.rmtree(staging)
    fd = os.open(data_dir.parent, _FLAGS_IN)
    try:
        os.fsync(fd)  # the rename itself durable
    finally:
        os.close(fd)
