"""Where everything lives on the store. The catalog is these files, not a process.

::

    STORE/
      catalog/datasets/NAME/VERSION.json            entry record (written by add)
      catalog/datasets/NAME/VERSION.manifest.json   complete + verified (written last by pull)
      catalog/models/models--ORG--REPO/REV.json          entry record (written when a pull starts)
      catalog/models/models--ORG--REPO/REV.manifest.json commit + verified files
      data/NAME/VERSION/...                         dataset files (read-only, mount path)
      hf/hub/                                       HF_HUB_CACHE (huggingface_hub layout)
      .leases/  .progress/  .usage/                 single-flight, live progress, last use
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, NotFoundError

from ._names import DatasetRef, ModelRef, Ref
from ._progress import write_json_atomic
from ._types import Entry, FileRecord

__all__ = ["Layout", "Manifest", "store_root"]


def store_root(store: str) -> Path:
    """The store as a local folder; object-store URLs are refused with a hint."""
    if store.startswith("file://"):
        store = store[len("file://") :]
    elif "://" in store or store.startswith("memory:"):
        raise BadInputError(
            f"STARVERSE_STORE={store!r}: the store must be a local or network-mounted folder",
            field="STARVERSE_STORE",
            hint="mount the bucket or volume (NFS, CSI, FUSE) and point STARVERSE_STORE at its path; "
            "object-store URLs are fine as dataset sources",
        )
    return Path(store).expanduser().absolute()


@dataclass(frozen=True)
class Manifest:
    """Proof that an entry is complete: every file with its verified size and hash."""

    ref: str
    files: tuple[FileRecord, ...]
    completed_at: float
    commit: str | None = None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "commit": self.commit,
            "completed_at": self.completed_at,
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        files = tuple(FileRecord(**f) for f in data["files"])
        return cls(str(data["ref"]), files, float(data["completed_at"]), data.get("commit"))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return None


def _writable_rmtree(path: Path) -> None:
    # Files are read-only (0444) but their folders are not, so unlinking works.
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


class Layout:
    """Paths and small records under one store root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hf_cache = root / "hf" / "hub"

    # -- keys ------------------------------------------------------------------
    @staticmethod
    def key(ref: Ref) -> str:
        if isinstance(ref, DatasetRef):
            return f"ds.{ref.name}@{ref.version}"
        return f"hf.{ref.org}--{ref.repo}@{ref.revision_key}"

    @staticmethod
    def lease_key(ref: Ref) -> str:
        # One lease per HF repo: its revisions share blobs.
        return Layout.key(ref) if isinstance(ref, DatasetRef) else f"hf.{ref.org}--{ref.repo}"

    def lease_path(self, key: str) -> Path:
        return self.root / ".leases" / f"{key}.lease"

    def file_lease_path(self, key: str, rel: str) -> Path:
        digest = hashlib.sha1(rel.encode(), usedforsecurity=False).hexdigest()[:20]
        return self.root / ".leases" / "files" / f"{key}.{digest}.lease"

    def progress_path(self, key: str) -> Path:
        return self.root / ".progress" / f"{key}.json"

    def usage_path(self, key: str) -> Path:
        return self.root / ".usage" / key

    # -- datasets --------------------------------------------------------------
    def dataset_folder(self, name: str) -> Path:
        return self.root / "catalog" / "datasets" / name

    def record_path(self, ref: Ref) -> Path:
        if isinstance(ref, DatasetRef):
            return self.dataset_folder(ref.name) / f"{ref.version}.json"
        return self.root / "catalog" / "models" / ref.folder / f"{ref.revision_key}.json"

    def manifest_path(self, ref: Ref) -> Path:
        return self.record_path(ref).with_suffix(".manifest.json")

    def data_dir(self, ref: DatasetRef) -> Path:
        return self.root / "data" / ref.name / str(ref.version)

    def snapshot_dir(self, ref: ModelRef, commit: str) -> Path:
        return self.hf_cache / ref.folder / "snapshots" / commit

    def resolve(self, ref: Ref) -> Ref:
        """Give a dataset ref without version its newest version; NotFoundError if unknown."""
        if isinstance(ref, ModelRef) or ref.version is not None:
            if not self.record_path(ref).exists():
                hint = "run `starverse store ls` to see entries" + (
                    f", or `starverse store pull {ref}`" if isinstance(ref, ModelRef) else ""
                )
                raise NotFoundError(f"{ref} is not in the catalog", hint=hint)
            return ref
        newest: tuple[float, str] | None = None
        folder = self.dataset_folder(ref.name)
        if folder.is_dir():
            for p in folder.glob("*.json"):
                if p.name.endswith(".manifest.json") or p.name.startswith("."):
                    continue
                data = _read_json(p)
                if data is not None and (newest is None or data.get("added_at", 0) > newest[0]):
                    newest = (float(data.get("added_at", 0)), p.name[: -len(".json")])
        if newest is None:
            raise NotFoundError(
                f"no dataset named {ref.name!r} in the catalog",
                hint="run `starverse store ls` to see entries, or `starverse store add NAME SOURCE`",
            )
        return DatasetRef(ref.name, newest[1])

    def read_entry(self, ref: Ref) -> Entry:
        data = _read_json(self.record_path(ref))
        if data is None:
            raise NotFoundError(f"{ref} is not in the catalog", hint="run `starverse store ls` to see entries")
        return Entry.from_json(data)

    def write_entry(self, ref: Ref, entry: Entry) -> None:
        write_json_atomic(self.record_path(ref), entry.to_json())

    def read_manifest(self, ref: Ref) -> Manifest | None:
        data = _read_json(self.manifest_path(ref))
        return None if data is None else Manifest.from_json(data)

    def write_manifest(self, ref: Ref, manifest: Manifest) -> None:
        write_json_atomic(self.manifest_path(ref), manifest.to_json())

    def all_refs(self) -> list[Ref]:
        out: list[Ref] = []
        for p in sorted((self.root / "catalog" / "datasets").glob("*/*.json")):
            if not p.name.endswith(".manifest.json") and not p.name.startswith("."):
                out.append(DatasetRef(p.parent.name, p.name[: -len(".json")]))
        for p in sorted((self.root / "catalog" / "models").glob("*/*.json")):
            if not p.name.endswith(".manifest.json") and not p.name.startswith("."):
                data = _read_json(p)
                if data is not None:
                    org, _, repo = str(data["name"]).partition("/")
                    out.append(ModelRef(org, repo, str(data["version"])))
        return out

    # -- usage and removal -----------------------------------------------------
    def touch(self, key: str) -> None:
        """Record a use; at most one write a minute per entry (a stat is cheaper on NFS)."""
        path = self.usage_path(key)
        try:
            if time.time() - path.stat().st_mtime < 60:
                return
            os.utime(path)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()

    def last_used(self, key: str) -> float | None:
        try:
            return self.usage_path(key).stat().st_mtime
        except FileNotFoundError:
            return None

    def remove_data(self, ref: Ref, manifest: Manifest | None) -> None:
        """Drop an entry's bytes; the manifest goes first so nobody sees it as cached."""
        self.manifest_path(ref).unlink(missing_ok=True)
        if isinstance(ref, DatasetRef):
            _writable_rmtree(self.data_dir(ref))
            return
        storage = self.hf_cache / ref.folder
        if manifest is not None and manifest.commit:
            _writable_rmtree(self.snapshot_dir(ref, manifest.commit))
        used = {p.readlink().name for p in (storage / "snapshots").rglob("*") if p.is_symlink()}
        for blob in (storage / "blobs").glob("*") if (storage / "blobs").is_dir() else []:
            if blob.name not in used:
                blob.unlink(missing_ok=True)

    def remove_record(self, ref: Ref) -> None:
        self.record_path(ref).unlink(missing_ok=True)
        self.usage_path(self.key(ref)).unlink(missing_ok=True)
        self.progress_path(self.key(ref)).unlink(missing_ok=True)


def dir_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path`` without following links; (0, 0) when absent."""
    total = count = 0
    if not path.exists():
        return 0, 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(f"{dirpath}/{f}")
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
                count += 1
    return total, count
