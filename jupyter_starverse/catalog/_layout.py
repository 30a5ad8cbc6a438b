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

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, InvalidNameError, NotFoundError, StoreError

from ._names import DatasetRef, ModelRef, Ref, check_name, parse_hf
from ._perms import make_dirs, make_read_only, make_writable, rmtree
from ._progress import write_json_atomic
from ._types import Entry, FileRecord

__all__ = ["Layout", "Manifest", "store_root"]

log = logging.getLogger(__name__)
_COMMIT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


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
        """Parse a manifest; ``ValueError`` for anything malformed (the store is shared: untrusted)."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise ValueError("not a manifest (no list of files)")
        files = []
        for f in data["files"]:
            if not isinstance(f, dict) or not isinstance(f.get("path"), str) or not _is_int(f.get("size")):
                raise ValueError(f"bad file record {f!r}")
            if not all(f.get(k) is None or isinstance(f.get(k), str) for k in ("sha256", "etag")):
                raise ValueError(f"bad file record {f!r}")
            files.append(FileRecord(f["path"], int(f["size"]), f.get("sha256"), f.get("etag")))
        commit = data.get("commit")
        if commit is not None and (not isinstance(commit, str) or not _COMMIT_RE.match(commit) or ".." in commit):
            raise ValueError(f"bad commit {commit!r}")
        completed = data.get("completed_at")
        if (
            not isinstance(data.get("ref"), str)
            or not isinstance(completed, int | float)
            or isinstance(completed, bool)
        ):
            raise ValueError("no ref or completion time")
        return cls(str(data["ref"]), tuple(files), float(completed), commit)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, OSError):  # half-written, binary junk, or a folder where a file should be
        return None


def _entry_from(data: Any, ref: Ref) -> Entry:
    """The entry record of ``ref``; ``ValueError`` when malformed or recorded for another entry."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for key in ("kind", "name", "version", "source", "ref"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"field {key!r} missing or not text")
    for key in ("description", "license"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f"field {key!r} is not text")
    added = data.get("added_at", 0.0)
    if not isinstance(added, int | float) or isinstance(added, bool):
        raise ValueError("field 'added_at' is not a number")
    entry = Entry.from_json(data)
    expected = (ref.kind, ref.name, ref.version) if isinstance(ref, DatasetRef) else (ref.kind, ref.name, ref.revision)
    if (entry.kind, entry.name, entry.version) != expected:
        raise ValueError(f"it describes {entry.kind} {entry.name}@{entry.version}, not {ref}")
    return entry


