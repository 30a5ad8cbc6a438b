"""List fsspec sources and copy their files into the store: verified, atomic, resumable.

A file becomes visible under its final name only after its bytes were counted, hashed
while they arrived (:mod:`._download`) and checked against the size (and ETag, where the
source has one) listed before the copy. Until then it is a ``.NAME.part`` sibling with a
``.NAME.ranges`` sidecar of the pieces already on disk: a kill -9 leaves both, and the next
holder of the file's lease continues from there. Bytes known to be wrong are deleted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._format import format_bytes
from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    IntegrityError,
    MissingDependencyError,
    NotFoundError,
    PermissionDeniedError,
    StarverseError,
    StoreError,
)

from ._download import (
    AccessError,
    ChecksumError,
    Downloaded,
    FsspecOrigin,
    HttpOrigin,
    LeaseLost,
    Origin,
    OriginChangedError,
    RetryableError,
    Target,
    TransferError,
    copy_local,
    download,
    part_paths,
)
from ._lease import Lease
from ._names import check_relative
from ._perms import FULL, free_bytes, make_dirs
from ._progress import ProgressTracker
from ._types import FileRecord

__all__ = [
    "LeaseLostError",
    "SourceFile",
    "check_space",
    "fetch_file",
    "is_local",
    "list_source",
    "open_source",
    "origin_for",
    "publish_part",
    "remove_old_parts",
    "store_full",
    "transfer",
]

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


def _free(where: Path) -> int | None:
    return free_bytes(where)


def store_full(where: Path, needed: int | None = None, *, free: int | None = None) -> StoreError:
    """The store's file system has too little room: what is free, how much more is needed, and where."""
    free = _free(where) if free is None else free
    have = f"{format_bytes(free)} free" if free is not None else "its file system is full"
    need = f", {format_bytes(needed)} more needed" if needed else ""
    return StoreError(
        f"not enough space in the store at {where}: {have}{need}",
        hint="free space with `starverse store evict --max-bytes N` or `starverse store rm NAME`, then pull again: "
        "the bytes already on disk are kept and only what is missing is fetched",
    )


def _allocated(path: Path) -> int:
    try:
        st = path.stat()
    except OSError:
        return 0
    return min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size


def _part_names(folder: str) -> set[str]:
    try:
        with os.scandir(folder) as it:
            return {e.name for e in it if e.name.endswith(".part")}
    except OSError:
        return set()


