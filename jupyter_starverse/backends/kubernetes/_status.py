"""Job and pod states as our records: :class:`JobState` and :class:`NodeStatus` from the cluster.

Pure functions over the wire form of objects (what the API returns), so they work the same
for ``V1Pod`` models (serialised once) and for custom resources.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_starverse.jobmodel import JobState, NodeStatus

__all__ = ["WAITING_PROBLEMS", "ClusterJobState", "job_state", "node_index", "node_status", "parse_time"]

#: Container waiting reasons that mean "stuck", surfaced as the node's reason.
WAITING_PROBLEMS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
)


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp (or datetime) as seconds since the epoch."""
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    try:
        return float(calendar.timegm(time.strptime(str(value)[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def node_index(pod: Mapping[str, Any]) -> int:
    """Which node of the job a pod is: its completion index (Job, JobSet) or replica index."""
    meta = pod.get("metadata") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    for key in ("batch.kubernetes.io/job-completion-index",):
        if key in annotations:
            return int(annotations[key])
    if "training.kubeflow.org/replica-index" in labels:  # PyTorchJob: Master 0, Worker i -> i + 1
        index = int(labels["training.kubeflow.org/replica-index"])
        worker = str(labels.get("training.kubeflow.org/replica-type", "")).lower() == "worker"
        return index + int(worker)
    return 0


def node_status(pod: Mapping[str, Any]) -> NodeStatus:
    """One pod as a node: phase, exit code, and the reason it is stuck or failed."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    state = {"Running": JobState.RUNNING, "Succeeded": JobState.SUCCEEDED, "Failed": JobState.FAILED}.get(
        phase, JobState.PENDING
    )
    reason: str | None = None
    exit_code: int | None = None
    finished: float | None = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason"):
            reason = f"{cond['reason']}: {cond.get('message', '')}".rstrip(": ")
    for cs in status.get("containerStatuses") or []:
        st = cs.get("state") or {}
        if "waiting" in st and (st["waiting"] or {}).get("reason") in WAITING_PROBLEMS:
            waiting = st["waiting"]
            reason = f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
        if st.get("terminated"):
            term = st["terminated"]
            exit_code = term.get("exitCode")
            finished = parse_time(term.get("finishedAt"))
            if exit_code:
                reason = f"{term.get('reason') or 'Error'}: exit code {exit_code}"
    if phase == "Failed" and reason is None:
        reason = status.get("reason") or status.get("message") or "Failed"
    return NodeStatus(
        index=node_index(pod),
        state=state,
        name=meta.get("name", ""),
        exit_code=exit_code,
        reason=reason,
        started=parse_time(status.get("startTime")),
        finished=finished,
    )


def latest_per_node(pods: Iterable[Mapping[str, Any]]) -> tuple[NodeStatus, ...]:
    """One status per node index: the newest pod of each (retries replace older ones)."""
    best: dict[int, tuple[str, NodeStatus]] = {}
    for pod in pods:
        node = node_status(pod)
        created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        if node.index not in best or created >= best[node.index][0]:
            best[node.index] = (created, node)
    return tuple(best[i][1] for i in sorted(best))


@dataclass(frozen=True)
class ClusterJobState:
    """The job-level view: state, why, and when."""

    state: JobState
    reason: str | None
    started: float | None
    finished: float | None


_DONE = {
    "Complete": JobState.SUCCEEDED,
    "Completed": JobState.SUCCEEDED,
    "Succeeded": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
}


def job_state(obj: Mapping[str, Any], nodes: tuple[NodeStatus, ...]) -> ClusterJobState:
    """State of a Job / JobSet / TrainJob / PyTorchJob from its conditions and its pods."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    started = parse_time(status.get("startTime")) or min((n.started for n in nodes if n.started), default=None)
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in _DONE:
            state = _DONE[cond["type"]]
            reason = None
            if state is JobState.FAILED:
                failed = next((n for n in nodes if n.state is JobState.FAILED and n.reason), None)
                detail = f" (node {failed.index}: {failed.reason})" if failed else ""
                reason = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or ''}".rstrip(": ") + detail
            finished = parse_time(status.get("completionTime")) or parse_time(cond.get("lastTransitionTime"))
            return ClusterJobState(state, reason, started, finished)
    if spec.get("suspend") or (spec.get("runPolicy") or {}).get("suspend"):
        return ClusterJobState(JobState.PENDING, "suspended (waiting for admission, e.g. by Kueue)", started, None)
    stuck = next((n for n in nodes if n.state is JobState.PENDING and n.reason), None)
    if stuck is not None:
        return ClusterJobState(JobState.PENDING, f"node {stuck.index}: {stuck.reason}", started, None)
    if nodes and any(n.state is not JobState.PENDING for n in nodes):  # includes "ended, not yet judged"
        return ClusterJobState(JobState.RUNNING, None, started, None)
    return ClusterJobState(JobState.PENDING, None, started, None)
