"""Processes on this host: the one pid-liveness check, and finding and stopping a local job's processes.

A pid means something only on the host (kernel boot, pid namespace) that issued it, and only
for as long as that process lives: :class:`ProcessRecord` keeps the pid with the host name,
boot id, pid namespace and start time, and :func:`alive` answers ``None`` ("cannot tell from
here") for a process of another host, so callers judge such a process by other means
(the local backend: the supervisor's heartbeat).

torchrun starts each worker in its own session, so killing an agent's process group
leaves its workers running. Every process of a job carries ``STARVERSE_JOB_ID`` (and
``STARVERSE_NODE_INDEX``) in its environment; on Linux we find them all through
``/proc/<pid>/environ``; elsewhere through the pid files the workers write.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "HostId",
    "ProcessRecord",
    "alive",
    "host_identity",
    "is_job_process",
    "job_processes",
    "pid_alive",
    "process_record",
    "process_start_time",
    "signal_pids",
    "stop_pids",
]

_PROC = Path("/proc")


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` runs (zombies count as gone)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@dataclass(frozen=True)
class HostId:
    """Where pids are valid: host name, kernel boot and pid namespace (``None``: unknown here)."""

    host: str
    boot_id: str | None = None
    pid_ns: str | None = None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def host_identity() -> HostId:
    """This process's host: ``socket.gethostname()``, ``/proc/sys/kernel/random/boot_id`` and pid namespace."""
    try:
        pid_ns: str | None = str((_PROC / "self" / "ns" / "pid").readlink())
    except OSError:
        pid_ns = None
    return HostId(socket.gethostname(), _read(_PROC / "sys" / "kernel" / "random" / "boot_id"), pid_ns)


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks after boot (``/proc/<pid>/stat`` field 22); None without one."""
    stat = _read(_PROC / str(pid) / "stat")
    if stat is None:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # fields after "(comm)" start at field 3
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class ProcessRecord:
    """A process as recorded for others to judge: a pid alone is ambiguous across hosts, boots and reuse.

    ``host`` None marks a record from before hosts were recorded (judged by pid on this host, as then).
    """

    pid: int
    host: str | None = None
    boot_id: str | None = None
    pid_ns: str | None = None
    start_time: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "host": self.host,
            "boot_id": self.boot_id,
            "pid_ns": self.pid_ns,
            "start_time": self.start_time,
        }

    @classmethod
    def from_json(cls, data: Any) -> ProcessRecord | None:
        """The record in ``data``; None when it holds no usable pid (absent, old or foreign)."""
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or isinstance(data["pid"], bool):
            return None

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) and value else None

        start = data.get("start_time")
        return cls(
            pid=data["pid"],
            host=text("host"),
            boot_id=text("boot_id"),
            pid_ns=text("pid_ns"),
            start_time=start if isinstance(start, int) and not isinstance(start, bool) else None,
        )

    def same_host(self, here: HostId | None = None) -> bool | None:
        """True if the pid is valid here, False if it belongs to another host, None for an old record."""
        if self.host is None:
            return None
        here = here or host_identity()
        if self.host != here.host:
            return False
        return all(mine is None or theirs is None or mine == theirs
                   for mine, theirs in ((self.boot_id, here.boot_id), (self.pid_ns, here.pid_ns)))  # fmt: skip


def process_record(pid: int) -> ProcessRecord:
    """Record ``pid`` (a process of this host) with where and when it started."""
    here = host_identity()
    return ProcessRecord(pid, here.host, here.boot_id, here.pid_ns, process_start_time(pid))


def alive(record: ProcessRecord) -> bool | None:
    """Whether the recorded process still runs: None when this host cannot tell (another host,
    boot or pid namespace). A reused pid (another start time) counts as gone.
    A record without a host (written before hosts were recorded) is judged by its pid here.
    """
    if record.same_host() is False:
        return None
    if not pid_alive(record.pid):
        return False
    if record.start_time is not None:
        started = process_start_time(record.pid)
        if started is not None and started != record.start_time:
            return False
    return True


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def is_job_process(pid: int, job_id: str) -> bool:
    """True if ``pid`` is alive and belongs to ``job_id`` (guards against reused pids)."""
    if not pid_alive(pid):
        return False
    env = _environ(pid)
    return True if env is None and not _PROC.is_dir() else bool(env and env.get("STARVERSE_JOB_ID") == job_id)


def job_processes(job_id: str, *, node: int | None = None, pid_dir: Path | None = None) -> list[int]:
    """Pids of every live process of ``job_id`` (of one ``node`` when given), except ours."""
    me = os.getpid()
    found: set[int] = set()
    if _PROC.is_dir():
        for entry in _PROC.iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            env = _environ(int(entry.name))
            if not env or env.get("STARVERSE_JOB_ID") != job_id:
                continue
            if node is not None and env.get("STARVERSE_NODE_INDEX") != str(node):
                continue
            if pid_alive(int(entry.name)):
                found.add(int(entry.name))
    elif pid_dir is not None and pid_dir.is_dir():
        for f in pid_dir.glob("rank*.json"):
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if (node is None or data.get("node") == node) and pid_alive(data.get("pid")) and data["pid"] != me:
                found.add(int(data["pid"]))
    return sorted(found)


def signal_pids(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each pid, ignoring those already gone."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_pids(pids: Iterable[int], *, grace: float = 10.0, poll: float = 0.1) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL whatever is left."""
    pending = [p for p in pids if pid_alive(p)]
    signal_pids(pending, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pending and time.monotonic() < deadline:
        time.sleep(poll)
        pending = [p for p in pending if pid_alive(p)]
    signal_pids(pending, signal.SIGKILL)
