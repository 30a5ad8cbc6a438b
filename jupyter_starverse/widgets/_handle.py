"""``JobHandle``: what ``launch``, ``attach`` and ``%%sv train`` return in a notebook.

A handle holds only the facade, the backend name and the job id; every property reads
the job's source of truth again, so a handle made in a new kernel after a restart is as
good as the one made at launch. Displaying it shows the live monitor.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..experiments._metrics import MetricPoint, read_metrics
from ..launch import Job, JobState, LogLine
from ._progress import JobProgress, summarize

if TYPE_CHECKING:
    from ..client import Starverse
    from ..launch import LaunchBackend
    from .monitor import JobMonitor

__all__ = ["JobHandle", "read_job_metrics"]


def read_job_metrics(job: Job) -> list[MetricPoint]:
    """The metric records of ``job`` from its run folder (empty before the first step)."""
    return read_metrics(Path(job.experiment_dir))


class JobHandle:
    """A submitted job, re-readable from any process.

    Parameters
    ----------
    client
        The facade.
    job_id
        The job's id (``Job.id``).
    backend
        Name of the backend that runs it (default backend when omitted).
    """

    def __init__(self, client: Starverse, job_id: str, *, backend: str | None = None) -> None:
        self.client = client
        self.id = job_id
        self.backend_name = backend or client.settings.backend

    @property
    def backend(self) -> LaunchBackend:
        return self.client.backend(self.backend_name)

    @property
    def job(self) -> Job:
        """The job as its backend sees it now."""
        return self.backend.get(self.id)

    @property
    def state(self) -> JobState:
        return self.job.state

    @property
    def experiment_dir(self) -> str:
        return self.job.experiment_dir

    def metrics(self) -> list[MetricPoint]:
        """Every metric record logged so far."""
        return read_job_metrics(self.job)

    def progress(self, *, job: Job | None = None) -> JobProgress:
        """Step, ETA, throughput, metric series and cost so far."""
        job = job if job is not None else self.job
        return summarize(job, read_job_metrics(job), prices=self.client.prices, cost=self._cost(job))

    def _cost(self, job: Job) -> Any:
        """Cost so far from the costs package when it offers a job meter; None to use the price table."""
        from .. import costs

        meter = getattr(costs, "job_cost", None)
        if meter is None:
            return None
        return getattr(meter(job, self.client.prices), "amount", None)

    def tail(self, lines: int = 20, *, rank: int | None = None) -> list[LogLine]:
        """The last ``lines`` log lines (all ranks, each with its rank prefix when rendered)."""
        return list(collections.deque(self.backend.logs(self.id, rank=rank), maxlen=lines))

    def logs(self, *, follow: bool = False, rank: int | None = None) -> Iterator[LogLine]:
        """Every log line; with ``follow`` keep yielding until the job ends."""
        return self.backend.logs(self.id, follow=follow, rank=rank)

    def wait(self, *, timeout: float | None = None) -> Job:
        """Block until the job finished (or ``timeout`` seconds passed)."""
        return self.backend.wait(self.id, timeout=timeout)

    def cancel(self) -> Job:
        """Stop every process of the job (idempotent)."""
        return self.backend.cancel(self.id)

    def monitor(self, *, interval: float = 1.0, log_lines: int = 20, start: bool = True) -> JobMonitor:
        """A live monitor widget of this job."""
        from .monitor import JobMonitor

        return JobMonitor(self, interval=interval, log_lines=log_lines, start=start)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.monitor())  # type: ignore[no-untyped-call]

    def to_json(self) -> dict[str, Any]:
        job = self.job
        data = job.to_json()
        data["progress"] = self.progress(job=job).to_json(points=False)
        return data

    def __str__(self) -> str:
        job = self.job
        return f"{job.id}  {self.progress(job=job).line()}\n  experiment: {job.experiment_dir}"

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r}, backend={self.backend_name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and (other.id, other.backend_name) == (self.id, self.backend_name)

    def __hash__(self) -> int:
        return hash((self.id, self.backend_name))
