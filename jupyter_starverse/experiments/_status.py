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
from jupyter_starverse.errors import BadInputError

from ._layout import RunPaths, read_json, trusted_record, write_json

__all__ = ["NodeInterval", "NodeRecord", "RunEvent", "RunStatus", "node_intervals", "read_status", "write_status"]

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
class RunEvent:
    """A preemption, a lost node or process, or a failure, and what it cost.

    ``kind``: ``preempted`` (a SIGTERM nobody asked for), ``lost`` (a process or node killed, or
    the supervisor gone), ``failed`` (a rank's error or exit code). ``cause`` names the first
    event in time; ``steps_lost`` / ``money_lost`` is the work done since the last checkpoint that
    a resume redoes; ``action`` is ``resumed`` (relaunched as attempt ``attempt + 1``) or ``final``.
    """

    attempt: int
    time: float
    kind: str
    cause: str
    checkpoint_step: int | None = None
    last_step: int | None = None
    steps_lost: int | None = None
    money_lost: str | None = None
    currency: str | None = None
    action: str = "final"

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "time": self.time,
            "kind": self.kind,
            "cause": self.cause,
            "checkpoint_step": self.checkpoint_step,
            "last_step": self.last_step,
            "steps_lost": self.steps_lost,
            "money_lost": self.money_lost,
            "currency": self.currency,
            "action": self.action,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunEvent:
        return cls(
            attempt=int(data.get("attempt") or 0),
            time=float(data.get("time") or 0.0),
            kind=str(data.get("kind") or "failed"),
            cause=str(data.get("cause") or ""),
            checkpoint_step=data.get("checkpoint_step"),
            last_step=data.get("last_step"),
            steps_lost=data.get("steps_lost"),
            money_lost=data.get("money_lost"),
            currency=data.get("currency"),
            action=str(data.get("action") or "final"),
        )

    def lost_text(self) -> str:
        """``2 steps and 0.03 CNY lost since the checkpoint at step 19`` (what a resume redoes)."""
        parts = []
        if self.steps_lost is not None:
            parts.append(f"{self.steps_lost} step{'s' if self.steps_lost != 1 else ''}")
        if self.money_lost is not None:
            parts.append(f"{self.money_lost} {self.currency or ''}".rstrip())
        since = f"the checkpoint at step {self.checkpoint_step}" if self.checkpoint_step is not None else "the start"
        return (" and ".join(parts) or "nothing") + f" lost since {since}"


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
    attempt: int = 0  # which launch of the whole job runs now (0: the first)
    restarts: int = 0  # relaunches of the whole job so far (== attempt)
    preemptions: int = 0  # relaunches after a preemption or a lost process (the preemption budget)
    events: tuple[RunEvent, ...] = ()

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
            "attempt": self.attempt,
            "restarts": self.restarts,
            "preemptions": self.preemptions,
            "events": [e.to_json() for e in self.events],
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
            attempt=int(data.get("attempt") or 0),
            restarts=int(data.get("restarts") or 0),
            preemptions=int(data.get("preemptions") or 0),
            events=tuple(RunEvent.from_json(e) for e in data.get("events") or [] if isinstance(e, dict)),
        )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_status(run_dir: Path | RunPaths) -> RunStatus | None:
    """The run's recorded status, or ``None`` when no status was written yet.

    A ``status.json`` written by another uid than the run folder's owner (a forged record in a
    group-shared folder) is ignored with a warning: ``None``. One that is not a status raises
    :class:`~jupyter_starverse.errors.BadInputError` naming the file.
    """
    paths = run_dir if isinstance(run_dir, RunPaths) else RunPaths(Path(run_dir))
    if not trusted_record(paths.status):
        return None
    try:
        data = read_json(paths.status)
        return RunStatus.from_json(data) if data else None
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise BadInputError(
            f"{paths.status} is not a run status ({type(e).__name__}: {str(e)[:200]})",
            field="status",
            hint="the run folder is damaged; its owner can remove it (`rm -r` the folder)",
        ) from None


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
