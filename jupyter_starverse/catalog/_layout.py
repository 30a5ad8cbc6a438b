"""Where everything lives on the store. The catalog is these files, not a process.

::

    STORE/
      catalog/datasets/NAME/VERSION.json            entry record (written by add)
      catalog/datasets/NAME/VERSION.manifest.json   complete + verified (written last by pull):
                                                    size, sha256, mtime and ctime of every file
      catalog/models/models--ORG--REPO/REV.json          entry record (written when a pull starts)
      catalog/models/models--ORG--REPO/REV.manifest.json commit + verified files
      data/NAME/VERSION/...                         dataset files (read-only, mount path)
      hf/hub/                                       HF_HUB_CACHE (huggingface_hub layout)
      .leases/u<uid>/  .progress/  .usage/          single-flight (one folder per user), live progress, last use

Every entry has an owner: the uid of its record file (``lstat``, never what the record says).
Only the owner, root or an admin changes it (:func:`jupyter_starverse._volume.may_act`);
a name belongs to whoever made ``catalog/datasets/NAME/``. Nothing here follows a link out
of the store: records are read with ``openat(O_NOFOLLOW)`` (:func:`_volume.open_under`) and
removed with :func:`_volume.remove_under`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
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

from jupyter_starverse._volume import Owner, inside, open_under, remove_under
from jupyter_starverse.errors import (
    BadInputError,
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    did_you_mean,
)

from ._names import DatasetRef, ModelRef, Ref, check_name, parse_hf
from ._perms import denied, file_mode, make_dirs, make_read_only, make_writable, translate_permissions
from ._progress import write_json_atomic
from ._seal import FolderStamp, stamp_files, stamp_folders
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
    """Proof that an entry is complete: every file with its verified size and hash.

    Since publication also stamps (``_seal``): every file's mtime and ctime, and for a dataset
    its ``folders`` (None in older manifests: those are checked by size only).
    """

    ref: str
    files: tuple[FileRecord, ...]
    completed_at: float
    commit: str | None = None
    owner: Owner | None = None  # the entry's owner when it was published (checked by verify and mount)
    folders: tuple[FolderStamp, ...] | None = None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "commit": self.commit,
            "completed_at": self.completed_at,
            "owner": self.owner.to_json() if self.owner is not None else None,
            "files": [f.to_json() for f in self.files],
            **({"folders": [d.to_json() for d in self.folders]} if self.folders is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        """Parse a manifest; ``ValueError`` for anything malformed (the store is shared: untrusted)."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise ValueError("not a manifest (no list of files)")
        files = []
        for f in data["files"]:  # tens of thousands per manifest, read by every mount: no helper per field
            if type(f) is not dict:
                raise ValueError(f"bad file record {f!r}")
            path, size, sha, etag = f.get("path"), f.get("size"), f.get("sha256"), f.get("etag")
            mtime, ctime = f.get("mtime_ns"), f.get("ctime_ns")
            if (
                type(path) is not str
                or type(size) is not int  # not a bool either
                or size < 0
                or (sha is not None and type(sha) is not str)
                or (etag is not None and type(etag) is not str)
                or (mtime is not None and (type(mtime) is not int or mtime < 0))
                or (ctime is not None and (type(ctime) is not int or ctime < 0))
            ):
                raise ValueError(f"bad file record {f!r}")
            files.append(FileRecord(path, size, sha, etag, mtime, ctime))
        folders = None
        if data.get("folders") is not None:
            if not isinstance(data["folders"], list):
                raise ValueError("bad folders")
            folders = []
            for d in data["folders"]:
                if not isinstance(d, dict) or not isinstance(d.get("path"), str):
                    raise ValueError(f"bad folder record {d!r}")
                if not (_is_int(d.get("mtime_ns")) and _is_int(d.get("ctime_ns"))):
                    raise ValueError(f"bad folder record {d!r}")
                folders.append(FolderStamp(d["path"], d["mtime_ns"], d["ctime_ns"]))
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
        owner = data.get("owner")
        if owner is not None and not (isinstance(owner, dict) and _is_int(owner.get("uid"))):
            raise ValueError(f"bad owner {owner!r}")
        by = Owner(int(owner["uid"]), str(owner.get("name") or f"uid {owner['uid']}")) if owner else None
        stamps = tuple(folders) if folders is not None else None
        return cls(str(data["ref"]), tuple(files), float(completed), commit, by, stamps)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_CORRUPT = object()  # a record that is there but is no JSON (half-written, binary junk, a folder)


