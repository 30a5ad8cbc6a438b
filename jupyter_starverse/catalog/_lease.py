"""A lease file that is safe on NFS: single-flight across processes and nodes, without trusting clocks.

Why not flock: on NFS and Lustre flock is advisory, client-local or silently a no-op.
A lease is a small JSON file created with ``link(2)`` (atomic on NFS, unlike ``O_EXCL`` on old
clients) that names its holder and counts its renewals. The holder renews it every ``ttl / 3``
seconds (one renewer thread per process serves every lease held).

Nobody compares clocks of two hosts:

- **Staleness** is judged by the reader alone: a lease whose renewal counter (with its token) did
  not advance for ``ttl`` seconds of the *reader's* monotonic clock is stale. A reader that saw it
  first has to watch it for a TTL before taking it over, so a holder whose wall clock is minutes
  off is never taken for dead, and no lease is judged by the age a foreign clock wrote into it.
- **Liveness** is the holder's process record: host, boot id, pid namespace, pid and start time
  (:mod:`jupyter_starverse._procs`). A holder of this host (same boot and pid namespace) whose pid
  is gone or now names another process is stale at once (kill -9); one of another host, boot or
  container sharing the host name is judged by its counter only.
- **Fencing**: each takeover gives the new holder the next ``fence`` number, and every renewal
  checks that the file still names this holder's token and fence. :meth:`Lease.renew` is the
  check a holder makes right before it publishes; it also refuses when more than 3/4 of a TTL of
  the holder's own monotonic time passed since its last good renewal (another process may have
  watched it for a TTL since), so a holder that was paused, or whose lease was taken over, never
  publishes. A reader waits a whole TTL of its own time after the last renewal it saw before it
  takes over, and the holder writes only within 3/4 of a TTL of its last one: the two never overlap
  as long as the clocks' *rates* agree (not their readings).

Takeover renames the stale file away and checks that what it moved is what it judged stale (same
token and renewal count), putting back anything else, so two takers cannot both win.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jupyter_starverse._procs import ProcessRecord, alive, process_record
from jupyter_starverse.errors import PermissionDeniedError

from ._perms import FULL, make_dirs, translate_permissions

_USER_FOLDER = re.compile(r"u\d+")


def _own_folder(folder: Path) -> None:
    """Make the lease's folder; a per-user one (``u<uid>``) is not group-writable and must be ours.

    In a shared store ``.leases`` is sticky and group-writable: a lease another member planted
    there could never be replaced by us. So a user's leases live in a folder only that user
    writes, and one that someone else made for us is refused, with who did it.
    """
    make_dirs(folder.parent)
    if not _USER_FOLDER.fullmatch(folder.name):
        make_dirs(folder)
        return
    try:
        st = folder.lstat()
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            folder.mkdir()
            folder.chmod(0o755 | (folder.parent.stat().st_mode & stat.S_ISGID))
        st = folder.lstat()
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode) or (st.st_uid != me and me != 0) or st.st_mode & stat.S_IWOTH:
        raise PermissionDeniedError(
            f"the lease folder {folder} is not yours (uid {st.st_uid}, {stat.filemode(st.st_mode)}): "
            "someone else made it, so your pulls cannot take a lease",
            hint=f"ask its owner (or root) to remove {folder}; your next pull makes it again",
        )


__all__ = ["Lease", "LeaseInfo"]

_SAFE_SHARE = 0.75  # of the TTL: how long after its last good renewal a holder may still write


@dataclass(frozen=True)
class LeaseInfo:
    """What a lease file says: who holds it, how often it was renewed, its fence and TTL."""

    token: str
    process: ProcessRecord | None
    renewals: int
    fence: int
    ttl: float
    path: str = ""

    @property
    def host(self) -> str:
        return (self.process.host if self.process is not None else None) or "?"

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else -1

    def is_stale(self, now: float | None = None) -> bool:
        """True when the holder is a dead process of this host, or when this process has watched the
        renewal counter stand still for ``ttl`` seconds of its monotonic clock (``now``: a monotonic time)."""
        if self.process is not None and alive(self.process) is False:
            return True
        return _SEEN.still_for(self, time.monotonic() if now is None else now) >= self.ttl


class _Seen:
    """What this process saw of each lease file: (token, renewals) and since when (monotonic)."""

    _MAX = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: dict[str, tuple[tuple[str, int], float]] = {}

    def still_for(self, info: LeaseInfo, now: float) -> float:
        key = (info.token, info.renewals)
        with self._lock:
            seen = self._first.get(info.path)
            if seen is None or seen[0] != key:
                if len(self._first) >= self._MAX:
                    self._first.clear()  # forgetting only delays a takeover by a TTL
                self._first[info.path] = (key, now)
                return 0.0
            return now - seen[1]

    def forget(self, path: str) -> None:
        with self._lock:
            self._first.pop(path, None)


_SEEN = _Seen()


def _parse(path: Path, raw: bytes, ttl: float) -> LeaseInfo:
    try:
        data = json.loads(raw)
        token = data["token"]
        if not isinstance(token, str) or not token:
            raise ValueError(token)
        record = ProcessRecord.from_json(data.get("process", data))  # older files: host and pid at the top
        return LeaseInfo(
            token, record, int(data.get("renewals", 0)), int(data.get("fence", 0)), float(data["ttl"]), str(path)
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        # Foreign or damaged content: stale once it stayed the same for the reader's TTL.
        return LeaseInfo("?" + hashlib.sha256(raw).hexdigest()[:16], None, 0, 0, ttl, str(path))


def _read(path: Path, ttl: float = 30.0) -> LeaseInfo | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        raw = b""
    return _parse(path, raw, ttl)


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
        self.fence = 0  # set when taken: one more than the holder it took over from
        self.renewals = 0
        self.record = process_record(os.getpid())  # who holds it: host, boot id, pid namespace, pid, start
        self._held = False
        self._renewed = 0.0  # monotonic time of the last good write
        self._lock = threading.Lock()  # renew (the renewer thread) against release (the holder)

    def _content(self) -> str:
        return json.dumps(
            {
                "token": self.token,
                "fence": self.fence,
                "renewals": self.renewals,
                "ttl": self.ttl,
                "process": self.record.to_json(),
                "written_at": time.time(),  # for people reading the file; nobody compares it
            }
        )

    def _write_temp(self) -> Path:
        tmp = self.path.with_name(f"{self.path.name}.{self.token}.tmp")
        try:
            tmp.write_text(self._content())
        except OSError as e:
            tmp.unlink(missing_ok=True)  # a full disk leaves no empty temp file behind
            raise OSError(e.errno, e.strerror, str(self.path)) from e
        return tmp

    @property
    def held(self) -> bool:
        return self._held and not self.lost.is_set()

    def holder(self) -> LeaseInfo | None:
        """The current holder, or None when the lease is free."""
        return _read(self.path, self.ttl)

    @translate_permissions("take a store lease")
    def try_acquire(self) -> bool:
        """Take the lease if it is free or stale; never blocks (call it again to keep watching)."""
        _own_folder(self.path.parent)  # a lease in a folder someone else made for us is no lease
        current = _read(self.path, self.ttl)
        if current is not None and not current.is_stale():
            return False  # the common case for waiters: no write at all
        self.fence = (current.fence if current is not None else 0) + 1
        self.renewals = 0
        started = time.monotonic()
        tmp = self._write_temp()
        try:
            for _ in range(3):
                try:
                    os.link(tmp, self.path)
                except FileExistsError:
                    info = _read(self.path, self.ttl)
                    if info is not None and not info.is_stale():
                        return False
                    if info is not None:
                        self._break(info)
                        if info.fence >= self.fence:
                            self.fence = info.fence + 1
                            tmp.unlink(missing_ok=True)
                            tmp = self._write_temp()
                    continue
                except OSError as e:
                    if e.errno in FULL:
                        raise  # a full disk is not "someone else holds it": say so (translated above)
                    # NFS: the link reply may be lost although the link was made.
                    if tmp.stat().st_nlink != 2:
                        return False
                self._held = True
                self._renewed = started
                self.lost.clear()
                _SEEN.forget(str(self.path))
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
        now = _read(moved, self.ttl)
        if now is not None and (now.token, now.renewals) != (stale.token, stale.renewals):
            # We moved a lease renewed or taken since we judged it: put it back.
            with contextlib.suppress(OSError):
                os.link(moved, self.path)
        moved.unlink(missing_ok=True)

    def renew(self) -> bool:
        """Extend the lease: the fence check before a publication.

        False (and ``lost`` set) when the file no longer names this holder's token and fence, or
        when more than 3/4 of a TTL passed since the last good renewal (by this process's monotonic
        clock): another process may have watched the lease stand still for a TTL and taken it.
        """
        with self._lock:
            if not self._held or self.lost.is_set():
                return False
            started = time.monotonic()
            info = _read(self.path, self.ttl)
            if info is None or info.token != self.token or info.fence != self.fence or self._late(started):
                self.lost.set()
                return False
            self.renewals += 1
            tmp = self._write_temp()
            try:
                if self._late(time.monotonic()):
                    self.lost.set()
                    return False
                tmp.replace(self.path)
            finally:
                tmp.unlink(missing_ok=True)
            self._renewed = started
            return True

    def _late(self, now: float) -> bool:
        return now - self._renewed > self.ttl * _SAFE_SHARE

    def release(self) -> None:
        """Give the lease back (only if we still hold it)."""
        with self._lock:
            if self._held:
                info = _read(self.path, self.ttl)
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
