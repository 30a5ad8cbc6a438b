"""File modes on a store shared by several users (``STARVERSE_SHARED_GROUP``, docs/sharing.md).

The store is one folder that every user's processes write. Two rules make that work:

* **Group mode.** With ``STARVERSE_SHARED_GROUP`` set, the store root and the folders in
  which users create entries are owned by that group, setgid and sticky (``3775``): every
  member may add an entry there, nobody may rename or remove another's. The folder of one
  entry (``data/NAME/``, ``catalog/datasets/NAME/``, made by :func:`make_dirs`) belongs to
  its creator alone: ``2750`` (the group reads, nobody else). Files are ``0640``.
* **Without group mode** folders are ``0755`` and files ``0644``, whatever the umask.
* **Published entries are read-only for everyone.** Files ``0444`` and folders ``0555``
  (:func:`make_read_only`); removal makes folders writable again first.

Without group mode, what another user's umask made private is refused with a
:class:`PermissionDeniedError` that names the setting (:func:`denied`), never a raw
``PermissionError``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from jupyter_starverse._format import format_bytes
from jupyter_starverse._volume import create_folders
from jupyter_starverse.errors import BadInputError, PermissionDeniedError, StoreError

__all__ = [
    "DIR_MODE",
    "ENTRY_DIR_MODE",
    "denied",
    "file_mode",
    "free_bytes",
    "group_mode",
    "make_dirs",
    "make_read_only",
    "make_writable",
    "no_space",
    "prepare_shared",
    "resolve_group",
    "rmtree",
    "translate_permissions",
]

log = logging.getLogger(__name__)

DIR_MODE = 0o3775  # a folder every member adds entries to: setgid, group-writable, sticky
ENTRY_DIR_MODE = 0o2750  # the folder of one entry in group mode: its owner writes, the group reads
_PUBLIC_DIR = 0o755
_PUBLIC_FILE = 0o644
_GROUP_FILE = 0o640
_READ_ONLY_DIR = 0o555
_READ_ONLY_FILE = 0o444
HINT = (
    "the store is shared by several users: set STARVERSE_SHARED_GROUP to a group all of them "
    "belong to (see docs/sharing.md), or ask the owner of the path to open it to your group"
)

F = TypeVar("F", bound=Callable[..., Any])


def resolve_group(group: str) -> int:
    """The gid of ``group`` (a name or a number); BadInputError naming the setting when unknown."""
    text = group.strip()
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise BadInputError(
            f"STARVERSE_SHARED_GROUP={group!r} is not a group on this machine",
            field="STARVERSE_SHARED_GROUP",
            hint="give a group name from /etc/group (`getent group`) or a numeric gid",
        ) from None


_SETTINGS_HINT = "point STARVERSE_STORE (STARVERSE_HOME, STARVERSE_EXPERIMENTS) at a folder you can write"


def denied(error: OSError, action: str) -> PermissionDeniedError:
    """A PermissionDeniedError for ``error``: the group-sharing hint only when another user owns the path."""
    where = f" ({error.filename})" if error.filename else ""
    owner = ""
    hint = HINT
    if error.errno == errno.EROFS:
        return PermissionDeniedError(
            f"cannot {action}{where}: the file system is read-only", hint=f"{_SETTINGS_HINT}, or remount it read-write"
        )
    if error.filename:
        folder = Path(error.filename)
        while not folder.exists() and folder.parent != folder:  # a folder not made yet: its nearest parent
            folder = folder.parent
        with contextlib.suppress(OSError):
            st = folder.stat()
            owner = f"; {folder} belongs to uid {st.st_uid}, gid {st.st_gid}, mode {stat.filemode(st.st_mode)}"
            if st.st_uid == os.geteuid():  # ours and read-only: no group would help
                hint = f"it is yours but read-only: `chmod u+w {folder}`, or {_SETTINGS_HINT}"
    return PermissionDeniedError(f"permission denied while trying to {action}{where}{owner}", hint=hint)


def unusable_folder(folder: Path, error: OSError | None) -> StoreError:
    """The folder ``folder`` cannot be made: a file is in the way, or the place takes no folders."""
    blocker = folder
    while blocker.parent != blocker and not blocker.exists():
        blocker = blocker.parent
    if blocker.exists() and not blocker.is_dir():
        return StoreError(
            f"cannot create the folder {folder}: {blocker} is a file, not a folder",
            hint=f"{_SETTINGS_HINT}, or move the file {blocker} away",
        )
    why = error.strerror if error is not None and error.strerror else "it cannot be created there"
    if error is not None and error.errno == errno.EROFS:
        why = "the file system is read-only"
    return StoreError(f"cannot create the folder {folder}: {why}", hint=f"{_SETTINGS_HINT}, e.g. ~/.starverse")


#: The errors of a full file system (no block left, or the user's quota spent).
FULL = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(where: Path) -> int | None:
    """Bytes free on the file system of ``where`` (its nearest existing folder), None when unknown."""
    p = Path(where)
    while not p.exists() and p.parent != p:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def no_space(error: OSError, action: str) -> StoreError:
    """A StoreError for ENOSPC/EDQUOT while doing ``action``: where, what is free, how to free space."""
    where = error.filename or ""
    free = free_bytes(Path(where)) if where else None
    what = "the user's disk quota is spent" if error.errno == errno.EDQUOT else "no space left on the store's disk"
    have = f": {format_bytes(free)} free" if free is not None else ""
    return StoreError(
        f"{what} while trying to {action}" + (f" ({where})" if where else "") + have,
        hint="free space with `starverse store evict --max-bytes N` or `starverse store rm NAME`, then run it "
        "again: what is already on disk is kept",
    )


def translate_permissions(action: str) -> Callable[[F], F]:
    """Decorator: a PermissionError (EACCES/EPERM/EROFS) inside becomes a :class:`PermissionDeniedError`,
    a full disk (ENOSPC/EDQUOT) a :class:`StoreError` with the hint to free space (:func:`no_space`)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except PermissionError as e:
                raise denied(e, action) from e
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise denied(e, action) from e
                if e.errno in FULL:
                    raise no_space(e, action) from e
                if e.errno == errno.ENOTDIR and e.filename:  # a file where the store (or a folder of it) should be
                    raise unusable_folder(Path(e.filename), e) from e
                raise

        return cast(F, inner)

    return wrap