def _tree_allocated(top: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(top):
        for name in names:
            total += _allocated(Path(dirpath, name))
    return total


def check_space(data_dir: Path, missing: Sequence[SourceFile], *, staging: Path | None = None) -> None:
    """Refuse a pull whose ``missing`` files cannot fit: a StoreError naming free, needed and the path.

    What is on disk already counts as done: the blocks of a file's ``.part`` (a ranged download
    resumes its pieces in place; a restarted one overwrites or truncates them) and a batch's
    ``staging`` folder (discarded before the batch is staged again). So a pull that stopped on a
    full disk is not refused again, after space was freed, for the bytes it already holds.
    """
    free = _free(data_dir)
    if free is None:
        return
    needed = 0
    parts: dict[str, set[str]] = {}  # folder -> the part files in it: one listing per folder, no stat per file
    for f in missing:
        if f.size:
            folder, _, name = f.rel.rpartition("/")
            if folder not in parts:
                parts[folder] = _part_names(os.path.join(data_dir, folder))  # noqa: PTH118 (no Path per file)
            part = f".{name}.part"  # part_paths' name
            held = _allocated(Path(data_dir, folder, part)) if part in parts[folder] else 0
            needed += max(0, f.size - held)
    reusable = _tree_allocated(staging) if staging is not None and staging.is_dir() else 0
    if free + reusable < needed:
        raise store_full(data_dir, needed - free - reusable, free=free)


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


def is_local(fs: Any) -> bool:
    """True for the local file system (local folders and network mounts such as NFS)."""
    return _protocol(fs) in ("file", "local")


_is_local = is_local


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


def _walk_local(fs: Any, path: str, depth: int, real_root: str) -> Iterator[dict[str, Any]]:
    """:func:`_walk` for local folders with ``os.scandir`` (fsspec's ``ls`` costs a dict and a stat call per file).

    The info has what fsspec's would for these fields (name, size, mtime, type); links go
    through :func:`_link_target` as before.
    """
    if depth > 64:
        raise BadInputError(
            f"{path} is nested too deeply", field="source", hint="a symbolic link to a parent folder makes a loop"
        )
    with os.scandir(path) as it:
        entries = list(it)
    for e in entries:
        name = f"{path.rstrip('/')}/{e.name}"
        if e.is_symlink():
            link = {"name": name, "islink": True, "destination": str(Path(name).readlink())}
            info = _link_target(fs, link, real_root)
            if info.get("type") == "directory":
                yield from _walk(fs, name, depth + 1, real_root)
            else:
                yield info
        elif e.is_dir(follow_symlinks=False):
            yield from _walk_local(fs, name, depth + 1, real_root)
        else:
            st = e.stat(follow_symlinks=False)
            yield {"name": name, "size": st.st_size, "mtime": st.st_mtime, "type": "file"}


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
        walked = _walk_local(fs, base, 0, str(real_root)) if real_root is not None else _walk(fs, root, 0, real_root)
        infos = sorted(walked, key=lambda i: str(i["name"]))
        unsized = [i for i, info in enumerate(infos) if info.get("size") is None]
        if unsized:  # e.g. HTML listings over HTTP: one HEAD per file, many at once
            with ThreadPoolExecutor(16, thread_name_prefix="starverse-list") as pool:
                for i, info in zip(unsized, pool.map(lambda i: fs.info(str(infos[i]["name"])), unsized), strict=True):
                    infos[i] = info
        for info in infos:
            path = str(info["name"])
            stripped = fs._strip_protocol(path)
            rel = stripped[len(base) :].lstrip("/") if stripped.startswith(base) else stripped.rsplit("/", 1)[-1]
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
        check_relative(f.rel)  # reject listings that would escape the entry folder
    return out


def _protocol(fs: Any) -> str:
    return str(fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0])


def origin_for(fs: Any, src: SourceFile) -> Origin:
    """The engine's origin for one listed file: plain HTTP(S) directly, other fsspec file systems by ranges."""
    if _protocol(fs) in ("http", "https"):
        return HttpOrigin(src.path, headers=_http_headers(fs))
    return FsspecOrigin(fs, src.path, size=src.size, etag=src.etag)


def _http_headers(fs: Any) -> dict[str, str]:
    kwargs = getattr(fs, "kwargs", {}) or {}
    headers = kwargs.get("headers") or {}
    return {str(k): str(v) for k, v in headers.items()} if isinstance(headers, dict) else {}


def access_error(name: str, e: AccessError, *, auth_hint: str) -> StarverseError:
    """401/403/404 from an origin as an error naming the file and what to do."""
    if e.status in (401, 403):
        return PermissionDeniedError(f"{name}: the origin refused access (HTTP {e.status}, {e.url})", hint=auth_hint)
    if e.status in (404, 410):
        return NotFoundError(
            f"{name}: the origin has no such file (HTTP {e.status}, {e.url})",
            hint="check the source URL or revision; the listing may be out of date, pull again",
        )
    return BackendUnavailableError(
        f"{name}: the origin answered HTTP {e.status} ({e.url})", hint="check the source and pull again"
    )


