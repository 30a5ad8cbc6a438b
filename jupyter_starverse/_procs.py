"""Processes on this host: the one pid-liveness check, and finding and stopping a local job's processes.

torchrun starts each worker in its own session, so killing an agent's process group
leaves its workers running. Every process of a job carries ``STARVERSE_JOB_ID`` (and
``STARVERSE_NODE_INDEX``) in its environment; on Linux we find them all through
``/proc/<pid>/environ``; elsewhere through the pid files the workers write.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["is_job_process", "job_processes", "pid_alive", "signal_pids", "stop_pids"]

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
