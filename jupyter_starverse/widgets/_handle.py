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

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import MetricPoint, RunPaths, read_json, read_metrics
from jupyter_starverse.launch import Job, JobState, LogLine

from ._progress import JobProgress, RankRecord, summarize
from ._reader import MetricsFollower, tail_run_logs

if TYPE_CHECKING:
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.costs import Cost
    from jupyter_starverse.launch import LaunchBackend

    from .monitor import JobMonitor

__all__ = ["JobHandle", "read_job_metrics", "read_rank_records"]


def read_job_metrics(job: Job) -> list[MetricPoint]:
    """The metric records of ``job`` from its run folder (empty before the first step)."""
    return read_metrics(Path(job.experiment_dir))


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def read_rank_records(job: Job) -> list[RankRecord]:
    """Pid, node, restart count and last error of each rank, as its worker recorded them."""
    run = RunPaths(Path(job.experiment_dir))
    out = []
    for rank in range(job.spec.world_size):
        info = read_json(run.pids / f"rank{rank}.json")
        err = read_json(run.errors / f"rank{rank}.json")
        if not isinstance(info, dict) and not isinstance(err, dict):
            continue
        base = info if isinstance(info, dict) else err
        out.append(
            RankRecord(
                rank=rank,
                node=_int(base.get("node"), rank // job.spec.procs_per_node),
                local_rank=_int(base.get("local_rank"), rank % job.spec.procs_per_node),
                pid=_int(base.get("pid")) or None,
                attempt=_int(base.get("attempt")),
                error=str(err.get("error")) if isinstance(err, dict) else None,
                error_attempt=_int(err.get("attempt")) if isinstance(err, dict) else None,
            )
        )
    return out


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
        self._metrics = MetricsFollower()

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
        return self._metrics.read(self.job)

    def progress(self, *, job: Job | None = None) -> JobProgress:
        """Step, ETA, throughput, metric series and cost so far."""
        job = job if job is not None else self.job
        return summarize(job, self._metrics.read(job), cost=self.cost(job=job), ranks=read_rank_records(job))

    def cost(self, *, job: Job | None = None) -> Cost | str:
        """What the job cost so far; a sentence saying why when it cannot be priced."""
        job = job if job is not None else self.job
        try:
            return self.client.costs.meter(job)
        except BadInputError as e:  # e.g. a GPU type missing from the price table
            return f"not priced: {e}"

    def tail(self, lines: int = 20, *, rank: int | None = None, job: Job | None = None) -> list[LogLine]:
        """The last log lines: ``lines`` shared among the ranks, plus the last 2 of each node agent.

        Logs carry no timestamps, so lines are grouped by source (rank order, then agents)
        rather than interleaved; ``rank`` restricts the tail to one rank. Local runs are
        read from the ends of their log files; other backends through ``backend.logs``.
        """
        job = job if job is not None else self.job
        if job.backend == "local":
            fast = tail_run_logs(job, read_rank_records(job), lines=lines, rank=rank)
            if fast is not None:
                return fast
        per_source: dict[tuple[int, int | None], collections.deque[LogLine]] = {}
        for line in self.backend.logs(self.id, rank=rank):
            key = (line.node, line.rank)
            if key not in per_source:
                per_source[key] = collections.deque(maxlen=lines)
            per_source[key].append(line)
        rank_keys = sorted((k for k in per_source if k[1] is not None), key=lambda k: k[1] or 0)
        agent_keys = sorted(k for k in per_source if k[1] is None)
        share = max(3, lines // max(1, len(rank_keys)))
        out: list[LogLine] = []
        for key in rank_keys:
            out.extend(list(per_source[key])[-share:])
        for key in agent_keys:
            out.extend(list(per_source[key])[-2:])
        return out

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
