"""Following a job: a pod watch from a listed resourceVersion, reconnecting on expiry.

Pod events give the per-node states; the job's own conditions (success, failure policy)
are read when a pod ends, since they change without a pod event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from jupyter_starverse.jobmodel import Job, JobState, NodeStatus

from ._api import ClusterApi, Wire, WireList
from ._status import job_state, latest_per_node

__all__ = ["resuming", "watch_job"]

_SETTLE = 10.0  # seconds to wait for job conditions once every pod has ended
_WATCH_CHUNK = 30  # seconds per watch request; the next one continues from the last resourceVersion


def _all_ended(pods: WireList, nodes: int) -> bool:
    ended = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
    return len(ended) >= nodes and len(ended) == len(pods)


def watch_job(
    api: ClusterApi,
    get: Callable[[str], Job],
    job_id: str,
    *,
    namespace: str,
    selector: str,
    timeout: float | None = None,
) -> Iterator[Job]:
    """The job now, then again on every change of its pods, until it finished or ``timeout``.

    ``get`` reads the job (object + pods). Uses a pod watch from the listed resourceVersion;
    a ``410 Gone`` (expired history) re-lists and continues from there.
    """
    end = None if timeout is None else time.monotonic() + timeout
    job = get(job_id)
    yield job
    if job.state.finished:
        return
    ns, sel = namespace, selector
    with api.errors("watch", f"pods of job {job_id!r}", ns):
        pods_list, rv = api.pods(ns, sel)
    pods = {p["metadata"]["name"]: p for p in pods_list}
    while not job.state.finished:
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return
        chunk = max(1, int(min(_WATCH_CHUNK, left if left is not None else _WATCH_CHUNK)))
        if _all_ended(list(pods.values()), job.spec.nodes):
            chunk = 1  # only the job's conditions are still to come, and they bring no pod event
        elif job.state in (JobState.PREEMPTED, JobState.RESUMING):
            chunk = min(chunk, 2)  # a relaunch waits for the old object to go: it brings no pod event
        with api.errors("watch", f"pods of job {job_id!r}", ns):
            for type_, obj in api.watch_pods(ns, sel, rv, chunk):
                if type_ == "EXPIRED":  # history compacted: re-list, continue from now
                    pods_list, rv = api.pods(ns, sel)
                    pods = {p["metadata"]["name"]: p for p in pods_list}
                    break
                rv = obj["metadata"]["resourceVersion"]
                if type_ == "DELETED":
                    pods.pop(obj["metadata"]["name"], None)
                else:
                    pods[obj["metadata"]["name"]] = obj
                new = _refresh(get, job, list(pods.values()), obj)
                if new != job:
                    job = new
                    yield job
                if job.state.finished:
                    return
        new = get(job_id)  # job-level conditions (failure policy, TTL) change without pod events
        if new != job:
            job = new
            yield job


def _refresh(get: Callable[[str], Job], job: Job, pods: WireList, changed: Wire) -> Job:
    phase = (changed.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed") or not pods:
        # A pod ended: the job's own conditions decide. Its controller sets them a moment
        # after the last pod ends, with no further pod event: poll briefly for them.
        new = get(job.id)
        delay, deadline = 0.05, time.monotonic() + _SETTLE
        waiting = (JobState.PENDING, JobState.RUNNING)  # not a relaunch (preempted, resuming): that is news
        while new.state in waiting and _all_ended(pods, job.spec.nodes) and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            new = get(job.id)
        return new
    nodes = latest_per_node(pods)
    st = job_state({"status": {"startTime": None}}, nodes)
    state, reason = st.state, st.reason
    if job.state is JobState.PREEMPTED:  # the old attempt's pods stopping: only a full read moves on
        state, reason = job.state, job.reason
    elif job.restarts and resuming(state, nodes, job.spec.nodes):
        state, reason = JobState.RESUMING, reason or job.reason
    return Job(
        job.id,
        job.backend,
        job.spec,
        state,
        job.experiment_dir,
        job.created,
        started=job.started or st.started,
        reason=reason,
        nodes=nodes,
        restarts=job.restarts,
    )


def resuming(state: JobState, nodes: tuple[NodeStatus, ...], count: int) -> bool:
    """A relaunched attempt is ``resuming`` until every node runs (it has no pods at first)."""
    if state not in (JobState.PENDING, JobState.RUNNING):
        return False
    return len(nodes) < count or any(n.state is not JobState.RUNNING and not n.state.finished for n in nodes)
