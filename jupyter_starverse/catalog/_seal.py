"""The cheap half of a published entry's integrity: one ``stat`` per file against its manifest.

When an entry is published (made read-only, then its manifest written), every file's size,
mtime and ctime (nanoseconds) go into the manifest, and for a dataset also the mtime and
ctime of each of its folders (:func:`stamp_files`, :func:`stamp_folders`). Writing a file
changes its mtime and ctime; putting the mtime back (``touch -d``) changes the ctime again,
and no call sets a ctime; a chmod or chown changes it too; adding, removing or renaming a
file changes its folder's. So :func:`check` sees a change made since publication, by anyone
(root included), without reading a byte: one ``stat`` per file and folder, no hashing.

What it cannot tell (were the bytes changed, or only touched?) ``store verify`` settles by
hashing; when the bytes match, the owner's verify records the new stats (a re-seal).
A manifest written before these fields existed is checked by size only (``size_only``).
A model's snapshot folder is shared by the revisions that resolve to one commit, so only
its files (the blobs behind the links) are stamped, not its folders.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ._types import FileRecord

__all__ = ["FolderStamp", "StatCheck", "check", "stamp_files", "stamp_folders"]

SHOWN = 5  # changed paths named in one line (the rest are counted)


@dataclass(frozen=True)
class FolderStamp:
    """A folder of a published dataset (``path`` relative to it, ``""`` for the top) as it was."""

    path: str
    mtime_ns: int
    ctime_ns: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "mtime_ns": self.mtime_ns, "ctime_ns": self.ctime_ns}


@dataclass(frozen=True)
class StatCheck:
    """What :func:`check` found: files (and folders, named with a trailing ``/``) changed or missing."""

    ref: str
    checked: int
    changed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    size_only: int = 0  # files whose manifest records no mtime/ctime (an older manifest): size compared only

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing)

    @property
    def paths(self) -> tuple[str, ...]:
        return (*self.changed, *(f"{p} (missing)" for p in self.missing))

    def named(self, limit: int = SHOWN) -> str:
        """``a.txt, b.txt (missing) and 7 more``."""
        paths = self.paths
        shown = ", ".join(paths[:limit])
        return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")

    @property
    def problem(self) -> str | None:
        """One line for ``status``/``mount``; None when nothing changed."""
        if self.ok:
            return None
        n = len(self.changed) + len(self.missing)
        return f"{n} path{'s' if n != 1 else ''} changed since it was published (size, mtime or ctime): {self.named()}"

    @property
    def note(self) -> str | None:
        if not self.size_only:
            return None
        return (
            f"{self.size_only} of {self.checked} files checked by size only: the manifest predates mtime/ctime "
            f"records (its owner's `starverse store verify {self.ref}` adds them)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "checked": self.checked,
            "ok": self.ok,
            "changed": list(self.changed),
            "missing": list(self.missing),
            "size_only": self.size_only,
        }


def _plain(rel: str) -> bool:
    """A relative path that stays below its folder (a manifest on a shared store is untrusted)."""
    return bool(rel) and not rel.startswith("/") and "\x00" not in rel and ".." not in rel.split("/")


def stamp_files(top: Path, files: Sequence[FileRecord]) -> tuple[FileRecord, ...]:
    """``files`` with the size, mtime and ctime they have now (through a model snapshot's links)."""
    base = str(top)
    out = []
    for f in files:
        try:
            st = os.stat(f"{base}/{f.path}") if _plain(f.path) else None  # noqa: PTH116 (no Path per file)
        except OSError:
            st = None
        if st is None:
            out.append(replace(f, mtime_ns=None, ctime_ns=None))
        else:
            out.append(replace(f, size=st.st_size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns))
    return tuple(out)


def stamp_folders(top: Path) -> tuple[FolderStamp, ...]:
    """Every folder under ``top`` (``top`` too) with its mtime and ctime; links are not followed."""
    out = []
    for dirpath, _dirs, _files in os.walk(top):  # os.walk never descends into a link
        try:
            st = os.lstat(dirpath)
        except OSError:  # removed while we walked: the check will say so
            continue
        rel = os.path.relpath(dirpath, top)
        out.append(FolderStamp("" if rel == "." else Path(rel).as_posix(), st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def check(ref: str, top: Path, files: Sequence[FileRecord], folders: Sequence[FolderStamp] | None = None) -> StatCheck:
    """Each file (and folder) against its stamp: one ``stat`` each, nothing read or hashed.

    PermissionError when a folder of the entry may not be searched (another user's umask)."""
    base = str(top)
    changed: list[str] = []
    missing: list[str] = []
    size_only = 0
    for f in files:
        if not _plain(f.path):
            changed.append(f.path)
            continue
        try:
            st = os.stat(f"{base}/{f.path}")  # noqa: PTH116
        except (FileNotFoundError, NotADirectoryError):
            missing.append(f.path)
            continue
        except PermissionError:
            raise  # a folder we may not search: not a change (the caller says who may read it)
        except OSError:  # a loop of links, a name too long: not what was published
            changed.append(f.path)
            continue
        if st.st_size != f.size or not stat.S_ISREG(st.st_mode):
            changed.append(f.path)
        elif f.mtime_ns is None or f.ctime_ns is None:
            size_only += 1
        elif st.st_mtime_ns != f.mtime_ns or st.st_ctime_ns != f.ctime_ns:
            changed.append(f.path)
    for d in folders or ():
        name = f"{d.path}/" if d.path else "./"
        if d.path and not _plain(d.path):
            changed.append(name)
            continue
        try:
            st = os.lstat(f"{base}/{d.path}" if d.path else base)
        except (FileNotFoundError, NotADirectoryError):
            missing.append(name)
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_mtime_ns != d.mtime_ns or st.st_ctime_ns != d.ctime_ns:
            changed.append(name)  # a file added, removed or renamed in it, or its mode or owner changed
    return StatCheck(ref, len(files), tuple(changed), tuple(missing), size_only)
