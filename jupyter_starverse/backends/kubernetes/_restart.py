"""Whole-group restarts of a Kubernetes job, kept by the backend on every kind.

Any end of a node ends the attempt: the pod failure policy (``_manifests._indexed_job_spec``)
fails the Job at once, its other pods get SIGTERM and checkpoint. :func:`attempt_end` names what
ended it, first in time, from the Job's ``Failed`` condition (the controller writes the rule that
matched first) and, where a kind hides its Jobs, from the pods:

- ``DisruptionTarget`` (preemption, eviction, node drain) or exit 143 (SIGTERM, checkpoint):
  ``preempted``, relaunched under the preemption budget;
- exit 2 (a usage error): ``usage``, never relaunched;
- exit ``BUDGET_EXIT`` (a node preempted past the budget, refused by the pod command): ``preempted``;
- any other exit code or failure: ``failed``, relaunched up to ``JobSpec.max_restarts``.

The backend then deletes the object (foreground: the pods stop and checkpoint first) and,
once it is gone, creates attempt ``N + 1`` under the same name; the ranks resume from the run's
newest checkpoint. Pure functions here; the calls are in ``_backend``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.backends._restarts import PREEMPT_EXIT, USAGE_EXIT, RestartBudget

from ._checks import BUDGET_EXIT
from ._inputs import ANNOTATION_ATTEMPT, ANNOTATION_PREEMPTIONS
from ._status import node_index, parse_time

__all__ = [
    "IN_CLUSTER",
    "AttemptEnd",
    "attempt_end",
    "budget_of",
    "current_pods",
    "index_restarts",
    "pod_restarts",
    "recovers_in_cluster",
    "start_restarts",
    "stopping_node",
]

#: kinds whose controller recreates a failed or preempted pod itself (no client needed)
IN_CLUSTER = ("Job", "JobSet", "PyTorchJob", "TrainJob")


def recovers_in_cluster(obj: Mapping[str, Any]) -> bool:
    """Whether the cluster restarts this object's pods (the backend then only watches). A TrainJob
    does on its own namespaced TrainingRuntime (what ``make_trainjob`` renders); one on a shared
    ClusterTrainingRuntime (submitted by an older version) is still relaunched by the backend."""
    if obj.get("kind") == "TrainJob":
        return ((obj.get("spec") or {}).get("runtimeRef") or {}).get("kind") == "TrainingRuntime"
    return obj.get("kind") in IN_CLUSTER


_EXIT = re.compile(r"exit code (\d+)")
_POD = re.compile(r"\bpod [\w.-]+/([\w.-]+)", re.IGNORECASE)


@dataclass(frozen=True)
class AttemptEnd:
    """Why an attempt ended: ``kind`` (preempted, failed, usage), a readable cause, when."""

    kind: str
    cause: str
    time: float | None = None


def budget_of(obj: Mapping[str, Any]) -> RestartBudget:
    """The relaunches used before this object, from its annotations."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    attempt = int(annotations.get(ANNOTATION_ATTEMPT) or 0)
    preemptions = min(attempt, int(annotations.get(ANNOTATION_PREEMPTIONS) or 0))
    return RestartBudget(preemptions=preemptions, failures=attempt - preemptions)


def _kind_of_code(code: int | None) -> str:
    if code in (PREEMPT_EXIT, BUDGET_EXIT):
        return "preempted"
    if code == USAGE_EXIT:
        return "usage"
    return "failed"


def _node_of(pods: Iterable[Mapping[str, Any]], name: str | None) -> str:
    for pod in pods:
        if name and (pod.get("metadata") or {}).get("name") == name:
            return f"node {node_index(pod)} ({name})"
    return f"pod {name}" if name else "a pod"


def _cause(kind: str, where: str, code: int | None, detail: str, message: str = "") -> str:
    if code == BUDGET_EXIT:
        return f"{where} was preempted more often than the preemption budget allows (exit {BUDGET_EXIT})"
    if kind == "preempted" and code == PREEMPT_EXIT and "rendezvous" in message:
        return f"{where} lost the rendezvous store of node 0 and stopped, to re-form with it (exit {PREEMPT_EXIT})"
    if kind == "preempted" and code == PREEMPT_EXIT:
        return f"{where} got SIGTERM and stopped after its checkpoint (exit {PREEMPT_EXIT})"
    if kind == "preempted":
        return f"{where} was disrupted ({detail})"
    if code is not None:
        return f"{where} failed with exit code {code}" + (" (a usage error)" if kind == "usage" else "")
    return f"{where}: {detail}"