def _owner(st: os.stat_result) -> Owner:
    return Owner.of_uid(st.st_uid)


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
        """The single-flight lease of ``key``, in this user's own lease folder.

        Only an entry's owner pulls it, so its leases live in ``.leases/u<uid>/``, a folder only
        that uid writes (``.leases`` itself is sticky and group-writable): another member cannot
        plant a lease that the owner, in a sticky folder, could never remove.
        """
        return self.root / ".leases" / f"u{os.geteuid()}" / f"{key}.lease"

    def file_lease_path(self, key: str, rel: str) -> Path:
        digest = hashlib.sha1(rel.encode(), usedforsecurity=False).hexdigest()[:20]
        return self.root / ".leases" / f"u{os.geteuid()}" / f"{key}.{digest}.lease"

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

    def name_folder(self, ref: Ref) -> Path:
        """The folder of a name's records: whoever made it owns the name."""
        return self.record_path(ref).parent

    def name_owner(self, ref: Ref) -> Owner | None:
        """Who owns ``ref``'s name (its records' folder); None when nobody has taken it yet."""
        folder = self.name_folder(ref)
        inside(self.root, folder.parent)
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            raise PermissionDeniedError(
                f"{folder} is not a folder (a link or a file took the place of the name {ref.name!r})",
                hint="the store's admin should remove it; pick another name meanwhile",
            )
        return _owner(st)

    def _load(self, path: Path, action: str) -> Any:
        """The JSON at ``path``, read without following a link: None when absent, ``_CORRUPT`` when no JSON.

        A file we may not read is a :class:`PermissionDeniedError` with the sharing hint (never
        "corrupt"); a link at any level is refused the same way.
        """
        try:
            fd = open_under(self.root, path)
        except FileNotFoundError:
            return None
        except PermissionError as e:
            raise denied(e, action) from e
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                raise denied(e, action) from e
            return _CORRUPT
        try:
            with os.fdopen(fd, "rb") as f:
                return json.loads(f.read(64 << 20))
        except PermissionError as e:
            raise denied(e, action) from e
        except (ValueError, OSError):  # half-written, binary junk, or a folder where a file should be
            return _CORRUPT

    def resolve(self, ref: Ref) -> Ref:
        """Give a dataset ref without version its newest *original* version; NotFoundError if unknown.

        The rule (README, "Versions"): a bare NAME is the newest version that was added
        (``store add``, a pull, a snapshot), never one a data step derived from it
        (``NAME@1-clean``, ``NAME@1-dedup``): those are used only when named, so a re-run
        notebook mounts the same data after someone ran a step. When only derived versions
        are left, the newest of them is used.

        Only versions whose record belongs to the name's owner (or root) count: another user's
        record planted in an old, group-writable folder never becomes what the name means.
        """
        if isinstance(ref, ModelRef) or ref.version is not None:
            path = self.record_path(ref)
            inside(self.root, path)
            if not os.path.lexists(path):
                known = [str(r) for r in self.all_refs()]
                hint = (
                    did_you_mean(str(ref), known)
                    + "run `starverse store ls` to see entries"
                    + (f", or `starverse store pull {ref}`" if isinstance(ref, ModelRef) else "")
                )
                raise NotFoundError(f"{ref} is not in the catalog", hint=hint)
            return ref
        newest: tuple[float, str] | None = None
        newest_derived: tuple[float, str] | None = None
        corrupt: str | None = None
        refused: PermissionDeniedError | None = None
        folder = self.dataset_folder(ref.name)
        owner = self.name_owner(ref)
        if owner is not None:
            try:
                names = sorted(os.listdir(folder))  # noqa: PTH208
            except PermissionError as e:  # group mode and not in the group, or another user's umask
                raise denied(e, f"read the versions of {ref.name!r}") from e
            for p in (folder / n for n in names):
                if not p.name.endswith(".json") or p.name.endswith(".manifest.json") or p.name.startswith("."):
                    continue
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode) or st.st_uid not in (owner.uid, 0):
                    log.warning("ignoring %s: uid %d wrote it, not %s who owns %r", p, st.st_uid, owner, ref.name)
                    continue
                version = p.name[: -len(".json")]
                try:
                    data = self._load(p, "read the catalog")
                except PermissionDeniedError as e:
                    refused = e
                    continue
                added = data.get("added_at", 0) if isinstance(data, dict) else None
                if not isinstance(added, int | float) or isinstance(added, bool):
                    with contextlib.suppress(InvalidNameError):  # read_entry will name what is wrong
                        corrupt = check_name(version, what="version")
                    continue
                # records written before derived_from: NAME@1-clean beside NAME@1 is derived too
                derived = isinstance(data, dict) and isinstance(data.get("derived_from"), str)
                derived = derived or ("-" in version and f"{version.rsplit('-', 1)[0]}.json" in names)
                if derived:  # a data step's output: only named (NAME@1-clean) or when no original is left
                    if newest_derived is None or added > newest_derived[0]:
                        newest_derived = (float(added), version)
                elif newest is None or added > newest[0]:
                    newest = (float(added), version)
        newest = newest or newest_derived
        if newest is None and refused is not None:
            raise refused
        if newest is None and corrupt is not None:
            return DatasetRef(ref.name, corrupt)
        if newest is None:
            dataset_names = {str(r).split("@")[0] for r in self.all_refs() if isinstance(r, DatasetRef)}
            raise NotFoundError(
                f"no dataset named {ref.name!r} in the catalog",
                hint=did_you_mean(ref.name, dataset_names)
                + "run `starverse store ls` to see entries, or `starverse store add NAME SOURCE`",
            )
        return DatasetRef(ref.name, newest[1])

    def entry_owner(self, ref: Ref, *, link_ok: bool = False) -> Owner:
        """The owner of ``ref``: its record file's uid (NotFoundError when there is none).

        A record that is a link is refused (PermissionDeniedError), unless ``link_ok`` (to
        remove it: then the link's own owner is the owner)."""
        path = self.record_path(ref)
        inside(self.root, path.parent)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            hint = "run `starverse store ls` to see entries"
            raise NotFoundError(f"{ref} is not in the catalog", hint=hint) from None
        if stat.S_ISLNK(st.st_mode) and not link_ok:
            raise PermissionDeniedError(
                f"the catalog record of {ref} ({path}) is a link; refusing to follow it",
                hint="someone replaced the record with a link: its owner or the store's admin should remove it",
            )
        return _owner(st)

    def read_entry(self, ref: Ref) -> Entry:
        """The record of ``ref``: NotFoundError when absent, StoreError when corrupt or foreign,
        PermissionDeniedError when we may not read it (another user's umask) or it is a link."""
        path = self.record_path(ref)
        owner = self.entry_owner(ref)
        data = self._load(path, f"read the catalog record of {ref}")
        if data is None:
            raise NotFoundError(f"{ref} is not in the catalog", hint="run `starverse store ls` to see entries")
        try:
            if data is _CORRUPT:
                raise ValueError("not JSON")
            entry = _entry_from(data, ref)
        except ValueError as e:
            raise StoreError(
                f"the catalog record of {ref} ({path}) is corrupt: {e}",
                hint=f"its owner ({owner}) can remove it with `starverse store rm {ref}` and add it again",
            ) from e
        return dataclasses.replace(entry, owner=owner)

    def write_entry(self, ref: Ref, entry: Entry) -> None:
        path = self.record_path(ref)
        make_dirs(path.parent)
        inside(self.root, path)
        write_json_atomic(path, entry.to_json())

    def create_entry(self, ref: Ref, entry: Entry) -> Entry | None:
        """Write the record of ``ref`` only if there is none (atomic across processes and NFS).

        Returns None when ours was written, else the record that was there first.
        """
        path = self.record_path(ref)
        make_dirs(path.parent)
        inside(self.root, path)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            fd = open_under(self.root, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), file_mode(path.parent))
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
        """The manifest of ``ref``; None when absent, or corrupt or foreign (logged; a pull rewrites it).

        A manifest we may not read is a PermissionDeniedError (another user's umask), not "missing".
        """
        path = self.manifest_path(ref)
        try:
            data = self._load(path, f"read the manifest of {ref}")
        except PermissionDeniedError:
            if path.is_symlink():
                log.warning("ignoring manifest %s of %s: it is a link", path, ref)
                return None
            raise
        if data is None:
            return None
        if data is _CORRUPT:
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
        path = self.manifest_path(ref)
        inside(self.root, path)
        write_json_atomic(path, manifest.to_json())

    def mount_dir(self, ref: Ref, manifest: Manifest) -> Path:
        """The folder a job reads: the data folder, or the model's snapshot at the manifest's commit."""
        if isinstance(ref, DatasetRef):
            return self.data_dir(ref)
        return self.snapshot_dir(ref, str(manifest.commit))

    def foreign(self, ref: Ref, manifest: Manifest | None) -> list[str]:
        """What of a published entry is not its owner's (a few ``lstat`` calls, no file read).

        The manifest file, the owner it records (when ``manifest`` is given), and the folders a
        mount hands out must all belong to the entry's owner (or root): anything else means
        someone swapped them. A model's snapshot folder needs ``manifest`` (its commit).
        """
        owner = self.entry_owner(ref)
        trusted = (owner.uid, 0)
        out = []
        if manifest is not None and manifest.owner is not None and manifest.owner.uid != owner.uid:
            out.append(f"manifest (records {manifest.owner.name}, uid {manifest.owner.uid})")
        checks = [("manifest", self.manifest_path(ref))]
        if isinstance(ref, DatasetRef):
            top = self.data_dir(ref)
            checks += [(f"data/{ref.name}", top.parent), (f"data/{ref.name}/{ref.version}", top)]
        elif manifest is not None:
            checks += [("snapshot", self.mount_dir(ref, manifest))]
        for label, path in checks:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                out.append(f"{label} (a link)")
            elif st.st_uid not in trusted:
                out.append(f"{label} (owned by {Owner.of_uid(st.st_uid)}, not {owner})")
        return out

    @translate_permissions("publish a store entry")
    def publish(self, ref: Ref, manifest: Manifest) -> None:
        """Make the entry read-only for everyone (files 0444, folders 0555), then write its manifest
        (recording the entry's owner, checked by ``verify`` and ``mount``, and the stamps of its
        files and folders as they are now, read-only: :meth:`seal`)."""
        top = self.mount_dir(ref, manifest)
        inside(self.root, top)
        make_read_only(top)
        if isinstance(ref, ModelRef):
            hub = self.hf_cache.resolve()
            blobs = f"{hub}/{ref.folder}/blobs"
            for f in manifest.files:  # the blobs behind the snapshot's links
                with contextlib.suppress(OSError):
                    if f.etag and "/" not in f.etag and not f.etag.startswith("."):
                        # huggingface_hub names a blob by the file's ETag: one stat, no path resolution
                        blob = f"{blobs}/{f.etag}"
                        st = os.stat(blob, follow_symlinks=False)  # noqa: PTH116 (no Path per file)
                        if stat.S_ISREG(st.st_mode):
                            if stat.S_IMODE(st.st_mode) != 0o444:
                                os.chmod(blob, 0o444)  # noqa: PTH101 (no Path object per file)
                            continue
                    real = (top / f.path).resolve()
                    if real.is_relative_to(hub) and real.is_file() and stat.S_IMODE(real.stat().st_mode) != 0o444:
                        real.chmod(0o444)
        with contextlib.suppress(OSError):
            self.verify_path(self.key(ref)).unlink(missing_ok=True)
        self.write_manifest(ref, self.seal(ref, dataclasses.replace(manifest, owner=self.entry_owner(ref))))

    def seal(self, ref: Ref, manifest: Manifest) -> Manifest:
        """``manifest`` with every file's size, mtime and ctime as they are now (one stat each), and for
        a dataset its folders' (a model's snapshot folder is shared by revisions: files only)."""
        top = self.mount_dir(ref, manifest)
        folders = stamp_folders(top) if isinstance(ref, DatasetRef) else None
        return dataclasses.replace(manifest, files=stamp_files(top, manifest.files), folders=folders)

    def unpublish(self, ref: Ref, manifest: Manifest | None) -> None:
        """Folders of an entry writable again by their owner (before a repair); no-op for what is not ours."""
        if isinstance(ref, DatasetRef):
            inside(self.root, self.data_dir(ref))
            make_writable(self.data_dir(ref))
        elif manifest is not None and manifest.commit:
            inside(self.root, self.snapshot_dir(ref, manifest.commit))
            make_writable(self.snapshot_dir(ref, manifest.commit))

    def all_refs(self) -> list[Ref]:
        """Every entry whose record file is where its name says; anything else is logged and skipped."""
        out: list[Ref] = []
        for p in sorted((self.root / "catalog" / "datasets").glob("*/*.json")):
            if p.parent.is_symlink():
                log.warning("ignoring %s in the catalog: it is a link", p.parent)
                continue
            if not p.name.endswith(".manifest.json") and not p.name.startswith("."):
                try:
                    out.append(
                        DatasetRef(check_name(p.parent.name), check_name(p.name[: -len(".json")], what="version"))
                    )
                except InvalidNameError:
                    log.warning("ignoring foreign file %s in the catalog", p)
        for p in sorted((self.root / "catalog" / "models").glob("*/*.json")):
            if p.parent.is_symlink() or p.is_symlink():
                log.warning("ignoring %s in the catalog: it is a link", p)
                continue
            if not p.name.endswith(".manifest.json") and not p.name.startswith("."):
                try:
                    data = self._load(p, "list the catalog")
                except PermissionDeniedError as e:
                    log.warning("skipping %s in the listing: %s", p, e)
                    continue
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

        The stamp is never followed: a link planted in its place is left alone (the use is not
        recorded). A stamp of another user's is bumped when the group may write it (``0660``
        in group mode), else the use is simply not recorded; a usage stamp never blocks a mount.
        """
        path = self.usage_path(key)
        try:
            inside(self.root, path)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                make_dirs(path.parent)
                with contextlib.suppress(FileExistsError):
                    fd = open_under(self.root, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    try:
                        os.fchmod(fd, file_mode(path.parent, group_writable=True))
                    finally:
                        os.close(fd)
                return
            if not stat.S_ISREG(st.st_mode):
                log.warning("not recording the use of %s: %s is not a plain file", key, path)
                return
            if time.time() - st.st_mtime < 60:
                return
            os.utime(path, follow_symlinks=False)
        except (PermissionError, PermissionDeniedError) as e:
            log.debug("cannot record the use of %s: %s", key, e)

    def last_used(self, key: str) -> float | None:
        try:
            return os.lstat(self.usage_path(key)).st_mtime
        except FileNotFoundError:
            return None

    def data_paths(self, ref: Ref, manifest: Manifest | None) -> list[Path]:
        """The folders :meth:`remove_data` deletes, each checked: no link at any level below the root."""
        if isinstance(ref, DatasetRef):
            data = self.data_dir(ref)
            paths = [data, data.with_name(f".{data.name}.staging")]  # staging: left by a batch pull that crashed
        else:
            paths = [self.hf_cache / ref.folder / "blobs"]
            if manifest is not None and manifest.commit:
                paths.append(self.snapshot_dir(ref, manifest.commit))
        for p in paths:
            inside(self.root, p)
        return paths

    def remove_data(self, ref: Ref, manifest: Manifest | None) -> None:
        """Drop an entry's bytes; the manifest goes first so nobody sees it as cached.

        Nothing is followed: a link in place of a folder is refused (:func:`_volume.inside`),
        a link met inside is unlinked, never its target."""
        paths = self.data_paths(ref, manifest)
        self.remove(self.manifest_path(ref))
        if isinstance(ref, DatasetRef):
            for p in paths:
                remove_under(self.root, p)
            return
        blobs = paths[0]
        for p in paths[1:]:
            remove_under(self.root, p)
        snapshots = self.hf_cache / ref.folder / "snapshots"
        inside(self.root, snapshots)
        used = set()
        for dirpath, _dirs, names in os.walk(snapshots):
            for n in names:
                link = Path(dirpath) / n
                if link.is_symlink():
                    used.add(link.readlink().name)
        if blobs.is_dir() and not blobs.is_symlink():
            for blob in blobs.iterdir():
                if blob.name not in used:
                    remove_under(self.root, blob)

    def remove(self, path: Path) -> None:
        """Delete ``path`` below the root: a file, or a link itself (never its target), or a folder
        (:func:`_volume.remove_under`); a link among the folders above it is refused."""
        inside(self.root, path.parent)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            remove_under(self.root, path)
        else:
            path.unlink(missing_ok=True)

    def remove_record(self, ref: Ref) -> None:
        """The record, then the entry's stamps; a stamp of another user's (sticky folder) stays."""
        self.remove(self.record_path(ref))
        for p in (self.usage_path(self.key(ref)), self.progress_path(self.key(ref)), self.verify_path(self.key(ref))):
            try:
                self.remove(p)
            except (PermissionError, PermissionDeniedError) as e:
                log.debug("leaving %s: %s", p, e)


def dir_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path`` without following links; (0, 0) when absent."""
    total = count = 0
    if not path.is_dir() or path.is_symlink():  # a link in place of an entry's folder is not counted
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
