"""A local job sees its store mounts read-only for real, and a write into them is reported.

File modes (0444/0555) stop nobody running as root. So each torchrun agent, and with it every
rank under it, starts in a mount namespace of its own in which every folder of a mounted entry
(a dataset's version folder; a model's snapshot and its ``blobs/``) is a read-only bind mount
of itself: a write fails with ``EROFS`` (read-only file system), root's too. Nothing outside
the job sees these mounts (propagation is cut first), and they go with its last process.

* Root makes the mount namespace directly (``CAP_SYS_ADMIN``).
* A plain uid first makes a user namespace in which it keeps its own uid and gid (the one-line
  map an unprivileged process may write): there it may bind and remount in its new mount
  namespace; the capability is gone again at ``exec``, so the job cannot remount them writable.
  Inside, uids and gids other than its own show as ``65534`` (``nobody``); access is unchanged.
* Where the kernel refuses (no user namespaces, a container's seccomp profile, not Linux) or
  ``STARVERSE_READONLY_MOUNTS=no``, the job runs as before and its node log says why.

Either way :func:`after_job` runs the store's cheap tamper check (one stat per file) on every
mount when the job ends, and the job's status names what changed; the entry then shows as
``corrupt`` to everyone until its owner repairs it. Root inside the job may still remount: this
stops mistakes and scripts, not an administrator.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import StarverseError

__all__ = ["LIBC", "after_job", "protect", "readonly_paths", "readonly_preexec"]

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME, _MS_BIND = 0x20, 0x400, 0x800, 0x1000
_MS_REC, _MS_SLAVE, _MS_RELATIME, _MS_STRICTATIME = 0x4000, 0x80000, 0x200000, 0x1000000
# statvfs f_flag -> the mount flags a remount must keep (the kernel locks them in a user namespace)
_KEEP = ((0x2, _MS_NOSUID), (0x4, _MS_NODEV), (0x8, _MS_NOEXEC), (0x400, _MS_NOATIME), (0x800, _MS_NODIRATIME))
_ST_RELATIME = 0x1000


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = _libc()  # the C library (Linux), for unshare(2) and prctl(2); None elsewhere
_LIBC = LIBC


def _call(what: str, result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _unshare() -> None:
    """A mount namespace of our own (root), else inside a user namespace keeping our uid and gid."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0 and _LIBC.unshare(_CLONE_NEWNS) == 0:
        return
    _call("unshare(user, mount)", _LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNS))
    _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid map
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _mount(source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source is not None else None
    _call(f"mount {target}", _LIBC.mount(src, target.encode(), None, flags, None))


def _kept_flags(path: str) -> int:
    f_flag = os.statvfs(path).f_flag
    flags = 0
    for st_bit, ms_bit in _KEEP:
        if f_flag & st_bit:
            flags |= ms_bit
    if f_flag & _ST_RELATIME:
        flags |= _MS_RELATIME
    elif not f_flag & 0x400:
        flags |= _MS_STRICTATIME
    return flags


def protect(paths: Sequence[str]) -> None:
    """In this (single-threaded, about to exec) process: ``paths`` read-only from now on, for it and
    its children only. OSError when the kernel does not allow it (nothing is changed then)."""
    if _LIBC is None:
        raise OSError("mount namespaces need Linux")
    _unshare()
    _mount(None, "/", _MS_REC | _MS_SLAVE)  # nothing we mount reaches the rest of the machine
    for path in paths:
        _mount(path, path, _MS_BIND | _MS_REC)
        _mount(None, path, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _kept_flags(path))


def readonly_paths(settings: Settings, mounts: Sequence[str]) -> list[str]:
    """Check every mount (``Catalog.mount``: a changed entry is refused) and name the folders to protect."""
    if not mounts:
        return []
    from jupyter_starverse.catalog import Catalog

    catalog = Catalog(settings)
    paths: list[str] = []
    for name in mounts:
        catalog.mount(name)
        if settings.readonly_mounts != "no":
            paths += [str(p) for p in catalog.readonly_paths(name)]
    return paths


def readonly_preexec(settings: Settings, mounts: Sequence[str], then: Callable[[], None]) -> Callable[[], None]:
    """The ``preexec_fn`` of a job's agent: its mounts read-only (see the module), then ``then()``.

    Here, in the parent, every mount is checked first (``Catalog.mount``: an entry changed since
    it was published is refused, ConflictError naming the files, at every launch of the job), and
    the folders are found; the child only makes system calls. A kernel that refuses leaves the
    job as it was, with one line in its node log (the post-job check stays).
    """
    paths = readonly_paths(settings, mounts)
    if not paths:
        return then

    def child() -> None:
        try:
            protect(paths)
        except OSError as e:
            os.write(2, f"starverse: store mounts are not read-only in this job ({e}); writes are reported\n".encode())
        then()

    return child


def after_job(settings: Settings, mounts: Sequence[str]) -> str | None:
    """The cheap tamper check of every mount, after the job: a line naming what changed, or None."""
    if not mounts:
        return None
    from jupyter_starverse.catalog import Catalog

    changed = []
    for name in mounts:
        try:
            check = Catalog(settings).check(name)
        except (StarverseError, OSError) as e:  # removed or unpulled meanwhile: nothing to compare
            print(f"starverse: cannot check {name} after the job: {e}", file=sys.stderr, flush=True)
            continue
        if not check.ok:
            changed.append(check)
    if not changed:
        return None
    what = "; ".join(f"{c.ref}: {c.named()}" for c in changed)
    return (
        f"warning: files of the job's mounts changed while it ran ({what}); the entry shows as corrupt "
        f"until its owner runs `starverse store pull {changed[0].ref}`"
    )
