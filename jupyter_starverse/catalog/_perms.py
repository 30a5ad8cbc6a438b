"""File modes on a store shared by several users (``STARVERSE_SHARED_GROUP``, docs/sharing.md).

The store is one folder that every user's processes write. Two rules make that work:

* **Group mode.** With ``STARVERSE_SHARED_GROUP`` set, the store root and its top folders
  are owned by that group and setgid (``2775``). Every folder created below a setgid folder
  (by :func:`make_dirs`) is made ``2775`` too, so the group (inherited by the kernel through
  the setgid bit) can add entries, take leases and write progress. Files stay ``0644``/``0664``.
* **Published entries are read-only for everyone.** Files ``0444`` and folders ``0555``
  (:func:`make_read_only`); removal makes folders writable again first (:func:`rmtree`).

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

from jupyter_starverse.errors import BadInputError, PermissionDeniedError

__all__ = [
    "DIR_MODE",
    "denied",
    "make_dirs",
    "make_read_only",
    "make_writable",
    "prepare_shared",
    "resolve_group",
    "rmtree",
    "translate_permissions",
]

log = logging.getLogger(__name__)

DIR_MODE = 0o2775  # group-shared folder: setgid, group-writable
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


def denied(error: OSError, action: str) -> PermissionDeniedError:
    """A PermissionDeniedError for ``error`` with the hint about group sharing."""
    where = f" ({error.filename})" if error.filename else ""
    owner = ""
    if error.filename:
        with contextlib.suppress(OSError):
            st = Path(error.filename).stat()
            owner = f"; it belongs to uid {st.st_uid}, gid {st.st_gid}, mode {stat.filemode(st.st_mode)}"
    return PermissionDeniedError(f"permission denied while trying to {action}{where}{owner}", hint=HINT)


def translate_permissions(action: str) -> Callable[[F], F]:
    """Decorator: a PermissionError (EACCES/EPERM) inside becomes a :class:`PermissionDeniedError`."""

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
                raise

        return cast(F, inner)

    return wrap


def _is_shared(folder: Path) -> bool:
    try:
        return bool(folder.stat().st_mode & stat.S_ISGID)
    except OSError:
        return False


def make_dirs(path: Path) -> None:
    """``mkdir -p path``; each folder created inside a setgid (group-shared) folder becomes 2775.

    The umask would otherwise drop the group's write bit (0755 under umask 022), and the
    next user could not add a file beside ours.
    """
    missing: list[Path] = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # someone else made it at the same moment: theirs, with their mode
        if _is_shared(folder.parent):
            with contextlib.suppress(OSError):
                folder.chmod(DIR_MODE)


def prepare_shared(root: Path, gid: int, subfolders: tuple[str, ...]) -> None:
    """Make ``root`` and its ``subfolders`` group ``gid``, setgid, group-writable (where we may).

    Folders that belong to someone else are left as they are (only their owner can change
    them); a folder we cannot give to the group is a PermissionDeniedError with a hint.
    """
    for folder in (root, *(root / s for s in subfolders)):
        make_dirs(folder)
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
            want = mode | stat.S_IWUSR | ((stat.S_IWGRP | stat.S_ISGID) if mode & stat.S_ISGID else 0)
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
