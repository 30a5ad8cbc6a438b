"""The contract every launch backend fulfils, and the records it returns."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ._spec import JobSpec

__all__ = ["JobState", "NodeStatus", "Job", "LogLine", "LaunchBackend"]


class JobState(str, enum.Enum):
    """Life cycle of a job (and of each node of it)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


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

    @abstractmethod
    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Block until the job finished (or ``timeout`` seconds passed) and return it."""

    @abstractmethod
    def cancel(self, job_id: str) -> Job:
        """Stop every process of the job; idempotent on finished jobs."""

    @abstractmethod
    def render(self, spec: JobSpec, *, output: str = "yaml") -> str:
        """What ``submit`` would create, as text (``yaml`` or ``json``), starting nothing.

        Local: the torchrun command and environment of every node. Kubernetes: the manifests.
        """
