"""The saved-state folders on disk: their ids, and files only this uid can have written.

A saved kernel state lives in ``<home>/modes/saved/<id>/``. This module owns how such a
folder is found (from its id alone, checked against the id format, never from a path stored
in a manifest), how it and its files are created (``0700`` / ``0600`` from the start, never
widened by the umask) and the checks made before anything in it is read back: no links,
owned by this uid, writable by no one else. ``_kernelstate`` decides what goes in and out.
"""

from __future__ import annotations

import os
import re
import stat
import time
import uuid
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, NotFoundError, PermissionDeniedError, StoreError

__all__ = [
    "CLOEXEC",
    "ID_RE",
    "NOFOLLOW",
    "VAR_FILE_RE",
    "check_id",
    "check_private_dir",
    "check_var_files",
    "make_private_dir",
    "new_state_id",
    "read_private",
    "state_dir",
    "state_root",
    "write_private",
]

ID_RE = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{8}$")
VAR_FILE_RE = re.compile(r"^(?:small|[0-9]{1,9})\.bin$")  # the only names save_namespace writes
_DIR_MODE = 0o700
_FILE_MODE = 0o600
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def new_state_id() -> str:
    """A fresh, sortable state id."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]


def state_root(home: Path) -> Path:
    return home / "modes" / "saved"


def check_id(state_id: object) -> str:
    """``state_id`` if it has the id format (no separators, no dots); BadInputError otherwise."""
    if not isinstance(state_id, str) or not ID_RE.match(state_id):
        shown = repr(state_id)[:80]
        raise BadInputError(
            f"{shown} is not a valid state id",
            field="state_id",
            hint="a state id looks like 20260101-120000-0123abcd; `starverse mode --json` lists them",
        )
    return state_id


def state_dir(home: Path | str, state_id: object) -> Path:
    """The folder of state ``state_id``: computed from the id alone, never from stored data.

    Raises BadInputError for a malformed id and NotFoundError when there is no such state
    folder (a symlink or a plain file in its place is not one).
    """
    folder = state_root(Path(home)) / check_id(state_id)
    try:
        info = folder.lstat()
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise StoreError(
            f"cannot look at saved state {state_id}: {e}", hint="check the permissions of STARVERSE_HOME"
        ) from e
    if info is None or not stat.S_ISDIR(info.st_mode):
        what = "no" if info is None else "a link or file, not a"
        raise NotFoundError(
            f"saved state {state_id!r}: {what} saved state folder under {folder.parent}",
            hint="`starverse mode --json` lists the saved states",
        )
    return folder


def make_private_dir(path: Path, *, exist_ok: bool = False) -> None:
    """Create ``path`` as a 0700 folder of this uid (an existing one must be ours and not a link)."""
    try:
        path.mkdir(mode=_DIR_MODE)
    except FileExistsError:
        if not exist_ok:
            raise
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionDeniedError(
            f"{path} is not a folder of this user; saved variables are not written there",
            hint="remove it, or point STARVERSE_HOME at a folder of your own",
        )
    path.chmod(_DIR_MODE)  # mkdir's mode went through the umask; set it exactly


def write_private(path: Path, data: bytes) -> None:
    """Write a new file readable and writable only by this uid (0600 from its creation)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, _FILE_MODE)
    try:
        os.fchmod(fd, _FILE_MODE)  # before any byte goes in, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _unsafe(info: os.stat_result) -> str | None:
    """Why a saved file or folder with this stat must not be trusted, or None."""
    if info.st_uid != os.geteuid():
        return f"it belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"other users may write to it (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _refuse(state_id: str, path: Path, why: str) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"saved state {state_id} is not restored: {path}: {why}",
        hint=f"only states this user wrote are loaded; delete it with `starverse mode discard {state_id}` "
        "if you do not trust it",
    )


def check_private_dir(state_id: str, path: Path) -> None:
    try:
        info = path.lstat()
    except OSError as e:
        raise StoreError(f"saved state {state_id} cannot be read: {e}", hint=f"it stays at {path}") from e
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse(state_id, path, "not a folder (a link or a file)")
    why = _unsafe(info)
    if why:
        raise _refuse(state_id, path, why)


def check_var_files(state_id: str, vars_dir: Path, files: dict[str, Any], skip: tuple[str, ...]) -> None:
    """Refuse the whole state when any file it would load is not this user's own (checked again on read)."""
    for name, meta in files.items():
        filename = meta.get("file") if isinstance(meta, dict) else None
        if name in skip or not isinstance(filename, str) or not VAR_FILE_RE.match(filename):
            continue
        try:
            info = (vars_dir / filename).lstat()
        except OSError:
            continue  # reported for that name when it is read
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(state_id, vars_dir / filename, "not a regular file (a link?)")
        why = _unsafe(info)
        if why:
            raise _refuse(state_id, vars_dir / filename, why)


def read_private(state_id: str, path: Path) -> bytes:
    """The bytes of a saved file: no link followed, owned by this uid, writable by no one else."""
    fd = os.open(path, os.O_RDONLY | NOFOLLOW | CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(state_id, path, "not a regular file")
        why = _unsafe(info)
        if why:
            raise _refuse(state_id, path, why)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