def group_mode(folder: Path) -> bool:
    """True when ``folder`` is in a group-shared store (setgid: the group mode's mark)."""
    try:
        return bool(Path(folder).stat().st_mode & stat.S_ISGID)
    except OSError:
        return False


def file_mode(folder: Path, *, group_writable: bool = False) -> int:
    """The mode of a record written in ``folder``: ``0640`` in group mode (``0660`` with
    ``group_writable``), else ``0644``; never the umask's."""
    if group_mode(folder):
        return 0o660 if group_writable else _GROUP_FILE
    return _PUBLIC_FILE


def make_dirs(path: Path, *, shared: bool = False) -> None:
    """``mkdir -p path`` with the modes of docs/sharing.md, whatever the umask.

    Below a setgid (group-shared) folder a new folder is ``2750``: it belongs to the entry of
    its creator, who alone writes in it. ``shared`` folders, where every member adds files
    (a hold folder), are ``3775`` (sticky: nobody removes another's file). Without group
    mode every folder is ``0755``.
    """

    def mode_of(folder: Path) -> int:
        return (DIR_MODE if shared else ENTRY_DIR_MODE) if group_mode(folder.parent) else _PUBLIC_DIR

    create_folders(path, mode_of, _refused_folder)


def _refused_folder(folder: Path, error: OSError) -> StoreError | PermissionDeniedError:
    if isinstance(error, FileExistsError):  # a file where the folder goes
        return unusable_folder(folder, None)
    if isinstance(error, PermissionError):
        return denied(error, f"create the folder {folder}")
    return unusable_folder(folder, error)  # a file on the way (ENOTDIR), /proc (ENOENT), a read-only file system


