"""``JobWatch``: one job, re-readable from any process, with its progress, metrics and logs.

A watch holds only the backend, the job id and a cost meter; every property reads the
job's source of truth again, so a watch made in a new kernel after a restart is as good as
the one made at launch. The notebook's ``JobHandle`` is a watch that also displays itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import MetricPoint
from jupyter_starverse.jobmodel import Job, JobState, LaunchBackend, LogLine

from ._progress import JobProgress, summarize
from ._ranks import read_rank_points, read_rank_records
from ._reader import MetricsFollower

if TYPE_CHECKING:
    from jupyter_starverse.costs import Cost

__all__ = ["JobWatch", "Meter"]

#: What a job cost so far (the costs service's ``meter``).
Meter = Callable[[Job], "Cost"]


class JobWatch:
    """A submitted job, watched.

    Parameters
    ----------
    backend
        The backend that runs the job.
    job_id
        The job's id (``Job.id``).
    meter
        What the job cost so far (``Starverse.costs.meter``); without it no cost is shown.

    Notes
    -----
    Safe to share between threads: the server keeps one watch per job across requests, so
    a poll reads only the metric lines appended since the previous one.
    """

    def __init__(self, backend: LaunchBackend, job_id: str, *, meter: Meter | None = None) -> None:
        self.backend = backend
        self.id = job_id
        self._meter = meter
        self._metrics = MetricsFollower()

    @property
    def backend_name(self) -> str:
        return self.backend.name

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
        return self._metrics.read(self.job)

    def progress(self, *, job: Job | None = None) -> JobProgress:
        """Step, ETA, throughput, metric series and cost so far."""
        job = job if job is not None else self.job
        return summarize(
            job,
            self._metrics.read(job),
            cost=self.cost(job=job),
            ranks=read_rank_records(job),
            rank_points=read_rank_points(job),
        )

    def cost(self, *, job: Job | None = None) -> Cost | str | None:
        """What the job cost so far; a sentence saying why when it cannot be priced."""
        if self._meter is None:
            return None
        job = job if job is not None else self.job
        try:
            return self._meter(job)
        except BadInputError as e:  # e.g. a GPU type missing from the price table
            return f"not priced: {e}"

    def tail(self, lines: int = 20, *, rank: int | None = None, job: Job | None = None) -> list[LogLine]:
        """The last log lines: ``lines`` shared among the ranks, plus the last 2 of each node agent."""
        return self.backend.tail(self.id, lines=lines, rank=rank, job=job)

    def logs(self, *, follow: bool = False, rank: int | None = None) -> Iterator[LogLine]:
        """Every log line; with ``follow`` keep yielding until the job ends."""
        return self.backend.logs(self.id, follow=follow, rank=rank)

    def wait(self, *, timeout: float | None = None) -> Job:
        """Block until the job finished (or ``timeout`` seconds passed)."""
        return self.backend.wait(self.id, timeout=timeout)

    def cancel(self) -> Job:
        """Stop every process of the job (idempotent)."""
        return self.backend.cancel(self.id)

    def to_json(self) -> dict[str, Any]:
        job = self.job
        data = job.to_json()
        data["progress"] = self.progress(job=job).to_json(points=False)
        return data

    def __str__(self) -> str:
        job = self.job
        return f"{job.id}  {self.progress(job=job).line()}\n  experiment: {job.experiment_dir}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, backend={self.backend_name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobWatch) and (other.id, other.backend_name) == (self.id, self.backend_name)

    def __hash__(self) -> int:
        return hash((self.id, self.backend_name))
