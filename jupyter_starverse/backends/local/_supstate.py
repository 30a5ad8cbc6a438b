"""The supervisor's state and bookkeeping, the base every part of it builds on.

:class:`SupervisorState` holds what one local job's supervisor knows (the run folder, the
job's spec and launch plan from stdin, the settings, the node processes and logs, the stop
request, the budget, idle and heartbeat clocks) and what one attempt of it knows (agents'
exits, the workers' pids, vanished ranks, log offsets); it writes every change into
``status.json``, stamps the heartbeat, takes a stop request, and reads a request file only
when its writer may ask it. The timing constants of the supervisor live here too. The parts
that act (``_supspawn``, ``_suplimits``, ``_supwatch``, ``_suprecover``) are mixins over it,
joined in ``_supervisor``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import group_id, open_under
from jupyter_starverse.experiments import (
    NodeRecord,
    RunPaths,
    RunStatus,
    folder_modes,
    read_record,
    read_status,
    write_status,
)
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.runtime._guards import IdleTracker

from .._torchrun import LaunchPlan
from . import _pool
from ._attempts import PREEMPT_RESTARTS

__all__ = [
    "BUDGET_EVERY_S",
    "GRACE_S",
    "HARD_LOOKAHEAD_S",
    "HEARTBEAT_S",
    "IDLE_POLL_S",
    "POLL_S",
    "SETTLE_S",
    "SupervisorState",
    "open_log",
]

POLL_S = 0.2
HEARTBEAT_S = 5.0  # default; the backend passes its own with --heartbeat
BUDGET_EVERY_S = 0.5
GRACE_S = 30.0  # default time from SIGTERM to SIGKILL (the backend passes its own with --grace)
SETTLE_S = 3.0  # after a process of an attempt ends badly, how long the others get to end on their own
IDLE_POLL_S = 10.0  # seconds between two utilisation readings of a job's GPUs
HARD_LOOKAHEAD_S = 2.0  # a hard stop shows in the meter within: poll + SIGKILL + the started second


class SupervisorState:
    def __init__(
        self,
        run: RunPaths,
        listen_fd: int | None,
        heartbeat: float = HEARTBEAT_S,
        *,
        spec: JobSpec,
        plan: LaunchPlan,
        grace: float = GRACE_S,
        preempt_restarts: int = PREEMPT_RESTARTS,
        resume: bool = False,
    ) -> None:
        self.run = run
        self.spec = spec
        self.plan = plan
        self.listen_fd = listen_fd
        self.settings = Settings.from_env()
        self.owner = run.owner
        self.admin_gid = group_id(self.settings.admin_group)
        status = read_status(run)
        self.status = status if status is not None else RunStatus(job_id=self.plan.job_id, created=time.time())
        self.procs: dict[int, subprocess.Popen[bytes] | _pool.WarmAgent] = {}
        self.logs: dict[int, BinaryIO] = {}
        self.stop_reason: str | None = None
        self.stop_state = "cancelled"
        self.store: Any = None
        self._own_socket: socket.socket | None = None
        self.pool_wanted: tuple[str, dict[str, str]] | None = None  # start a warm pool once this job runs
        self.port = self.plan.port
        self._next_budget = 0.0
        self.heartbeat_every = max(0.05, heartbeat)
        self._next_beat = 0.0
        self.grace = max(0.5, grace)
        self.preempt_restarts = max(0, preempt_restarts)
        self.resume = resume
        self.hard = False
        self._budget_stop = False
        self._stop_sent = 0.0
        self.idle = self._idle_tracker()
        self._next_idle = 0.0
        self._idle_warned = False
        self._new_attempt()

    def _idle_tracker(self) -> IdleTracker | None:
        """The idle guard of a GPU job (or of any job whose utilisation source is injected)."""
        minutes = self.settings.job_idle_minutes
        if not minutes or not (self.spec.is_gpu or os.environ.get("STARVERSE_GPU_UTIL_FILE")):
            return None
        return IdleTracker(minutes=minutes, warn_minutes=min(5.0, minutes / 2))

    def _new_attempt(self) -> None:
        self.attempt_started = time.time()
        self.agent_exit: dict[int, int] = {}
        self.agent_seen: dict[int, float] = {}
        self.workers: dict[int, tuple[int, int]] = {}  # rank -> (pid, node) of this attempt
        self.worker_seen: dict[int, float] = {}
        self.vanished: dict[int, tuple[int, float]] = {}
        self.log_offsets: dict[int, int] = {}
        self.oom_before: int | None = None
        self.drill = False
        self.drill_deadline: tuple[float, list[int]] | None = None

    # -- bookkeeping --------------------------------------------------------------
    def save(self, **changes: Any) -> None:
        self.status = replace(self.status, **changes)
        write_status(self.run, self.status)

    def beat(self) -> None:
        """Stamp the heartbeat (and so rewrite ``status.json``: a record wrongly marked finished heals)."""
        if time.monotonic() >= self._next_beat:
            self._next_beat = time.monotonic() + self.heartbeat_every
            self.save(heartbeat=time.time())

    def node(self, index: int) -> NodeRecord:
        return self.status.nodes[index]

    def set_node(self, index: int, **changes: Any) -> None:
        self.status = self.status.with_node(replace(self.node(index), **changes))
        write_status(self.run, self.status)

    # -- requests -----------------------------------------------------------------
    def request_stop(self, reason: str, state: str = "cancelled") -> None:
        if self.stop_reason is None:
            self.stop_reason, self.stop_state = reason, state

    def request_file(self, path: Path) -> Any:
        """A cancel or drill request, when its writer may ask it (the owner, root, the admin group)."""
        if not path.exists() and not path.is_symlink():
            return None
        return read_record(path, owner=self.owner, admin_gid=self.admin_gid)


def open_log(run: RunPaths, path: Path) -> BinaryIO:
    """Append to a log of the run without following a link (one planted in ``logs/`` is refused)."""
    fd = open_under(run.root, path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, folder_modes(path.parent).file)
    return os.fdopen(fd, "ab")
