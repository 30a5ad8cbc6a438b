"""Hugging Face repos (models and datasets) in the standard huggingface_hub cache layout.

The Hub's tree listing (size, git oid, LFS sha256 of every file at one commit) drives the
pull. Files go through the store's download engine (:mod:`._download`: ranges over several
connections, hashed while they arrive, resumable) straight into the cache layout
huggingface_hub itself writes: ``blobs/<ETag>`` (the LFS sha256, or the git oid of a small
file), ``snapshots/<commit>/<path>`` links and ``refs/<revision>``, so ``from_pretrained``,
``snapshot_download`` and ``load_dataset`` find them offline. Every file is checked against
the listing (sha256 for LFS files, git blob sha1 for the others) before it is renamed into
place.

Repos stored on Xet (files listed with a ``xetHash``) keep huggingface_hub's own path when
``hf_xet`` is installed: ``snapshot_download`` with its Xet client (which dedupes chunks and
is already parallel); we follow its blobs to hash them without a second read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    IntegrityError,
    MissingDependencyError,
    NotFoundError,
)

from . import _download
from ._download import ChecksumError, Downloaded, HttpOrigin, Target, download
from ._fetch import SourceFile, check_space, publish_part, transfer
from ._follow import BlobFollower
from ._hubsmall import BATCH_MAX, _blob_name, _blob_sizes, _link, _stage_small
from ._lease import Lease
from ._names import ModelRef, check_relative, safe_join
from ._perms import make_dirs
from ._progress import ProgressTracker
from ._types import FileRecord

__all__ = ["ModelSnapshot", "import_model_folder", "pull_model", "sha256_file", "write_ref"]


@dataclass(frozen=True)
class ModelSnapshot:
    """A complete, verified snapshot of a repo at one commit."""

    commit: str
    files: tuple[FileRecord, ...]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def _hf() -> Any:
    try:
        import huggingface_hub
    except ImportError as e:  # pragma: no cover - a core dependency in practice
        raise MissingDependencyError("huggingface_hub", purpose="Hugging Face models") from e
    return huggingface_hub


def _endpoint() -> str | None:
    # Hugging Face's own variable, read at call time so a changed endpoint takes effect.
    return os.environ.get("HF_ENDPOINT") or None


def _translate(ref: ModelRef, e: Exception) -> Exception:
    from huggingface_hub import errors as hf_errors

    what = "model" if ref.repo_type == "model" else "dataset"
    if isinstance(e, hf_errors.RevisionNotFoundError):
        return NotFoundError(
            f"revision {ref.revision!r} does not exist in {ref.repo_id}",
            hint="check the branch, tag or commit and pull again",
        )
    if isinstance(e, (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError)):
        return NotFoundError(
            f"{what} repository {ref.repo_id!r} not found (or not accessible)",
            hint="check the name on the Hub, or set HF_TOKEN for private/gated repos",
        )
    if isinstance(e, hf_errors.OfflineModeIsEnabled):
        return BackendUnavailableError(
            f"{ref} is not in the store and HF_HUB_OFFLINE is set", hint="pull it from a machine with Hub access first"
        )
    return BackendUnavailableError(
        f"the Hugging Face Hub could not serve {ref}: {e}", hint="check HF_ENDPOINT, the network and HF_TOKEN"
    )


class _SilentTqdm:
    """A tqdm stand-in: our own tracker shows progress, huggingface_hub's bars stay quiet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.total = kwargs.get("total")
        self.n = 0

    def __enter__(self) -> _SilentTqdm:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float | None = 1) -> None:
        self.n += int(n or 0)

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _blob_bytes(blobs: Path) -> int:
    total = 0
    try:
        with os.scandir(blobs) as it:
            for e in it:
                try:
                    total += e.stat().st_size
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        return 0
    return total


