"""The small records of entries on the store, read without following a link: who owns a name
and an entry (the ``lstat`` uid of its folder and record), the entry record (read, write,
create once), the manifest (read, write), which version a bare dataset name means
(:meth:`LayoutRecords.resolve`) and the listing of every entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import stat
import uuid
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import Owner, inside, open_under
from jupyter_starverse.errors import (
    InvalidNameError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    did_you_mean,
)

from ._manifest import Manifest
from ._names import DatasetRef, ModelRef, Ref, check_name, parse_hf
from ._paths import StorePaths
from ._perms import denied, file_mode, make_dirs
from ._progress import write_json_atomic
from ._types import Entry

__all__ = ["LayoutRecords"]

log = logging.getLogger(__name__)

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


class LayoutRecords(StorePaths):
    """Owners, entry records and manifests under one store root."""

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