def _writable_rmtree(path: Path) -> None:
    # Published folders are read-only (0555): perms.rmtree gives them their write bit back first.
    rmtree(path)


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
        return f"{Layout._hf_prefix(ref)}.{ref.org}--{ref.repo}@{ref.revision_key}"

    @staticmethod
    def _hf_prefix(ref: ModelRef) -> str:
        return "hf" if ref.repo_type == "model" else "hfds"

    @staticmethod
    def lease_key(ref: Ref) -> str:
        # One lease per HF repo: its revisions share blobs.
        return Layout.key(ref) if isinstance(ref, DatasetRef) else f"{Layout._hf_prefix(ref)}.{ref.org}--{ref.repo}"

    def lease_path(self, key: str) -> Path:
        return self.root / ".leases" / f"{key}.lease"

    def file_lease_path(self, key: str, rel: str) -> Path:
        digest = hashlib.sha1(rel.encode(), usedforsecurity=False).hexdigest()[:20]
        return self.root / ".leases" / "files" / f"{key}.{digest}.lease"

    def progress_path(self, key: str) -> Path:
        return self.root / ".progress" / f"{key}.json"

    def usage_path(self, key: str) -> Path:
        return self.root / ".usage" / key

    def holds_dir(self, key: str) -> Path:
        return self.root / ".holds" / key

    def verify_path(self, key: str) -> Path:
        return self.root / ".verify" / f"{key}.json"

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
        corrupt: str | None = None
        folder = self.dataset_folder(ref.name)
        if folder.is_dir():
            for p in folder.glob("*.json"):
                if p.name.endswith(".manifest.json") or p.name.startswith("."):
                    continue
                data = _read_json(p)
                added = data.get("added_at", 0) if isinstance(data, dict) else None
                if not isinstance(added, int | float) or isinstance(added, bool):
                    with contextlib.suppress(InvalidNameError):  # read_entry will name what is wrong
                        corrupt = check_name(p.name[: -len(".json")], what="version")
                    continue
                if newest is None or added > newest[0]:
                    newest = (float(added), p.name[: -len(".json")])
        if newest is None and corrupt is not None:
            return DatasetRef(ref.name, corrupt)
        if newest is None:
            raise NotFoundError(
                f"no dataset named {ref.name!r} in the catalog",
                hint="run `starverse store ls` to see entries, or `starverse store add NAME SOURCE`",
            )
        return DatasetRef(ref.name, newest[1])

    def read_entry(self, ref: Ref) -> Entry:
        """The record of ``ref``: NotFoundError when absent, StoreError when corrupt or foreign."""
        path = self.record_path(ref)
        data = _read_json(path)
        if data is None and not path.exists():
            raise NotFoundError(f"{ref} is not in the catalog", hint="run `starverse store ls` to see entries")
        try:
            return _entry_from(data, ref)
        except ValueError as e:
            raise StoreError(
                f"the catalog record of {ref} ({path}) is corrupt: {e}",
                hint=f"remove it with `starverse store rm {ref}` and add it again",
            ) from e

    def write_entry(self, ref: Ref, entry: Entry) -> None:
        write_json_atomic(self.record_path(ref), entry.to_json())

    def create_entry(self, ref: Ref, entry: Entry) -> Entry | None:
        """Write the record of ``ref`` only if there is none (atomic across processes and NFS).

        Returns None when ours was written, else the record that was there first.
        """
        path = self.record_path(ref)
        make_dirs(path.parent)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(entry.to_json(), f)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # fails if the record exists: never overwrites a complete one
                return None
            except FileExistsError:
                pass
            except OSError:
                if tmp.stat().st_nlink == 2:  # NFS: the reply was lost but the link was made
                    return None
                raise
        finally:
            tmp.unlink(missing_ok=True)
        return self.read_entry(ref)

    def read_manifest(self, ref: Ref) -> Manifest | None:
        """The manifest of ``ref``; None when absent, or corrupt or foreign (logged; a pull rewrites it)."""
        path = self.manifest_path(ref)
        data = _read_json(path)
        if data is None:
            if path.exists():
                log.warning("ignoring unreadable manifest %s of %s", path, ref)
            return None
        try:
            manifest = Manifest.from_json(data)
        except ValueError as e:
            log.warning("ignoring corrupt manifest %s of %s: %s", path, ref, e)
            return None
        if manifest.ref != str(ref):
            log.warning("ignoring manifest %s: it is the manifest of %s, not of %s", path, manifest.ref, ref)
            return None
        return manifest

    def write_manifest(self, ref: Ref, manifest: Manifest) -> None:
        write_json_atomic(self.manifest_path(ref), manifest.to_json())

    def mount_dir(self, ref: Ref, manifest: Manifest) -> Path:
        """The folder a job reads: the data folder, or the model's snapshot at the manifest's commit."""
        if isinstance(ref, DatasetRef):
            return self.data_dir(ref)
        return self.snapshot_dir(ref, str(manifest.commit))

    def publish(self, ref: Ref, manifest: Manifest) -> None:
        """Make the entry read-only for everyone (files 0444, folders 0555), then write its manifest."""
        top = self.mount_dir(ref, manifest)
        make_read_only(top)
        if isinstance(ref, ModelRef):
            for f in manifest.files:  # the blobs behind the snapshot's links
                real = (top / f.path).resolve()
                with contextlib.suppress(OSError):
                    if real.is_file() and stat.S_IMODE(real.stat().st_mode) != 0o444:
                        real.chmod(0o444)
        self.verify_path(self.key(ref)).unlink(missing_ok=True)
        self.write_manifest(ref, manifest)

    def unpublish(self, ref: Ref, manifest: Manifest | None) -> None:
        """Folders of an entry writable again (before a repair); no-op for what is not ours."""
        if isinstance(ref, DatasetRef):
            make_writable(self.data_dir(ref))
        elif manifest is not None and manifest.commit:
            make_writable(self.snapshot_dir(ref, manifest.commit))

    def all_refs(self) -> list[Ref]:
        """Every entry whose record file is where its name says; anything else is logged and skipped."""
        out: list[Ref] = []
        for p in sorted((self.root / "catalog" / "datasets").glob("*/*.json")):
            if not p.name.endswith(".manifest.json") and not p.name.startswith("."):
                try:
                    out.append(
                        DatasetRef(check_name(p.parent.name), check_name(p.name[: -len(".json")], what="version"))
                    )
                except InvalidNameError:
                    log.warning("ignoring foreign file %s in the catalog", p)
        for p in sorted((self.root / "catalog" / "models").glob("*/*.json")):
            if not p.name.endswith(".manifest.json") and not p.name.startswith("."):
                data = _read_json(p)
                name, version = (data.get("name"), data.get("version")) if isinstance(data, dict) else (None, None)
                try:
                    ref = parse_hf(f"hf:{name}@{version}")
                except InvalidNameError:
                    ref = None
                if ref is None or ref.folder != p.parent.name or f"{ref.revision_key}.json" != p.name:
                    log.warning("ignoring corrupt or foreign model record %s", p)
                    continue
                out.append(ref)
        return out

    # -- usage and removal -----------------------------------------------------
    def touch(self, key: str) -> None:
        """Record a use; at most one write a minute per entry (a stat is cheaper on NFS).

        The stamp may belong to another user (utime is refused then): we replace it by our
        own through a rename, and when even that is refused the use is simply not recorded;
        a usage stamp never blocks a mount.
        """
        path = self.usage_path(key)
        try:
            if time.time() - path.stat().st_mtime < 60:
                return
            os.utime(path)
        except FileNotFoundError:
            try:
                make_dirs(path.parent)
                path.touch()
            except PermissionError as e:
                log.debug("cannot record the use of %s: %s", key, e)
        except PermissionError:
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            try:
                tmp.touch()
                tmp.replace(path)
            except OSError as e:
                log.debug("cannot record the use of %s: %s", key, e)
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)

    def last_used(self, key: str) -> float | None:
        try:
            return self.usage_path(key).stat().st_mtime
        except FileNotFoundError:
            return None

    def remove_data(self, ref: Ref, manifest: Manifest | None) -> None:
        """Drop an entry's bytes; the manifest goes first so nobody sees it as cached."""
        self.manifest_path(ref).unlink(missing_ok=True)
        if isinstance(ref, DatasetRef):
            data = self.data_dir(ref)
            _writable_rmtree(data)
            _writable_rmtree(data.with_name(f".{data.name}.staging"))  # left by a batch pull that crashed
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
        self.verify_path(self.key(ref)).unlink(missing_ok=True)


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
