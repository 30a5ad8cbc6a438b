"""``status.json``: the state of a run, its nodes and their run intervals.

Written by the run's supervisor (and by ``submit`` before it starts); read by anyone.
States are the strings of :class:`jupyter_starverse.jobmodel.JobState`.

The experiments folder may be shared by several hosts: every pid comes with its
:class:`~jupyter_starverse._procs.ProcessRecord` (host, boot id, start time), and the supervisor
refreshes ``heartbeat`` every ``heartbeat_every`` seconds, the only sign of life another host can
see. Files without these fields (older versions) read as before: ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jupyter_starverse._procs import ProcessRecord

from ._layout import RunPaths, read_json, write_json

__all__ = ["NodeInterval", "NodeRecord", "RunStatus", "node_intervals", "read_status", "write_status"]

FINISHED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class NodeRecord:
    """One node (torchrun agent) of a run; ``launches`` holds ``(start, end)`` per launch."""

    index: int
    state: str = "pending"
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    started: float | None = None
    finished: float | None = None
    launches: tuple[tuple[float, float | None], ...] = ()
    process: ProcessRecord | None = None  # the agent's pid with its host and start time

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "process": self.process.to_json() if self.process else None,
            "state": self.state,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "started": self.started,
            "finished": self.finished,
            "launches": [list(x) for x in self.launches],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeRecord:
        return cls(
            index=int(data["index"]),
            state=str(data.get("state", "pending")),
            pid=data.get("pid"),
            exit_code=data.get("exit_code"),
            reason=data.get("reason"),
            started=data.get("started"),
            finished=data.get("finished"),
            launches=tuple((float(a), None if b is None else float(b)) for a, b in data.get("launches", [])),
            process=ProcessRecord.from_json(data.get("process")),
        )


@dataclass(frozen=True)
class RunStatus:
    """The whole run: state, reason, supervisor and nodes."""

    job_id: str
    state: str = "pending"
    created: float = 0.0
    started: float | None = None
    finished: float | None = None
    reason: str | None = None
    supervisor_pid: int | None = None
    port: int | None = None
    nodes: tuple[NodeRecord, ...] = field(default_factory=tuple)
    cost: str | None = None
    supervisor: ProcessRecord | None = None  # supervisor_pid with its host, boot id and start time
    heartbeat: float | None = None  # when the supervisor last said it lives (time.time() on its host)
    heartbeat_every: float | None = None  # seconds between heartbeats

    @property
    def finished_state(self) -> bool:
        return self.state in FINISHED

    def with_node(self, node: NodeRecord) -> RunStatus:
        nodes = tuple(node if n.index == node.index else n for n in self.nodes)
        return replace(self, nodes=nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "reason": self.reason,
            "supervisor_pid": self.supervisor_pid,
            "port": self.port,
            "nodes": [n.to_json() for n in self.nodes],
            "cost": self.cost,
            "supervisor": self.supervisor.to_json() if self.supervisor else None,
            "heartbeat": self.heartbeat,
            "heartbeat_every": self.heartbeat_every,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunStatus:
        return cls(
            job_id=str(data["job_id"]),
            state=str(data.get("state", "pending")),
            created=float(data.get("created") or 0.0),
            started=data.get("started"),
            finished=data.get("finished"),
            reason=data.get("reason"),
            supervisor_pid=data.get("supervisor_pid"),
            port=data.get("port"),
            nodes=tuple(NodeRecord.from_json(n) for n in data.get("nodes", [])),
            cost=data.get("cost"),
            supervisor=ProcessRecord.from_json(data.get("supervisor")),
            heartbeat=_number(data.get("heartbeat")),
            heartbeat_every=_number(data.get("heartbeat_every")),
        )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_status(run_dir: Path | RunPaths) -> RunStatus | None:
    """The run's recorded status, or ``None`` when no status was written yet."""
    paths = run_dir if isinstance(run_dir, RunPaths) else RunPaths(Path(run_dir))
    data = read_json(paths.status)
    return RunStatus.from_json(data) if data else None


def write_status(run_dir: Path | RunPaths, status: RunStatus) -> None:
    """Replace ``status.json`` atomically."""
    paths = run_dir if isinstance(run_dir, RunPaths) else RunPaths(Path(run_dir))
    write_json(paths.status, status.to_json())


@dataclass(frozen=True)
class NodeInterval:
    """A span during which one node ran (``end`` None: still running). Input of the cost meter."""

    node: int
    start: float
    end: float | None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "start": self.start, "end": self.end}


def node_intervals(status: RunStatus) -> list[NodeInterval]:
    """Every launch of every node, for computing what the run cost so far."""
    return [NodeInterval(n.index, a, b) for n in status.nodes for a, b in n.launches]