@contextmanager
def _poll_blobs(blobs: Path, tracker: ProgressTracker, baseline: int) -> Iterator[None]:
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            tracker.set_done_bytes(max(0, _blob_bytes(blobs) - baseline))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def pull_model(
    ref: ModelRef,
    hf_cache: Path,
    tracker: ProgressTracker,
    *,
    connections: int = 8,
    allow: Sequence[str] = (),
    ignore: Sequence[str] = (),
    have: Sequence[FileRecord] = (),
    lease: Lease | None = None,
) -> ModelSnapshot:
    """Download ``ref`` (the files ``allow``/``ignore`` select) into ``hf_cache`` and verify it.

    The caller holds the repo's ``lease`` (checked while small files stage, and renewed as a
    fence before they are moved in). ``have`` are files of an earlier pull of the same
    entry: they are kept in the returned snapshot (pulling new patterns adds files).
    """
    hf = _hf()
    api = hf.HfApi(endpoint=_endpoint())
    try:
        info = api.repo_info(ref.repo_id, revision=ref.revision, repo_type=ref.repo_type)
        commit = str(info.sha)
        listing = [
            f
            for f in api.list_repo_tree(ref.repo_id, revision=commit, recursive=True, repo_type=ref.repo_type)
            if isinstance(f, hf.hf_api.RepoFile)
        ]
    except Exception as e:  # httpx/hf errors share no base class: translate all at this edge
        raise _translate(ref, e) from e
    if allow or ignore:
        listing = list(
            hf.utils.filter_repo_objects(
                listing, allow_patterns=list(allow) or None, ignore_patterns=list(ignore) or None, key=lambda f: f.path
            )
        )
        if not listing:
            raise BadInputError(
                f"no file of {ref} matches allow={list(allow)} ignore={list(ignore)}",
                field="allow",
                hint="patterns are globs on paths in the repo, e.g. 'data/en/*' or '*.parquet'",
            )
    for f in listing:
        check_relative(f.path)  # what safe_join checks, without a Path per file
    storage = hf_cache / ref.folder
    blobs = storage / "blobs"
    for folder in (blobs, storage / "snapshots", storage / "refs", hf_cache / ".locks" / ref.folder):
        make_dirs(folder)  # ours, not huggingface_hub's: group-writable when the store is shared
    # refused up front, like a dataset pull, when the blobs still missing cannot fit (parts on disk count as done)
    sizes = _blob_sizes(blobs)  # one scan of the folder, not a stat per listed file
    missing = [f for f in listing if sizes.get(_blob_name(f)) != int(f.size)]
    check_space(blobs, [SourceFile(_blob_name(f), f.path, int(f.size), None) for f in missing])
    if _xet_path(listing):
        snap = _pull_with_hub(ref, hf_cache, tracker, commit, listing)
    else:
        snap = _pull_with_engine(ref, hf_cache, tracker, commit, listing, connections, lease, sizes)
    write_ref(storage, ref.revision, commit)
    kept = {f.path: f for f in have}
    kept.update({f.path: f for f in snap.files})
    return ModelSnapshot(commit, tuple(kept[p] for p in sorted(kept)))


def _xet_path(listing: Sequence[Any]) -> bool:
    """True when huggingface_hub would fetch these files from Xet storage (its own fast path)."""
    if not any(getattr(f, "xet_hash", None) for f in listing):
        return False
    try:
        from huggingface_hub import constants
        from huggingface_hub.utils._runtime import is_xet_available
    except ImportError:  # another huggingface_hub layout: let it decide, through its own path
        return True
    return bool(is_xet_available()) and not constants.HF_HUB_DISABLE_XET


