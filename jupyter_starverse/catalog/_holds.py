"""Usage leases: "job X reads this entry", so that ``store rm``/``evict`` do not pull data from under it.

A hold is one small JSON file per holder under ``.holds/<key>/`` naming the holder (a job id),
its host, pid and uid. It is live while that process runs (checked at once on the same
host); a hold from another host counts as live until released (``--force`` overrides).
Files of dead holders are removed by whoever lists them.

Ordering against removal (no lock needed): a hold writes its file, then checks that the
entry is still published; removal checks for holds, removes the manifest, checks again and
puts the manifest back when a hold appeared in between. Either the remover sees the hold,
or the holder sees the manifest gone.
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

from ._perms import make_dirs
from ._types import HoldInfo

__all__ = ["Hold", "live_holds"]

log = logging.getLogger(__name__)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Hold:
    """One usage lease; a context manager. ``release()`` is idempotent."""

    def __init__(self, folder: Path, info: HoldInfo) -> None:
        self.info = info
        stem = _SAFE.sub("_", info.holder)[:80] or "holder"
        self.path = folder / f"{stem}.{uuid.uuid4().hex}.json"

    def write(self) -> None:
        make_dirs(self.path.parent)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(self.info.to_json()))
            tmp.replace(self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def release(self) -> None:
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def new_hold(folder: Path, ref: str, holder: str, pid: int | None) -> Hold:
    info = HoldInfo(ref, holder, socket.gethostname(), os.getpid() if pid is None else pid, os.geteuid(), time.time())
    return Hold(folder, info)


def _read(path: Path) -> HoldInfo | None:
    try:
        data = json.loads(path.read_text())
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
    except (ValueError, KeyError, TypeError, OSError) as e:
        log.warning("ignoring unreadable hold %s: %s", path, e)
        return None


def live_holds(folder: Path) -> list[HoldInfo]:
    """Holds in ``folder`` whose holders still run; dead ones are removed (best effort)."""
    out = []
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    here = socket.gethostname()
    for p in paths:
        info = _read(p)
        if info is None:
            continue
        if info.host == here and not pid_alive(info.pid):
            with contextlib.suppress(OSError):
                p.unlink(missing_ok=True)
            continue
        out.append(info)
    return out
