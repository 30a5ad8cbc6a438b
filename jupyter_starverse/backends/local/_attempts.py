"""What ended an attempt of a local job, what it cost, and keeping attempts apart.

An *attempt* is one launch of every node of a job. When one ends early the supervisor (or,
when the supervisor itself died, the reader that notices) looks at what the processes left
behind and names the **first event in time** as the root cause:

- a rank that received SIGTERM (``stops/rankN.json``, written by the runtime): ``preempted``;
- a torchrun agent or a worker killed by a signal (SIGKILL, the OOM killer): ``lost``; a
  worker's death is dated by the last time it was seen alive, so it comes before the
  "Connection closed by peer" errors it causes on the other ranks;
- a rank's error (``errors/rankN.json``) or exit code: ``failed``.

Errors that are only the echo of another rank's death (a collective that lost its peer) count
only when nothing else explains the end. ``preempted`` and ``lost`` are relaunched under the
preemption budget, ``failed`` under ``JobSpec.max_restarts``. The files of an attempt are then
moved to ``errors/attempt-N/`` and ``stops/attempt-N/`` so the next attempt starts clean.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import make_dir, open_under
from jupyter_starverse.backends._restarts import PREEMPT_EXIT, PREEMPT_RESTARTS, archive_attempt, lost_work
from jupyter_starverse.errors import StarverseError
from jupyter_starverse.experiments import RunPaths, folder_modes, read_json

__all__ = [
    "PREEMPT_EXIT",
    "PREEMPT_RESTARTS",
    "Event",
    "agent_exit_codes",
    "archive_attempt",
    "banner",
    "classify",
    "lost_work",
    "oom_kills",
    "signal_name",
]


_COLLATERAL = re.compile(
    r"Connection closed by peer|Connection reset|Broken pipe|ECONNRESET|ProcessGroupGloo|gloo|NCCL|"
    r"DistBackendError|timed out|Timeout|SignalException|SystemExit: 1\b|RendezvousClosed",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Event:
    """One thing that happened to an attempt: ``time`` (epoch), ``kind``, ``cause`` text."""

    time: float
    kind: str  # preempted | lost | failed
    cause: str
    collateral: bool = False


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def oom_kills() -> int | None:
    """The OOM killer's count for this cgroup (``memory.events``), ``None`` where unreadable."""
    for path in (Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control")):
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return None


_FAILURE_ROW = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.MULTILINE)


def agent_exit_codes(log: Path, since: int) -> dict[int, int]:
    """Exit codes torchrun reported per rank (its failure table) in ``log`` after byte ``since``."""
    try:
        with log.open("rb") as f:
            f.seek(since)
            text = f.read(1 << 20).decode(errors="replace")
    except OSError:
        return {}
    return {int(r): int(c) for r, c in _FAILURE_ROW.findall(text)}


def _records(folder: Path) -> list[dict[str, Any]]:
    out = []
    if folder.is_dir():
        for f in sorted(folder.glob("rank*.json")):
            with contextlib.suppress(OSError, ValueError):
                data = read_json(f)
                if isinstance(data, dict):
                    out.append(data)
    return out


def classify(
    run: RunPaths,
    *,
    attempt: int,
    started: float,
    agents: dict[int, tuple[int | None, float]],
    vanished: dict[int, tuple[int, float]],
    log_offsets: dict[int, int],
    oom_before: int | None,
    drill: bool = False,
) -> tuple[Event | None, list[Event]]:
    """The root cause of the end of ``attempt`` and every event seen.

    ``agents``: node -> (exit code or None while it ran, last time seen running);
    ``vanished``: rank -> (node, last time seen alive) for workers that ended before the attempt did;
    ``log_offsets``: node -> size of its agent log when the attempt started.
    """
    events: list[Event] = []
    stopped: set[int] = set()
    for rec in _records(run.stops):
        if int(rec.get("attempt") or 0) != attempt:
            continue
        rank = int(rec.get("rank", -1))
        stopped.add(rank)
        signalled = rec.get("signalled")
        if isinstance(signalled, (int, float)):
            how = "the preemption drill's SIGTERM" if drill else "SIGTERM"
            events.append(Event(float(signalled), "preempted", f"rank {rank} (node {rec.get('node')}) received {how}"))
    errored: set[int] = set()
    for rec in _records(run.errors):
        when = rec.get("time")
        if not isinstance(when, (int, float)) or when < started:
            continue
        rank = int(rec.get("rank", -1))
        message = str(rec.get("error") or "")
        if rank in stopped and message == f"SystemExit: {PREEMPT_EXIT}":
            continue  # the runtime's own exit after its checkpoint
        errored.add(rank)
        events.append(
            Event(
                float(when),
                "failed",
                f"rank {rank} (node {rec.get('node')}): {message}",
                collateral=bool(_COLLATERAL.search(message)),
            )
        )
    codes: dict[int, int] = {}
    tabled: set[int] = set()  # nodes whose agent printed its failure table
    for node in agents:
        found = agent_exit_codes(run.node_log(node), log_offsets.get(node, 0))
        if found:
            tabled.add(node)
            for rank, code in found.items():
                codes[rank] = code
                if rank not in vanished and rank not in stopped and rank not in errored and code > 0:
                    when = agents[node][1]  # no pid recorded (a command job): dated by its agent
                    events.append(Event(when, "failed", f"rank {rank} (node {node}) exited with code {code}"))
    oom = oom_kills()
    oom_note = (
        " (the kernel's OOM killer acted during this attempt)"
        if oom and oom_before is not None and oom > oom_before
        else ""
    )
    for rank, (node, seen) in vanished.items():
        if rank in stopped or rank in errored:
            continue
        rank_code = codes.get(rank)
        if rank_code is not None and rank_code > 0:
            events.append(Event(seen, "failed", f"rank {rank} (node {node}) exited with code {rank_code}"))
        elif rank_code is not None and rank_code < 0:
            events.append(
                Event(seen, "lost", f"rank {rank} (node {node}) was killed by {signal_name(-rank_code)}{oom_note}")
            )
        elif node not in tabled and agents.get(node, (None, 0.0))[0] not in (None, 0):
            events.append(Event(seen, "lost", f"rank {rank} (node {node}) died without a record (killed by a signal?)"))
    for node, (agent_code, seen) in agents.items():
        if agent_code is not None and agent_code < 0:
            name = signal_name(-agent_code)
            events.append(Event(seen, "lost", f"node {node}'s torchrun agent was killed by {name}{oom_note}"))
    primary = [e for e in events if not e.collateral]
    pool = primary or events
    root = min(pool, key=lambda e: e.time) if pool else None
    return root, sorted(events, key=lambda e: e.time)


def banner(run: RunPaths, world_size: int, text: str) -> None:
    """Append ``text`` to every rank's log: where one attempt ends and the next begins."""
    make_dir(run.logs, folder_modes(run.root), root=run.root)
    for rank in range(world_size):
        with contextlib.suppress(OSError, StarverseError):  # a link in logs/ is refused, never written through
            fd = open_under(run.root, run.rank_log(rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                            folder_modes(run.logs).file)  # fmt: skip
            with os.fdopen(fd, "a") as f:
                f.write(text.rstrip("\n") + "\n")