def _pull_with_engine(
    ref: ModelRef,
    hf_cache: Path,
    tracker: ProgressTracker,
    commit: str,
    listing: Sequence[Any],
    connections: int,
    lease: Lease | None = None,
    sizes: dict[str, int] | None = None,
) -> ModelSnapshot:
    hf = _hf()
    storage = hf_cache / ref.folder
    blobs = storage / "blobs"
    headers = hf.utils.build_hf_headers()
    endpoint = _endpoint()
    sizes = _blob_sizes(blobs) if sizes is None else sizes
    present = {f.path for f in listing if sizes.get(_blob_name(f)) == int(f.size)}
    tracker.start(
        bytes_total=sum(int(f.size) for f in listing),
        files_total=len(listing),
        already=sum(int(f.size) for f in listing if f.path in present),
    )
    auth = "set HF_TOKEN (a token with access to the repo; gated repos also need the terms accepted on the Hub)"

    def one(f: Any, n: int) -> FileRecord:
        blob = blobs / _blob_name(f)
        size = int(f.size)
        if f.path not in present:
            sha = str(f.lfs.sha256) if f.lfs is not None else None
            extra = {} if f.lfs is not None else {"git": hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)}
            target = Target(f.path, size, sha, extra)
            url = hf.hf_hub_url(ref.repo_id, f.path, repo_type=ref.repo_type, revision=commit, endpoint=endpoint)
            origin = HttpOrigin(url, headers=headers)

            def move() -> Downloaded:
                got = download(origin, blob, target, connections=n, tracker=tracker)
                if f.lfs is None and got.extra["git"] != str(f.blob_id):
                    raise ChecksumError(f"git blob id {got.extra['git']} does not match the listed {f.blob_id}")
                return got

            got = transfer(f.path, blob, target, move, auth_hint=auth)
            publish_part(blob)
            digest = got.sha256
        else:
            digest = str(f.lfs.sha256) if f.lfs is not None else sha256_file(blob)
        _link(storage / "snapshots" / commit, f.path, blob)
        tracker.file_done()
        return FileRecord(f.path, size, digest, _blob_name(f))

    big = [f for f in listing if int(f.size) >= _download.SPLIT_AT]
    at_once, per_file = _download.share_connections(connections, len(big))
    records = _at_once(one, big, at_once, per_file)  # shards share the connections
    small = [f for f in listing if f.path not in records]
    fetch = [f for f in small if f.path not in present and int(f.size) <= BATCH_MAX]
    if fetch:  # one staged batch: no part file, fsync or rename per file (see _stage_small)

        def url(f: Any) -> str:
            return str(hf.hf_hub_url(ref.repo_id, f.path, repo_type=ref.repo_type, revision=commit, endpoint=endpoint))

        records.update(_stage_small(fetch, storage, commit, url, headers, tracker, lease, connections, auth))
    records.update(_at_once(one, [f for f in small if f.path not in records], connections, 1))
    return ModelSnapshot(commit, tuple(records[p] for p in sorted(records)))


def _at_once(one: Any, files: Sequence[Any], at_once: int, per_file: int) -> dict[str, FileRecord]:
    """``one(f, per_file)`` for every file, ``at_once`` at a time; the first error wins."""
    records: dict[str, FileRecord] = {}
    if files:
        if at_once == 1 or len(files) == 1:
            records.update({f.path: one(f, per_file) for f in files})
        else:
            with ThreadPoolExecutor(min(at_once, len(files)), thread_name_prefix="starverse-file") as pool:
                futures = {pool.submit(one, f, per_file): f for f in files}
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = next((fut for fut in done if fut.exception() is not None), None)
                if failed is not None:
                    for fut in futures:
                        fut.cancel()
                    wait(futures)
                    raise failed.exception()  # type: ignore[misc]
                records.update({f.path: fut.result() for fut, f in futures.items()})
    return records


def _pull_with_hub(
    ref: ModelRef, hf_cache: Path, tracker: ProgressTracker, commit: str, listing: Sequence[Any]
) -> ModelSnapshot:
    """Xet-backed repos: huggingface_hub's own download, hashed while it writes."""
    hf = _hf()
    expected = {f.path: (int(f.size), f.lfs.sha256 if f.lfs is not None else None) for f in listing}
    blobs = hf_cache / ref.folder / "blobs"
    present = _blob_bytes(blobs)
    tracker.start(bytes_total=sum(size for size, _ in expected.values()), files_total=len(expected))
    follower = BlobFollower(blobs, {sha: size for size, sha in expected.values() if sha is not None})
    try:
        try:
            with _poll_blobs(blobs, tracker, present), follower:
                folder = hf.snapshot_download(
                    ref.repo_id,
                    revision=commit,
                    repo_type=ref.repo_type,
                    cache_dir=hf_cache,
                    endpoint=_endpoint(),
                    allow_patterns=sorted(expected),
                    tqdm_class=_SilentTqdm,
                )
        except Exception as e:
            raise _translate(ref, e) from e
        tracker.set_phase("verifying")
        files = [
            _verify(ref, Path(folder), path, size, sha, follower) for path, (size, sha) in sorted(expected.items())
        ]
    finally:
        follower.close()
    tracker.files_done = len(files)
    return ModelSnapshot(commit, tuple(files))


