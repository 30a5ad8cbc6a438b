"""What every backend whose ranks write into a run folder shares: logs, tails and waiting.

The local and Slurm backends both keep a job's per-rank logs in its experiment run folder
(shared storage), so reading them is the same code; only how a job id maps to its folder
differs (:meth:`RunFolderBackend.run_of`).
"""

from __future__ import annotations

import builtins
import time
from abc import abstractmethod
from collections.abc import Iterator

from jupyter_starverse.experiments import RunPaths
from jupyter_starverse.jobmodel import Job, LaunchBackend, LogLine
from jupyter_starverse.watch import follow_logs, read_rank_records, tail_run_logs

__all__ = ["RunFolderBackend"]


class RunFolderBackend(LaunchBackend):
    """A backend whose jobs' logs live in their run folder."""

    #: Seconds between two looks at a job in :meth:`wait`.
    poll: float = 0.2

    @abstractmethod
    def run_of(self, job_id: str) -> RunPaths:
        """The run folder of ``job_id``; ``NotFoundError`` for an unknown id."""

    def logs(self, job_id: str, *, follow: bool = False, rank: int | None = None) -> Iterator[LogLine]:
        run = self.run_of(job_id)
        job = self.get(job_id)
        return follow_logs(
            run,
            world_size=job.spec.world_size,
            nodes=job.spec.nodes,
            rank=rank,
            follow=follow,
            finished=lambda: self.get(job_id).state.finished,
        )

    def tail(
        self, job_id: str, *, lines: int = 20, rank: int | None = None, job: Job | None = None
    ) -> builtins.list[LogLine]:
        """The last lines, read from the ends of the run's log files (a 200 MB log costs the same as 2 KB)."""
        job = job if job is not None else self.get(job_id)
        fast = tail_run_logs(job, read_rank_records(job), lines=lines, rank=rank)
        return fast if fast is not None else super().tail(job_id, lines=lines, rank=rank, job=job)

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.state.finished or (deadline is not None and time.monotonic() >= deadline):
                return job
            time.sleep(self.poll)
