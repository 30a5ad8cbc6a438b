"""A lease file that is safe on NFS: single-flight across processes and nodes.

Why not flock: on NFS and Lustre flock is advisory, client-local or silently a no-op.
A lease is a small JSON file created with ``link(2)`` (atomic on NFS, unlike
``O_EXCL`` on old clients) that names its owner and when it was last renewed. The owner
renews it every ``ttl / 3`` seconds (one renewer thread per process serves every lease held);
anyone may take over a lease that was not
renewed for ``ttl`` seconds, or whose owner process on this host is gone (kill -9). Takeover
renames the stale file away and checks that what it moved is what it judged stale, so two
takers cannot both win; the owner checks its token on every renewal and stops (``lost``)
when someone took over, so at most one writer publishes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jupyter_starverse._procs import pid_alive

from ._perms import make_dirs

__all__ = ["Lease", "LeaseInfo"]


@dataclass(frozen=True)
class LeaseInfo:
    """What a lease file says: who holds it and until when."""

    token: str
    host: str
    pid: int
    renewed_at: float
    ttl: float

    def is_stale(self, now: float | None = None) -> bool:
        """True when the lease expired or its owner process on this host is dead."""
        now = time.time() if now is None else now
        if now > self.renewed_at + self.ttl:
            return True
        return self.host == socket.gethostname() and not pid_alive(self.pid)


def _read(path: Path) -> LeaseInfo | None:
    try:
        data = json.loads(path.read_text())
        return LeaseInfo(
            str(data["token"]), str(data["host"]), int(data["pid"]), float(data["renewed_at"]), float(data["ttl"])
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, OSError):
        # Half-visible or foreign content: treat as stale but keep the file's age as guard.
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return None
        return LeaseInfo("?", "?", -1, time.time() - age, 1.0)


class Lease:
    """One lease file.

    Parameters
    ----------
    path
        The lease file (its folder must be on the shared store).
    ttl
        Seconds a lease lives without renewal (``Settings.lock_ttl``).
    """

    def __init__(self, path: Path, *, ttl: float) -> None:
        self.path = path
        self.ttl = ttl
        self.token = uuid.uuid4().hex
        self.lost = threading.Event()
        self._held = False

    def _content(self) -> str:
        return json.dumps(
            {
                "token": self.token,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "renewed_at": time.time(),
                "ttl": self.ttl,
            }
        )

    def _write_temp(self) -> Path:
        tmp = self.path.with_name(f"{self.path.name}.{self.token}.tmp")
        tmp.write_text(self._content())
        return tmp

    @property
    def held(self) -> bool:
        return self._held and not self.lost.is_set()

    def holder(self) -> LeaseInfo | None:
        """The current holder, or None when the lease is free."""
        return _read(self.path)

    def try_acquire(self) -> bool:
        """Take the lease if it is free or stale; never blocks."""
        current = _read(self.path)
        if current is not None and not current.is_stale():
            return False  # the common case for waiters: no write at all
        make_dirs(self.path.parent)
        tmp = self._write_temp()
        try:
            for _ in range(3):
                try:
                    os.link(tmp, self.path)
                except FileExistsError:
                    info = _read(self.path)
                    if info is not None and not info.is_stale():
                        return False
                    if info is not None:
                        self._break(info)
                    continue
                except OSError:
                    # NFS: the link reply may be lost although the link was made.
                    if tmp.stat().st_nlink != 2:
                        return False
                self._held = True
                self.lost.clear()
                return True
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def _break(self, stale: LeaseInfo) -> None:
        moved = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.stale")
        try:
            self.path.rename(moved)
        except FileNotFoundError:
            return
        now = _read(moved)
        if now is not None and now.token != stale.token and not now.is_stale():
            # We moved a fresh lease someone else just took: put it back.
            with contextlib.suppress(OSError):
                os.link(moved, self.path)
        moved.unlink(missing_ok=True)

    def renew(self) -> bool:
        """Extend the lease; returns False (and sets ``lost``) if someone took it over."""
        if not self._held:
            return False
        info = _read(self.path)
        if info is None or info.token != self.token:
            self.lost.set()
            return False
        tmp = self._write_temp()
        tmp.replace(self.path)
        return True

    def release(self) -> None:
        """Give the lease back (only if we still hold it)."""
        if self._held:
            info = _read(self.path)
            if info is not None and info.token == self.token:
                self.path.unlink(missing_ok=True)
        self._held = False

    @contextlib.contextmanager
    def renewing(self) -> Iterator[Lease]:
        """Renew every ``ttl / 3`` seconds while the block runs (no thread of its own: a pull of
        10,000 small files takes 10,000 leases, and a thread each cost more than the copies)."""
        _RENEWER.add(self)
        try:
            yield self
        finally:
            _RENEWER.remove(self)


class _Renewer:
    """One daemon thread renewing every lease in a ``renewing()`` block when it falls due."""

    def __init__(self) -> None:
        self._due: dict[int, tuple[float, Lease]] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wakes_at = 0.0  # when the thread wakes next (it sleeps at most a second)

    def add(self, lease: Lease) -> None:
        with self._cond:
            due = time.monotonic() + lease.ttl / 3
            self._due[id(lease)] = (due, lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="starverse-lease-renewer", daemon=True)
                self._thread.start()
            elif due < self._wakes_at:
                # a lease with a TTL under 3 s falls due before the thread would wake; with the usual
                # TTL (30 s) it never does, so 10,000 small files' leases wake the thread not once each
                self._cond.notify()

    def remove(self, lease: Lease) -> None:
        with self._cond:
            self._due.pop(id(lease), None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [lease for at, lease in self._due.values() if at <= now]
                if not due:
                    nearest = min((at for at, _ in self._due.values()), default=now + 1.0)
                    wait = min(1.0, max(0.01, nearest - now))
                    self._wakes_at = now + wait
                    self._cond.wait(wait)
                    continue
                for lease in due:
                    self._due[id(lease)] = (now + lease.ttl / 3, lease)
            for lease in due:
                try:
                    if not lease.renew():
                        self.remove(lease)
                except OSError:
                    continue


_RENEWER = _Renewer()
