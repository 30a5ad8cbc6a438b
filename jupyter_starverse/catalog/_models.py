"""Hugging Face models in the standard huggingface_hub cache layout inside the store.

Downloads are done by ``huggingface_hub.snapshot_download`` (its temp-file + rename and
resume of ``.incomplete`` blobs); we add what it lacks on shared storage: the NFS-safe
lease around it (held by the caller), a tree listing for totals and progress, and a
size + sha256 check of every file against the Hub's listing before the entry is marked
complete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
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

from ._follow import BlobFollower
from ._names import ModelRef, safe_join
from ._perms import make_dirs
from ._progress import ProgressTracker
from ._types import FileRecord

__all__ = ["ModelSnapshot", "import_model_folder", "pull_model", "sha256_file"]


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

    if isinstance(e, hf_errors.RevisionNotFoundError):
        return NotFoundError(
            f"revision {ref.revision!r} does not exist in {ref.repo_id}",
            hint="check the branch, tag or commit and pull again",
        )
    if isinstance(e, (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError)):
        return NotFoundError(
            f"model repository {ref.repo_id!r} not found (or not accessible)",
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


def pull_model(ref: ModelRef, hf_cache: Path, tracker: ProgressTracker) -> ModelSnapshot:
    """Download ``ref`` into ``hf_cache`` and verify it; the caller holds the lease."""
    hf = _hf()

    api = hf.HfApi(endpoint=_endpoint())
    try:
        info = api.repo_info(ref.repo_id, revision=ref.revision)
        commit = str(info.sha)
        listing = [
            f
            for f in api.list_repo_tree(ref.repo_id, revision=commit, recursive=True)
            if isinstance(f, hf.hf_api.RepoFile)
        ]
    except Exception as e:  # httpx/hf errors share no base class: translate all at this edge
        raise _translate(ref, e) from e
    expected = {f.path: (f.size, f.lfs.sha256 if f.lfs is not None else None) for f in listing}
    for path in expected:
        safe_join(hf_cache, path)
    storage = hf_cache / ref.folder
    blobs = storage / "blobs"
    for folder in (blobs, storage / "snapshots", storage / "refs", hf_cache / ".locks" / ref.folder):
        make_dirs(folder)  # ours, not huggingface_hub's: group-writable when the store is shared
    present = _blob_bytes(blobs)
    tracker.start(bytes_total=sum(size for size, _ in expected.values()), files_total=len(expected))
    follower = BlobFollower(blobs, {sha: size for size, sha in expected.values() if sha is not None})
    try:
        try:
            with _poll_blobs(blobs, tracker, present), follower:
                folder = hf.snapshot_download(
                    ref.repo_id, revision=commit, cache_dir=hf_cache, endpoint=_endpoint(), tqdm_class=_SilentTqdm
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
    _write_ref(storage, ref.revision, commit)
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


def _write_ref(storage: Path, revision: str, commit: str) -> None:
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
    _write_ref(storage, ref.revision, commit)
    return ModelSnapshot(commit, tuple(f for _, f in records))