def tighten(folder: Path) -> None:
    """An entry folder an older release made group-writable (``2775``) becomes ``2750`` (ours only)."""
    with contextlib.suppress(OSError):
        st = os.lstat(folder)
        mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
        if mine and st.st_mode & stat.S_ISGID and st.st_mode & stat.S_IWGRP:
            folder.chmod(ENTRY_DIR_MODE)


def prepare_shared(root: Path, gid: int, subfolders: tuple[str, ...]) -> None:
    """Make ``root`` and its ``subfolders`` group ``gid``, setgid, group-writable and sticky (``3775``).

    Folders that belong to someone else are left as they are (only their owner can change
    them); a folder we cannot give to the group is a PermissionDeniedError with a hint.
    """
    for folder in (root, *(root / s for s in subfolders)):
        make_dirs(folder, shared=True)
        st = folder.stat()
        if st.st_uid != os.geteuid() and os.geteuid() != 0:
            continue
        try:
            if st.st_gid != gid:
                os.chown(folder, -1, gid)
            if stat.S_IMODE(st.st_mode) & DIR_MODE != DIR_MODE:
                folder.chmod(stat.S_IMODE(st.st_mode) | DIR_MODE)
        except PermissionError as e:
            raise PermissionDeniedError(
                f"cannot give {folder} to group {gid} (STARVERSE_SHARED_GROUP): {e.strerror}",
                hint="you must belong to the group (`id`); see docs/sharing.md",
            ) from e


def _walk_dirs(top: Path) -> list[Path]:
    out = [top]
    for dirpath, dirs, _files in os.walk(top):
        out.extend(Path(dirpath) / d for d in dirs)
    return out


def make_read_only(top: Path, files: bool = True) -> None:
    """Published: every file 0444 and every folder 0555 under ``top`` (what we own; others logged)."""
    if not top.is_dir():
        return
    if files:
        _files_read_only(str(top))
    for folder in reversed(_walk_dirs(top)):  # deepest first: each chmod needs only x on parents
        try:
            mode = stat.S_IMODE(folder.stat().st_mode)
            if mode & 0o7777 != (mode & stat.S_ISGID) | _READ_ONLY_DIR:
                folder.chmod((mode & stat.S_ISGID) | _READ_ONLY_DIR)
        except OSError as e:
            log.warning("could not make %s read-only: %s", folder, e)


def _files_read_only(folder: str) -> None:
    """Every regular file under ``folder`` 0444 (``os.scandir``: no Path object or extra stat per file)."""
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError as e:
        log.warning("could not list %s: %s", folder, e)
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                _files_read_only(entry.path)
                continue
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != _READ_ONLY_FILE:
                os.chmod(entry.path, _READ_ONLY_FILE)  # noqa: PTH101 (no Path object per file)
        except OSError as err:
            log.warning("could not make %s read-only: %s", entry.path, err)


def make_writable(top: Path) -> None:
    """Give the folders under ``top`` their write bits back (before a repair or removal)."""
    if not top.is_dir() or top.is_symlink():
        return
    for folder in _walk_dirs(top):
        try:
            st = folder.stat()
            mode = stat.S_IMODE(st.st_mode)
            want = mode | stat.S_IWUSR  # the owner only: a folder being repaired is never the group's to write
            if want != mode and (st.st_uid == os.geteuid() or os.geteuid() == 0):
                folder.chmod(want)
        except OSError as e:
            log.debug("could not make %s writable: %s", folder, e)


def rmtree(path: Path) -> None:
    """Remove ``path`` (a file, link or folder) even when it was published read-only."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        make_writable(path)
        shutil.rmtree(path)