def _verify(ref: ModelRef, folder: Path, path: str, size: int, sha: str | None, follower: BlobFollower) -> FileRecord:
    """Check one file of the snapshot against the Hub's listing; remove it if it is wrong."""
    target = folder / path
    real = target.resolve()
    actual = real.stat().st_size if real.exists() else -1
    digest = None
    if sha is not None and actual == size:
        digest = follower.digest(sha, real) or sha256_file(real)
    elif sha is None and actual == size:
        digest = sha256_file(real)  # small (non-LFS) file: recorded so `store verify` can check it
    if actual != size or (sha is not None and digest != sha):
        target.unlink(missing_ok=True)
        real.unlink(missing_ok=True)
        raise IntegrityError(
            f"{ref}: {path} does not match the Hub listing (size {actual} vs {size})",
            hint="the bad file was removed; pull again",
        )
    return FileRecord(path, size, digest, sha)


def write_ref(storage: Path, revision: str, commit: str) -> None:
    if revision == commit:
        return
    ref_file = safe_join(storage / "refs", revision)
    make_dirs(ref_file.parent)
    tmp = ref_file.with_name(f".{ref_file.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(commit)
    tmp.replace(ref_file)


def import_model_folder(source: Path, ref: ModelRef, hf_cache: Path, tracker: ProgressTracker) -> ModelSnapshot:
    """Copy a local HF-format folder into the cache layout (blobs by sha256, snapshot links)."""
    if not source.is_dir():
        raise NotFoundError(f"{source} is not a folder", hint="give the folder that holds config.json and the weights")
    paths = sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not paths:
        raise BadInputError(
            f"{source} contains no files", field="path", hint="give the folder that holds config.json and the weights"
        )
    storage = hf_cache / ref.folder
    blobs = storage / "blobs"
    make_dirs(blobs)
    tracker.start(bytes_total=sum(p.stat().st_size for p in paths), files_total=len(paths))
    records: list[tuple[str, FileRecord]] = []
    for p in paths:
        rel = p.relative_to(source).as_posix()
        safe_join(storage, rel)
        sha = sha256_file(p)
        blob = blobs / sha
        if not blob.exists():
            tmp = blobs / f".{sha}.{uuid.uuid4().hex}.part"
            try:
                shutil.copyfile(p, tmp)
                if sha256_file(tmp) != sha:
                    raise IntegrityError(
                        f"{rel} changed while it was imported", hint="import again when the folder is stable"
                    )
                tmp.replace(blob)
            finally:
                tmp.unlink(missing_ok=True)
        tracker.advance(p.stat().st_size)
        records.append((rel, FileRecord(rel, p.stat().st_size, sha, sha)))
    commit = hashlib.sha1("\n".join(f"{r}:{f.sha256}" for r, f in records).encode(), usedforsecurity=False).hexdigest()
    snapshot = storage / "snapshots" / commit
    staging = storage / "snapshots" / f".{commit}.{uuid.uuid4().hex}.tmp"
    try:
        for rel, f in records:
            link = safe_join(staging, rel)
            make_dirs(link.parent)
            link.symlink_to(os.path.relpath(blobs / str(f.sha256), link.parent))
        if not snapshot.exists():
            staging.rename(snapshot)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    write_ref(storage, ref.revision, commit)
    return ModelSnapshot(commit, tuple(f for _, f in records))