def transfer(
    name: str,
    dest: Path,
    target: Target,
    move: Callable[[], Downloaded],
    *,
    auth_hint: str,
) -> Downloaded:
    """Run one engine transfer and turn its failures into StarverseErrors.

    Bytes that are known wrong (checksum, changed origin) are deleted; anything else keeps
    the part file and its sidecar so that the next pull resumes.
    """
    part, sidecar = part_paths(dest)
    try:
        return move()
    except LeaseLost as e:
        raise LeaseLostError(str(dest)) from e
    except (ChecksumError, OriginChangedError) as e:
        part.unlink(missing_ok=True)
        sidecar.unlink(missing_ok=True)
        raise IntegrityError(
            f"{name}: {e}", hint="the partial file was discarded; wait until the source is stable, then pull again"
        ) from e
    except AccessError as e:
        raise access_error(name, e, auth_hint=auth_hint) from e
    except RetryableError as e:
        raise BackendUnavailableError(
            f"{name}: the origin kept failing after retries ({e})",
            hint="check the network and the source, then pull again: the bytes already on disk are kept",
        ) from e
    except TransferError as e:
        raise BackendUnavailableError(f"{name}: {e}", hint="pull again") from e
    except OSError as e:
        if e.errno in FULL:
            raise store_full(dest.parent) from e
        raise


_OLD_PART = re.compile(r"^\..+\.[0-9a-f]{32}\.part$")


def remove_old_parts(folder: Path) -> None:
    """Part files named ``.NAME.TOKEN.part`` by pulls before the engine (never resumable): one walk."""
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            if _OLD_PART.match(name):
                Path(dirpath, name).unlink(missing_ok=True)


def publish_part(dest: Path) -> None:
    """Rename the verified, synced part file into place (read-only)."""
    part, sidecar = part_paths(dest)
    part.chmod(0o444)
    part.replace(dest)
    sidecar.unlink(missing_ok=True)


def fetch_file(
    fs: Any,
    src: SourceFile,
    dest: Path,
    *,
    tracker: ProgressTracker | None = None,
    leases: Sequence[Lease] = (),
    connections: int = 8,
    sync: bool = True,
) -> FileRecord:
    """Copy one source file to ``dest`` atomically and return what was verified.

    The caller holds the lease for ``dest`` (one of ``leases``, checked between chunks).
    Local and network-mounted sources are copied with ``copy_file_range``; every other
    source goes through the download engine (ranges over ``connections`` connections).
    """
    make_dirs(dest.parent)
    target = Target(src.rel, src.size)
    local = _is_local(fs)
    hint = "check the source's credentials (fsspec storage options, or the URL's token) and pull again"

    def move() -> Downloaded:
        if local:
            return copy_local(src.path, dest, target, tracker=tracker, leases=leases, sync=sync)
        origin = origin_for(fs, src)
        return download(origin, dest, target, connections=connections, tracker=tracker, leases=leases, sync=sync)

    try:
        got = transfer(src.rel, dest, target, move, auth_hint=hint)
        if _protocol(fs) in ("http", "https"):
            changed = src.etag is not None and got.etag is not None and got.etag != src.etag
            after = got.etag
        else:
            after = _etag(fs.info(src.path))
            changed = src.etag is not None and after not in (None, src.etag)
        if changed:
            part_paths(dest)[0].unlink(missing_ok=True)
            raise IntegrityError(
                f"{src.rel}: the source changed during the pull (ETag {src.etag} -> {after})",
                hint="wait until the source is no longer being written, then pull again",
            )
        publish_part(dest)
    except (StarverseError, LeaseLostError, PermissionError):
        raise  # a PermissionError is the store's (or source's) modes: the catalog names STARVERSE_SHARED_GROUP
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise NotFoundError(
                f"{src.rel} disappeared from the source during the pull", hint="check the source"
            ) from e
        raise BackendUnavailableError(f"reading {src.path} failed: {e}", hint="check the source and pull again") from e
    except Exception as e:
        # Transport errors of any fsspec backend (aiohttp, botocore, ...): nothing was published.
        raise BackendUnavailableError(f"reading {src.path} failed: {e}", hint="check the source and pull again") from e
    if tracker is not None:
        tracker.file_done()
    return FileRecord(src.rel, got.size, got.sha256, src.etag)