def _disrupted(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return dict(cond)
    return None


def _terminated(pod: Mapping[str, Any]) -> tuple[int | None, float | None]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return term.get("exitCode"), parse_time(term.get("finishedAt"))
    return None, None


def _termination_message(pod: Mapping[str, Any]) -> str:
    """What the pod command wrote to ``/dev/termination-log`` (the kubelet's copy in the status)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return str(term.get("message") or "")
    return ""


def attempt_end(jobs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> AttemptEnd | None:
    """What ended a failed attempt (``None``: nothing says it failed).

    ``jobs``: the attempt's batch Jobs (the Indexed Job, or a JobSet's child Jobs); their
    ``Failed`` condition names the first pod the controller saw end. ``pods``: its pods, read when
    no Job says why (Kubeflow kinds), the earliest ended pod first.
    """
    pods = list(pods)
    failed = []
    for job in jobs:
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Failed" and cond.get("status") == "True":
                failed.append(cond)
    failed.sort(key=lambda c: str(c.get("lastTransitionTime") or ""))
    for cond in failed:
        reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
        when = parse_time(cond.get("lastTransitionTime"))
        named = _POD.search(message)
        where = _node_of(pods, named.group(1) if named else None)
        if reason == "PodFailurePolicy" and "DisruptionTarget" in message:
            return AttemptEnd("preempted", _cause("preempted", where, None, "DisruptionTarget"), when)
        code_match = _EXIT.search(message)
        code = int(code_match.group(1)) if code_match else None
        if reason == "PodFailurePolicy" and code is not None:
            kind = _kind_of_code(code)
            return AttemptEnd(kind, _cause(kind, where, code, message), when)
        # a failed index (another exit code): the pod that failed first names the cause
        break
    ended = []
    for pod in pods:
        code, when = _terminated(pod)
        disrupted = _disrupted(pod)
        if disrupted is not None or (code is not None and code != 0):
            ended.append((when or float("inf"), code, disrupted, pod))
    ended.sort(key=lambda e: (e[0], e[1] == PREEMPT_EXIT))  # same second: the real failure first
    if ended:
        when, code, disrupted, pod = ended[0]
        where = _node_of(pods, (pod.get("metadata") or {}).get("name"))
        if disrupted is not None:
            detail = f"{disrupted.get('reason') or 'DisruptionTarget'}: {disrupted.get('message') or ''}".rstrip(": ")
            return AttemptEnd("preempted", _cause("preempted", where, None, detail), when)
        kind = _kind_of_code(code)
        return AttemptEnd(kind, _cause(kind, where, code, "", _termination_message(pod)), when)
    if failed:
        cond = failed[0]
        detail = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or ''}".rstrip(": ")
        return AttemptEnd("failed", detail, parse_time(cond.get("lastTransitionTime")))
    return None


def stopping_node(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """A pod of a job not yet judged that got SIGTERM (deleted, disrupted) or stopped after one
    (exit 143), as ``node N ...``; else None. The job is preempted from that moment on."""
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if status.get("phase") == "Failed" and (_disrupted(pod) or _terminated(pod)[0] == PREEMPT_EXIT):
            return f"node {node_index(pod)} stopped after its checkpoint (pod {meta.get('name')})"
        if status.get("phase") not in ("Pending", "Running"):
            continue
        disrupted = _disrupted(pod)
        if disrupted is not None:
            return f"node {node_index(pod)} was disrupted ({disrupted.get('reason') or 'DisruptionTarget'})"
        if meta.get("deletionTimestamp"):
            return f"node {node_index(pod)} got SIGTERM (pod {meta.get('name')} deleted)"
    return None


def _created(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


def current_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The newest pod of every node (a recreated pod replaces the one that ended)."""
    best: dict[int, Mapping[str, Any]] = {}
    for pod in sorted(pods, key=_created):
        best[node_index(pod)] = pod
    return [best[i] for i in sorted(best)]


#: the Job controller's per-index counts on every pod it creates (k8s.io/api batch/v1)
_INDEX_COUNTS = ("batch.kubernetes.io/job-index-failure-count", "batch.kubernetes.io/job-index-ignored-failure-count")


def index_restarts(pods: Iterable[Mapping[str, Any]]) -> int:
    """Pods the Job controller replaced, from the counts it writes on each node's newest pod
    (``job-index-failure-count`` + ``job-index-ignored-failure-count``): still right once the
    replaced pods themselves are gone (an evicted pod is deleted)."""
    total = 0
    for pod in current_pods(pods):
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        total += sum(int(annotations.get(key) or 0) for key in _INDEX_COUNTS)
    return total


def pod_restarts(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, AttemptEnd]]:
    """``(pod name, why it ended)`` of every pod the cluster replaced, oldest first: a restart each,
    ``preempted`` (``DisruptionTarget``, exit 143) or ``failed`` (any other exit code)."""
    pods = list(pods)
    newest = {id(p) for p in current_pods(pods)}
    out = []
    for pod in sorted(pods, key=_created):
        if id(pod) in newest or (pod.get("status") or {}).get("phase") != "Failed":
            continue
        end = attempt_end([], [pod])
        if end is not None:
            out.append((str((pod.get("metadata") or {}).get("name")), end))
    return out


def start_restarts(starts: Path) -> int:
    """Pods a PyTorchJob's operator recreated, from the starts each pod command counted in the
    run folder (``_checks.BOOT``: one file per pod name; a count of 3 is 2 restarts): right once the
    replaced pods are gone (the operator deletes them)."""
    total = 0
    for path in starts.iterdir() if starts.is_dir() else ():
        if path.suffix == ".tmp":
            continue
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        total += max(0, int(text) - 1) if text.isdigit() else 0
    return total
