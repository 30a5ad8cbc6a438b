"""Usage leases: "job X reads this entry", so that ``store rm``/``evict`` do not pull data from under it.

A hold is one small JSON file per holder under ``.holds/<key>/`` naming the holder (a job id),
its host, pid and uid. It is live while that process runs (checked at once on the same
host); a hold from another host counts as live until released (``--force`` overrides).
Files of dead holders are removed by whoever lists them.

Ordering against removal (no lock needed): a hold writes its file, then checks that the
entry is still published; removal checks for holds, removes the manifest, checks again and
puts the manifest back when a hold appeared in between. Either the remover sees the hold,
or the holder sees the manifest gone.

``.holds/<key>/`` is a folder every user writes (sticky in group mode: nobody removes
another's hold); nothing in it is followed: with the store ``root``, a link in place of the
folder is refused and the hold file is created ``O_EXCL | O_NOFOLLOW`` (``_volume``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
import uuid
from pathlib import Path
from types import TracebackType

from jupyter_starverse._procs import pid_alive
from jupyter_starverse._volume import inside, open_under, remove_under
from jupyter_starverse.errors import PermissionDeniedError

from ._perms import file_mode, make_dirs
from ._types import HoldInfo

__all__ = ["Hold", "live_holds"]

log = logging.getLogger(__name__)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Hold:
    """One usage lease; a context manager. ``release()`` is idempotent."""

    def __init__(self, folder: Path, info: HoldInfo, *, root: Path | None = None) -> None:
        self.info = info
        self.root = root if root is not None else folder.parent
        stem = _SAFE.sub("_", info.holder)[:80] or "holder"
        self.path = folder / f"{stem}.{uuid.uuid4().hex}.json"

    def write(self) -> None:
        inside(self.root, self.path)
        make_dirs(self.path.parent, shared=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            fd = open_under(self.root, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), file_mode(self.path.parent))
                f.write(json.dumps(self.info.to_json()))
            tmp.replace(self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            remove_under(self.root, self.path)

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def new_hold(folder: Path, ref: str, holder: str, pid: int | None, *, root: Path | None = None) -> Hold:
    info = HoldInfo(ref, holder, socket.gethostname(), os.getpid() if pid is None else pid, os.geteuid(), time.time())
    return Hold(folder, info, root=root)


def _read(path: Path, root: Path) -> HoldInfo | None:
    try:
        fd = open_under(root, path)  # a hold that is a link is not followed
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(1 << 20))
        return HoldInfo(
            str(data["ref"]),
            str(data["holder"]),
            str(data["host"]),
            int(data["pid"]),
            int(data.get("uid", -1)),
            float(data["created_at"]),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, OSError, PermissionDeniedError) as e:
        log.warning("ignoring unreadable hold %s: %s", path, e)
        return None


def live_holds(folder: Path, *, root: Path | None = None) -> list[HoldInfo]:
    """Holds in ``folder`` whose holders still run; dead ones are removed (best effort, ours only).

    With the store ``root``, a link in place of ``folder`` is ignored (logged): the holds are
    never read, nor removed, through it.
    """
    out = []
    root = root if root is not None else folder.parent
    try:
        inside(root, folder)
    except PermissionDeniedError as e:  # someone put a link there: never followed, its holds do not count
        log.warning("ignoring the holds in %s: %s", folder, e)
        return []
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    here = socket.gethostname()
    for p in paths:
        info = _read(p, root)
        if info is None:
            continue
        if info.host == here and not pid_alive(info.pid):
            with contextlib.suppress(OSError, PermissionDeniedError):
                remove_under(root, p)
            continue
        out.append(info)
    return out
