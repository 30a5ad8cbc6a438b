"""The shared volume: who owns a record, paths that never leave their root, modes we set ourselves.

Many users' notebooks and jobs write one store and one experiments root. Everything on it
is data written by some identity, so every writer and remover of the store and of run
folders goes through this module (docs/sharing.md):

* **Owners.** :class:`Owner` is the uid of a file or folder (``lstat``: a link's own owner),
  with the user name for display. :func:`may_act` answers whether the caller may change
  what another uid owns: only the owner, root, or a member of the admin group may.
* **Paths inside a root.** :func:`inside` checks every component below ``root`` with
  ``lstat``: no symlink, no ``..``, nothing that leaves the root. :func:`open_under` walks
  the same components with ``openat(O_NOFOLLOW | O_DIRECTORY)`` so a link planted between the
  check and the open is refused too. :func:`remove_under` deletes a file, a link (the link,
  never its target) or a folder (``shutil.rmtree`` on Linux works through directory file
  descriptors and never follows a link out).
* **Modes whatever the umask.** :class:`Modes` names the folder and file modes of one kind
  of place (private run folders, group-shared ones, a readable store); :func:`make_dir` and
  :func:`write_atomic` apply them with ``chmod``/``fchmod``, so umask 002, 022 and 077 give
  the same files.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, PermissionDeniedError

__all__ = [
    "GROUP",
    "PRIVATE",
    "PUBLIC",
    "Modes",
    "Owner",
    "check_owned",
    "create_folders",
    "current_owner",
    "group_id",
    "in_group",
    "inside",
    "make_dir",
    "may_act",
    "open_under",
    "owner_of",
    "remove_under",
    "write_atomic",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


# --------------------------------------------------------------------------------------- owners
@dataclass(frozen=True)
class Owner:
    """The uid that owns a record on the volume, and its user name (for display only)."""

    uid: int
    name: str

    @classmethod
    def of_uid(cls, uid: int) -> Owner:
        try:
            name = pwd.getpwuid(uid).pw_name
        except (KeyError, OverflowError):
            name = f"uid {uid}"
        return cls(uid, name)

    def to_json(self) -> dict[str, Any]:
        return {"uid": self.uid, "name": self.name}

    def __str__(self) -> str:
        return self.name


def current_owner() -> Owner:
    """Who this process writes as (its effective uid)."""
    return Owner.of_uid(os.geteuid())


def owner_of(path: Path | str) -> Owner:
    """The owner of ``path`` itself (a symlink's own owner, never its target's)."""
    return Owner.of_uid(os.lstat(path).st_uid)


def group_id(group: str | None) -> int | None:
    """The gid of ``group`` (a name or a number, as the settings hold it); None when unset or unknown."""
    if not group:
        return None
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def in_group(gid: int | None) -> bool:
    """True when this process belongs to group ``gid`` (effective or supplementary)."""
    if gid is None:
        return False
    return gid == os.getegid() or gid in os.getgroups()


def may_act(uid: int, admin_gid: int | None = None) -> bool:
    """May this process change (cancel, remove, publish over) what ``uid`` owns?

    The owner may; root may; a member of the configured admin group may. Nobody else.
    """
    me = os.geteuid()
    return me == uid or me == 0 or in_group(admin_gid)


def check_owned(path: Path | str, action: str, admin_gid: int | None = None) -> Owner:
    """The owner of ``path``; :class:`PermissionDeniedError` when the caller may not ``action`` it."""
    owner = owner_of(path)
    if not may_act(owner.uid, admin_gid):
        raise PermissionDeniedError(
            f"cannot {action}: {path} belongs to {owner.name} (uid {owner.uid}), not to you",
            hint="only the owner (or a member of STARVERSE_ADMIN_GROUP) may change it; ask them",
        )
    return owner


# ------------------------------------------------------------------------------- paths in a root
def _relative(root: Path, path: Path) -> tuple[str, ...]:
    root_abs = Path(os.path.abspath(root))
    path_abs = Path(os.path.abspath(path)) if path.is_absolute() else root_abs / path
    if ".." in path.parts:
        raise BadInputError(f"{path} has '..' in it", hint="name a path inside the folder, without '..'")
    try:
        rel = path_abs.relative_to(root_abs)
    except ValueError:
        raise BadInputError(f"{path} is outside {root}", hint=f"name a path inside {root}") from None
    return rel.parts


def _escape(root: Path, where: Path, what: str) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"refusing to follow {where}: it is {what}, and a path in {root} must stay in it",
        hint="someone replaced a folder of the shared volume with a link; remove the link (its owner can)",
    )


def inside(root: Path, path: Path, *, missing_ok: bool = True) -> Path:
    """``path`` after checking that no component below ``root`` is a symlink or leaves it.

    The components that do not exist yet are fine (``missing_ok``); the last one may be
    anything but a link. Raises :class:`PermissionDeniedError` naming the link.
    """
    parts = _relative(root, path)
    here = Path(os.path.abspath(root))
    for part in parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            if missing_ok:
                return Path(os.path.abspath(root)).joinpath(*parts)
            raise
        if stat.S_ISLNK(st.st_mode):
            raise _escape(root, here, "a symbolic link")
    return here


def open_under(root: Path, path: Path, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """``os.open`` of ``path`` below ``root`` without following a link at any level (``openat``).

    Every folder is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the one above it, and
    the last component with ``O_NOFOLLOW``: a link anywhere below ``root`` is refused
    (:class:`PermissionDeniedError`), also one planted after a check. The caller closes the fd.
    """
    parts = _relative(root, path)
    if not parts:
        raise BadInputError(f"{path} is the root itself", hint="name a file inside it")
    fd = os.open(os.path.abspath(root), os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _escape(root, Path(root).joinpath(*parts[: parts.index(part) + 1]), "not a folder") from e
                raise
            os.close(fd)
            fd = nxt
        try:
            return os.open(parts[-1], flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _escape(root, Path(path), "a symbolic link") from e
            raise
    finally:
        os.close(fd)


def remove_under(root: Path, path: Path) -> None:
    """Delete ``path`` below ``root``: a link is unlinked (its target untouched), a folder removed
    with every write bit given back first (published entries are read-only). A link among the
    components above ``path`` is refused, so a swapped parent never redirects the removal."""
    parts = _relative(root, path)
    if not parts:
        raise BadInputError(f"refusing to remove the root {root}", hint="name something inside it")
    parent = inside(root, Path(os.path.abspath(root)).joinpath(*parts[:-1]))  # the last part may be a link
    target = parent / parts[-1]
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        target.unlink(missing_ok=True)
        return
    _writable_tree(target)
    # shutil.rmtree works through directory fds on Linux (avoids_symlink_attacks): a link met
    # inside is unlinked, never followed.
    shutil.rmtree(target, onerror=None if shutil.rmtree.avoids_symlink_attacks else _refuse_unsafe)


def _refuse_unsafe(*_a: Any) -> None:  # pragma: no cover - platforms without fd-based rmtree
    raise PermissionDeniedError("this platform cannot remove a shared folder safely", hint="remove it by hand")


def _writable_tree(top: Path) -> None:
    """u+w on every folder under ``top`` that we own (links skipped): rmtree must unlink in them."""
    me = os.geteuid()
    for dirpath, dirs, _files in os.walk(top, followlinks=False):
        for folder in (dirpath, *(os.path.join(dirpath, d) for d in dirs)):
            with contextlib.suppress(OSError):
                st = os.lstat(folder)
                if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IWUSR and me in (st.st_uid, 0):
                    os.chmod(folder, stat.S_IMODE(st.st_mode) | stat.S_IWUSR | stat.S_IXUSR)


# ----------------------------------------------------------------------------------------- modes
@dataclass(frozen=True)
class Modes:
    """The modes of one kind of place on the volume, applied whatever the umask."""

    folder: int
    file: int

    def for_group(self, group_mode: bool) -> Modes:
        return GROUP if group_mode else self


PRIVATE = Modes(folder=0o700, file=0o600)  # a run folder of one user
GROUP = Modes(folder=0o2770, file=0o640)  # shared with the group, nobody else
PUBLIC = Modes(folder=0o755, file=0o644)  # a single user's store: readable, written only by its owner


def make_dir(path: Path, modes: Modes, root: Path | None = None) -> None:
    """``mkdir -p path``; each folder we create gets ``modes.folder`` (chmod, not the umask).

    With ``root``, a link among the components below it is refused (:func:`inside`).
    """
    if root is not None:
        inside(root, path)
    create_folders(Path(path), lambda _folder: modes.folder)


def create_folders(
    path: Path, mode_of: Callable[[Path], int], refuse: Callable[[Path, OSError], Exception] | None = None
) -> None:
    """``mkdir -p path``: each folder created here gets ``mode_of(folder)`` (chmod, not the umask).

    A folder someone else makes at the same moment is theirs, left with their mode. A folder that
    cannot be made (a file in the way, no permission) raises ``refuse(folder, error)`` when given,
    else the ``OSError`` itself.
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
            folder.mkdir(mode=0o700)
        except FileExistsError as e:
            if folder.is_dir():
                continue
            if refuse is None:
                raise
            raise refuse(folder, e) from None
        except OSError as e:
            if refuse is None:
                raise
            raise refuse(folder, e) from e
        with contextlib.suppress(OSError):
            folder.chmod(mode_of(folder))


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically (temp + rename) with ``mode`` whatever the umask.

    The temp file is created ``O_EXCL`` in the same folder, so a link planted at ``path`` is
    replaced by the rename, never written through.
    """
    folder = path.parent
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
