"""The contract every launch backend fulfils, and the records it returns."""

from __future__ import annotations

import builtins
import collections
import enum
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConflictError
from ._endpoint import EndpointSpec
from ._spec import JobSpec

__all__ = ["JobState", "NodeStatus", "Job", "LogLine", "LaunchBackend", "group_tail"]


class JobState(str, enum.Enum):
    """Life cycle of a job (and of each node of it).

    ``pending -> running -> succeeded | failed | cancelled``. A preemption (a SIGTERM or the loss
    of a node that nobody asked for) goes ``running -> preempted -> resuming -> running``: the
    ranks checkpoint, the backend relaunches them and they resume from that checkpoint.
    ``preempted`` and ``resuming`` are not finished; :attr:`active` is True for both.
    """

    PENDING = "pending"
    RUNNING = "running"
    PREEMPTED = "preempted"
    RESUMING = "resuming"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    @property
    def active(self) -> bool:
        """Started and not finished: running, or between a preemption and the resume."""
        return self in (JobState.RUNNING, JobState.PREEMPTED, JobState.RESUMING)


@dataclass(frozen=True)
class NodeStatus:
    """One node (local agent process or pod) of a job."""

    index: int
    state: JobState
    name: str = ""
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    started: float | None = None
    finished: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "state": self.state.value,
            "name": self.name,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "started": self.started,
            "finished": self.finished,
        }


@dataclass(frozen=True)
class Job:
    """A submitted job as a backend sees it now."""

    id: str
    backend: str
    spec: JobSpec
    state: JobState
    experiment_dir: str
    created: float
    started: float | None = None
    finished: float | None = None
    reason: str | None = None
    nodes: tuple[NodeStatus, ...] = field(default_factory=tuple)
    restarts: int = 0  # relaunches of the whole job so far (preemptions, lost nodes, retried failures)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "backend": self.backend,
            "name": self.spec.name,
            "spec": self.spec.to_json(),
            "state": self.state.value,
            "experiment_dir": self.experiment_dir,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "reason": self.reason,
            "nodes": [n.to_json() for n in self.nodes],
            "restarts": self.restarts,
        }


@dataclass(frozen=True)
class LogLine:
    """One line of output of one rank (``rank`` is None for agent/pod-level lines)."""

    node: int
    rank: int | None
    text: str

    def render(self) -> str:
        prefix = f"[{self.rank}]" if self.rank is not None else f"[node{self.node}]"
        return f"{prefix} {self.text}"


def group_tail(lines: Iterable[LogLine], count: int) -> list[LogLine]:
    """The tail of a job's log lines: ``count`` shared among the ranks, plus the last 2 of each agent.

    Logs carry no timestamps, so lines are grouped by source (rank order, then agents)
    rather than interleaved.
    """
    per_source: dict[tuple[int, int | None], collections.deque[LogLine]] = {}
    for line in lines:
        key = (line.node, line.rank)
        if key not in per_source:
            per_source[key] = collections.deque(maxlen=count)
        per_source[key].append(line)
    rank_keys = sorted((k for k in per_source if k[1] is not None), key=lambda k: k[1] or 0)
    agent_keys = sorted(k for k in per_source if k[1] is None)
    share = max(3, count // max(1, len(rank_keys)))
    out: list[LogLine] = []
    for key in rank_keys:
        out.extend(list(per_source[key])[-share:])
    for key in agent_keys:
        out.extend(list(per_source[key])[-2:])
    return out


class LaunchBackend(ABC):
    """Where jobs run. Implementations: ``LocalBackend``, ``KubernetesBackend``.

    A backend keeps no job state in memory that is not also recoverable from its
    source of truth (experiment folder, cluster), so a new instance in another
    process sees the same jobs.
    """

    name: str = ""

    @abstractmethod
    def submit(self, spec: JobSpec, *, dry_run: bool = False) -> Job:
        """Start a job. With ``dry_run`` validate and plan it without starting anything."""

    @abstractmethod
    def get(self, job_id: str) -> Job:
        """The job's current state; raise ``NotFoundError`` for an unknown id."""

    @abstractmethod
    def list(self) -> list[Job]:
        """All jobs this backend knows, newest first."""

    @abstractmethod
    def logs(self, job_id: str, *, follow: bool = False, rank: int | None = None) -> Iterator[LogLine]:
        """Log lines of every rank; with ``follow`` keep yielding until the job finishes."""

    def tail(
        self, job_id: str, *, lines: int = 20, rank: int | None = None, job: Job | None = None
    ) -> builtins.list[LogLine]:
        """The last log lines (see :func:`group_tail`); ``rank`` restricts them to one rank.

        The default reads :meth:`logs` through; backends whose logs are files override it
        to read from the files' ends, so a poll costs the same for a 200 MB log as a 2 KB one.
        ``job`` is the job record when the caller already has it (saves a lookup).
        """
        return group_tail(self.logs(job_id, rank=rank), lines)

    @abstractmethod
    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Block until the job finished (or ``timeout`` seconds passed) and return it."""

    @abstractmethod
    def cancel(self, job_id: str) -> Job:
        """Stop every process of the job; idempotent on finished jobs."""

    def preempt(self, job_id: str) -> Job:
        """Rehearse a preemption: SIGTERM a node of the running job as a provider would.

        The ranks checkpoint, the backend relaunches them and they resume from that checkpoint
        (``preempted -> resuming -> running``). Backends that cannot do this raise.
        """
        raise ConflictError(
            f"the {self.name or type(self).__name__} backend cannot rehearse a preemption",
            hint="run the drill on the local backend (`starverse jobs preempt JOB_ID --backend local`)",
        )

    def env_target(self, spec: JobSpec) -> str:
        """What runs the job's Python, for its environment's diff (``envs``): ``python:PATH``
        (default: this interpreter, as for local ranks) or ``image:NAME`` (a container image)."""
        return f"python:{sys.executable}"

    def render_endpoint(self, spec: EndpointSpec, *, output: str = "yaml") -> str:
        """What would serve ``spec`` on this backend (manifests, a batch script), as text; starts nothing."""
        from ..errors import BadInputError

        raise BadInputError(
            f"the {self.name} backend renders no endpoint",
            field="backend",
            hint="`starverse serve MODEL` serves on this machine; --backend kubernetes or slurm --dry-run renders one",
        )

    @abstractmethod
    def render(self, spec: JobSpec, *, output: str = "yaml") -> str:
        """What ``submit`` would create, as text (``yaml`` or ``json``), starting nothing.

        Local: the torchrun command and environment of every node. Kubernetes: the manifests.
        """
