"""Copy files from any fsspec source into the store: verified, atomic, resumable per file.

A file becomes visible under its final name only after its bytes were counted, hashed
and checked against the size (and ETag, where the source has one) listed before the copy
and re-read after it. Until then it is a ``.NAME.TOKEN.part`` sibling, removed on any
error; a kill -9 leaves such a part file, which the next holder of the file's lease
deletes before it starts again.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import queue
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    IntegrityError,
    MissingDependencyError,
    NotFoundError,
    StarverseError,
    StoreError,
)

from ._lease import Lease
from ._names import safe_join
from ._perms import make_dirs
from ._progress import ProgressTracker
from ._types import FileRecord

__all__ = ["LeaseLostError", "SourceFile", "fetch_file", "list_source", "open_source", "store_full"]

CHUNK = 16 * 1024 * 1024
_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "hf": "huggingface_hub",
}


class LeaseLostError(Exception):
    """Internal: another process took our lease over; stop writing and wait instead."""


@dataclass(frozen=True)
class SourceFile:
    """One file of a source as listed before the copy."""

    rel: str
    path: str
    size: int | None
    etag: str | None


def store_full(where: Path, needed: int | None = None) -> StoreError:
    msg = f"The store at {where} is full" + (f" ({needed} more bytes needed)" if needed else "")
    return StoreError(
        msg, hint="free space with `starverse store evict --max-bytes N` or `starverse store rm NAME`, then pull again"
    )


def open_source(source: str) -> tuple[Any, str]:
    """``(filesystem, root path)`` for a source URL or folder; lazy protocol import with a hint."""
    import fsspec

    protocol = source.split("://", 1)[0] if "://" in source else "file"
    try:
        fs, root = fsspec.core.url_to_fs(source)
    except ImportError as e:
        package = _PACKAGES.get(protocol) or e.name or protocol
        raise MissingDependencyError(package, purpose=f"{protocol}:// sources") from e
    except ValueError as e:
        raise BadInputError(
            f"source {source!r} uses an unknown protocol {protocol!r}",
            field="source",
            hint="use a folder, file://, memory://, http(s)://, s3:// or gs:// URL",
        ) from e
    return fs, str(root)


def _etag(info: dict[str, Any]) -> str | None:
    for key in ("ETag", "etag", "md5", "checksum"):
        if info.get(key):
            return str(info[key]).strip('"')
    mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    return None if mtime is None else f"mtime:{mtime}"


def _is_local(fs: Any) -> bool:
    return _protocol(fs) in ("file", "local")


def _link_target(fs: Any, info: dict[str, Any], real_root: str) -> dict[str, Any]:
    """A local symlink's target, stat'ed through the link: refused when dangling or outside the source.

    Links are followed so that listing and the after-copy check both see the target (size,
    mtime); a link leaving the source would copy files its owner never meant to share.
    """
    link = str(info["name"])
    hint = "remove the link, or replace it with the file (or a link to a file inside the source folder)"
    try:
        target = os.path.realpath(link, strict=True)
    except OSError as e:  # dangling, or a loop of links
        raise BadInputError(
            f"the symbolic link {link} in the source points to {info.get('destination', '?')!r}, "
            f"which does not exist ({e.strerror or e})",
            field="source",
            hint=hint,
        ) from e
    if target != real_root and not target.startswith(real_root.rstrip(os.sep) + os.sep):
        raise BadInputError(
            f"the symbolic link {link} in the source points outside the source folder, to {target}",
            field="source",
            hint=hint + "; links leaving the source are not copied into the shared store",
        )
    out = dict(fs.info(target))
    out["name"] = link
    out["target"] = target
    return out


def _walk(fs: Any, path: str, depth: int, real_root: str | None = None) -> Iterator[dict[str, Any]]:
    # Our own walk: fsspec's http find() does not descend into sub-folders.
    if depth > 64:
        raise BadInputError(
            f"{path} is nested too deeply", field="source", hint="a symbolic link to a parent folder makes a loop"
        )
    for info in fs.ls(path, detail=True):
        name = str(info["name"])
        if real_root is not None and info.get("islink"):
            info = _link_target(fs, info, real_root)
        if info.get("type") == "directory":
            if name.rstrip("/") != path.rstrip("/"):
                yield from _walk(fs, name, depth + 1, real_root)
        else:
            yield info


def list_source(fs: Any, root: str, source: str) -> list[SourceFile]:
    """Every file under ``root`` with size and ETag; a missing source is a NotFoundError."""
    try:
        exists = fs.exists(root)
    except (OSError, ConnectionError) as e:
        raise BackendUnavailableError(
            f"cannot reach source {source!r}: {e}", hint="check the URL and the network"
        ) from e
    if not exists:
        raise NotFoundError(f"source {source!r} does not exist", hint="check the path or URL and add the dataset again")
    out: list[SourceFile] = []
    # Over HTTP every URL is also a "file" and isdir() would GET it: folders end with '/'.
    is_dir = root.endswith("/") if _protocol(fs) in ("http", "https") else fs.isdir(root)
    if is_dir:
        base = fs._strip_protocol(root).rstrip("/")
        real_root = os.path.realpath(base) if _is_local(fs) else None
        for info in sorted(_walk(fs, root, 0, real_root), key=lambda i: str(i["name"])):
            path = str(info["name"])
            stripped = fs._strip_protocol(path)
            rel = stripped[len(base) :].lstrip("/") if stripped.startswith(base) else stripped.rsplit("/", 1)[-1]
            size = info.get("size")
            if size is None:
                info = fs.info(path)
                size = info.get("size")
            # A link is read through its checked target: the same file its size and ETag came from.
            read = str(info.get("target", path))
            out.append(SourceFile(rel, read, None if size is None else int(size), _etag(info)))
    else:
        info = fs.info(root)
        name = fs._strip_protocol(root).rstrip("/").rsplit("/", 1)[-1]
        out.append(SourceFile(name, root, None if info.get("size") is None else int(info["size"]), _etag(info)))
    if not out:
        raise NotFoundError(
            f"source {source!r} contains no files", hint="point the dataset at a folder or file with data"
        )
    for f in out:
        safe_join(Path("/"), f.rel)  # reject listings that would escape the entry folder
    return out


def _protocol(fs: Any) -> str:
    return str(fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0])


def _open(fs: Any, path: str) -> Any:
    if _protocol(fs) in ("http", "https"):
        return fs.open(path, "rb", block_size=0)  # one streaming GET, not many range requests
    return fs.open(path, "rb")


@functools.cache
def _zeros() -> bytes:
    return bytes(CHUNK)


def _write_chunk(out: Any, chunk: bytes) -> None:
    n = len(chunk)
    if chunk == _zeros()[:n] if n <= CHUNK else chunk.count(0) == n:
        out.seek(n, os.SEEK_CUR)  # keep holes sparse; truncate() fixes the length
    else:
        out.write(chunk)


_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


class _Worker:
    """One consumer thread fed through a small queue; keeps the first error it hits."""

    def __init__(self, name: str, consume: Callable[[bytes], None]) -> None:
        self.consume = consume
        self.error: BaseException | None = None
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self.error is None:
                try:
                    self.consume(chunk)
                except BaseException as e:  # re-raised in the reading thread
                    self.error = e

    def put(self, chunk: bytes) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put(chunk)

    def join(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error


class _Sink:
    """Hash in one thread, write (flushing to disk as it goes) in another.

    hashlib, file writes and fdatasync release the GIL, so reading the next chunk from
    the source, hashing and writing all overlap; the final fsync has little left to do.
    """

    SYNC_EVERY = 64 * 1024 * 1024

    def __init__(self, out: Any) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self._unsynced = 0
        self._workers = (_Worker("starverse-hash", self.digest.update), _Worker("starverse-write", self._write))

    def _write(self, chunk: bytes) -> None:
        _write_chunk(self.out, chunk)
        self._unsynced += len(chunk)
        if self._unsynced >= self.SYNC_EVERY:
            self.out.flush()
            _datasync(self.out.fileno())
            self._unsynced = 0

    def put(self, chunk: bytes) -> None:
        for worker in self._workers:
            worker.put(chunk)

    def join(self) -> None:
        """Wait for every chunk; raises what a worker thread hit."""
        for worker in self._workers:
            worker._queue.put(None)
        for worker in self._workers:
            worker._thread.join()
        for worker in self._workers:
            if worker.error is not None:
                raise worker.error


def fetch_file(
    fs: Any,
    src: SourceFile,
    dest: Path,
    *,
    tracker: ProgressTracker | None = None,
    leases: Sequence[Lease] = (),
) -> FileRecord:
    """Copy one source file to ``dest`` atomically and return what was verified.

    The caller holds the lease for ``dest`` (one of ``leases``, checked between chunks);
    stale part files of ``dest`` are removed first.
    """
    make_dirs(dest.parent)
    for stale in dest.parent.glob(f".{dest.name}.*.part"):
        stale.unlink(missing_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.part")
    done = 0
    try:
        with _open(fs, src.path) as inp, open(tmp, "wb") as out:
            sink = _Sink(out)
            try:
                while True:
                    if any(lease.lost.is_set() for lease in leases):
                        raise LeaseLostError(str(dest))
                    chunk = inp.read(CHUNK)
                    if not chunk:
                        break
                    sink.put(chunk)
                    done += len(chunk)
                    if tracker is not None:
                        tracker.advance(len(chunk))
            finally:
                sink.join()
            out.truncate(done)
            out.flush()
            os.fsync(out.fileno())
        if src.size is not None and done != src.size:
            raise IntegrityError(
                f"{src.rel}: the source changed size during the pull (listed {src.size} bytes, read {done})",
                hint="wait until the source is no longer being written, then pull again",
            )
        after = fs.info(src.path)
        if src.etag is not None and _etag(after) not in (None, src.etag):
            raise IntegrityError(
                f"{src.rel}: the source changed during the pull (ETag {src.etag} -> {_etag(after)})",
                hint="wait until the source is no longer being written, then pull again",
            )
        tmp.chmod(0o444)
        tmp.replace(dest)
    except (StarverseError, LeaseLostError, PermissionError):
        raise  # a PermissionError is the store's (or source's) modes: the catalog names STARVERSE_SHARED_GROUP
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise store_full(dest.parent) from e
        if isinstance(e, FileNotFoundError):
            raise NotFoundError(
                f"{src.rel} disappeared from the source during the pull", hint="check the source"
            ) from e
        raise BackendUnavailableError(f"reading {src.path} failed: {e}", hint="check the source and pull again") from e
    except Exception as e:
        # Transport errors of any fsspec backend (aiohttp, botocore, ...): nothing was published.
        if type(e).__name__ == "ClientPayloadError":  # body shorter than its Content-Length
            raise IntegrityError(
                f"{src.rel}: the source changed size during the pull ({e})",
                hint="the partial file was discarded; wait until the source is stable, then pull again",
            ) from e
        raise BackendUnavailableError(
            f"reading {src.path} failed: {e}", hint="the partial file was discarded; check the source and pull again"
        ) from e
    finally:
        tmp.unlink(missing_ok=True)
    if tracker is not None:
        tracker.file_done()
    return FileRecord(src.rel, done, sink.digest.hexdigest(), src.etag)
