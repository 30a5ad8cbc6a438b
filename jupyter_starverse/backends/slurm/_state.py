"""A Slurm job's state as the LaunchBackend contract names it, from slurmctld, accounting and the run folder.

:func:`slurm_job` turns a run folder's ``slurm.json`` (our id, Slurm's id, the spec, the final
state once seen) into a :class:`~jupyter_starverse.jobmodel.Job`: ``scontrol show job`` while
slurmctld remembers the job, then ``sacct``, then the batch script's exit record; a requeue is
``resuming`` (``_requeue``'s restart keeper says why), an attempt whose ranks got SIGTERM is
``preempted``, a pending reason that waiting will not resolve says what to do, and a failure
names its first rank error. A finished state is written back into the record, once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from jupyter_starverse.costs import budget_stop_reason
from jupyter_starverse.experiments import RunPaths, read_json, write_json
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, NodeStatus
from jupyter_starverse.watch import first_rank_error

from .._jobrecords import run_job
from ._commands import SlurmJobInfo, job_state, sacct_job, scontrol_job
from ._requeue import read_restarts

__all__ = ["RECORD", "SUBMIT_GRACE_S", "slurm_job"]

RECORD = "slurm.json"
SUBMIT_GRACE_S = 60.0  # a record without a Slurm id younger than this is a submit in progress

# pending reasons that will not resolve by waiting, with what to do
_STUCK = {
    "PartitionConfig": "the partition cannot run this shape of job: ask for fewer nodes or another partition",
    "PartitionNodeLimit": "more nodes than the partition allows: ask for fewer or map another partition",
    "PartitionTimeLimit": "the time limit is above the partition's: lower STARVERSE_SLURM_TIME",
    "PartitionDown": "the partition is down: ask the cluster's operators",
    "InvalidAccount": "set STARVERSE_SLURM_ACCOUNT to an account you belong to",
    "InvalidQOS": "set STARVERSE_SLURM_QOS to a QOS of your association",
    "QOSMaxNodePerJobLimit": "the QOS allows fewer nodes: ask for fewer or pick another STARVERSE_SLURM_QOS",
    "ReqNodeNotAvail": "some required nodes are down or drained (`sinfo -R` says why)",
}


def _last_words(path: Path) -> str | None:
    """The last error-looking line of a log (the batch shell's or an agent's)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [x.strip() for x in f.read().decode(errors="replace").splitlines() if x.strip()]
    except OSError:
        return None
    errors = [x for x in lines if "rror" in x or "must be set" in x or "missing" in x]
    return errors[-1][:300] if errors else None


def slurm_job(run: RunPaths, record: dict[str, Any], *, backend: str) -> Job:
    """The job of the run folder ``run`` whose ``slurm.json`` is ``record``, as backend ``backend``."""
    spec = JobSpec.from_json(record["spec"])
    created = float(record.get("created") or 0.0)
    cancel = read_json(run.cancel)
    final = record.get("final")
    if isinstance(final, dict):
        return _from_final(run, spec, created, final, backend)
    sid = record.get("slurm_job_id")
    info: SlurmJobInfo | None = None
    if sid:
        info = scontrol_job(str(sid)) or sacct_job(str(sid))
    if info is None:
        state, reason, started, finished, hosts = _unknown(run, sid, created)
        restarts = 0
    else:
        state = job_state(info.state, requeue=info.requeue, finished=info.finished)
        started, hosts, restarts = info.started, info.nodes, info.restarts
        if state is JobState.PENDING and restarts:
            state = JobState.RESUMING  # requeued: waits for nodes, then resumes from the checkpoint
        elif state is JobState.RUNNING and restarts and int(read_restarts(run).get("attempt") or 0) < restarts:
            # requeued, and Slurm counts the new attempt while the old one is still completing or
            # before the new batch script has begun: resuming, not running (no flicker after preempted)
            state = JobState.RESUMING
        stopping = _stopping(run, restarts) if state is JobState.RUNNING else None
        if stopping is not None:  # ranks got SIGTERM: they checkpoint, then the attempt ends
            state = JobState.PREEMPTED
        reason = _reason(run, spec, info, state)
        if stopping is not None:
            reason = stopping if "resuming from" in stopping else f"{stopping}; then the job is requeued"
        finished = info.finished if state.finished else None
        if state in (JobState.PENDING, JobState.RESUMING):
            started = None
    if isinstance(cancel, dict) and (state.finished or (info is None and sid)):
        state, reason = JobState.CANCELLED, str(cancel.get("reason") or "cancelled")
        finished = finished or cancel.get("time")
    nodes = tuple(
        NodeStatus(
            index=i,
            state=state,
            name=hosts[i] if i < len(hosts) else f"node{i}",
            reason=f"requeued {restarts} time(s)" if restarts else None,
            started=started,
            finished=finished,
        )
        for i in range(spec.nodes)
    )
    job = run_job(
        run,
        backend,
        spec,
        state,
        created=created,
        started=started,
        finished=finished,
        reason=reason,
        nodes=nodes,
        restarts=restarts,
    )
    if state.finished and sid:
        record["final"] = job.to_json()
        write_json(run.root / RECORD, record)
    return job


def _from_final(run: RunPaths, spec: JobSpec, created: float, final: dict[str, Any], backend: str) -> Job:
    """The job as its record's ``final`` says (Slurm may have forgotten it long ago)."""
    nodes = tuple(
        NodeStatus(
            index=int(n.get("index", 0)),
            state=JobState(n.get("state", final["state"])),
            name=str(n.get("name", "")),
            reason=n.get("reason"),
            started=n.get("started"),
            finished=n.get("finished"),
        )
        for n in final.get("nodes", [])
    )
    return run_job(
        run,
        backend,
        spec,
        JobState(final["state"]),
        created=created,
        started=final.get("started"),
        finished=final.get("finished"),
        reason=final.get("reason"),
        nodes=nodes,
        restarts=int(final.get("restarts") or 0),
    )


def _unknown(
    run: RunPaths, sid: object, created: float
) -> tuple[JobState, str | None, float | None, float | None, tuple[str, ...]]:
    """State of a job slurmctld no longer knows and accounting does not keep (or not yet submitted)."""
    if not sid:
        if time.time() - created < SUBMIT_GRACE_S:
            return JobState.PENDING, "being submitted", None, None, ()
        return JobState.FAILED, "the submit did not complete (no Slurm job id was recorded)", None, None, ()
    exit_record = read_json(run.root / "slurm-exit.json")
    if isinstance(exit_record, dict) and isinstance(exit_record.get("exit_code"), int):
        code = int(exit_record["exit_code"])
        when = exit_record.get("time")
        finished = float(when) if isinstance(when, (int, float)) else None
        if code == 0:
            return JobState.SUCCEEDED, None, None, finished, ()
        cause = first_rank_error(run) or _last_words(run.logs / "batch.log")
        return (
            JobState.FAILED,
            f"exit code {code}" + (f"; first error: {cause}" if cause else ""),
            None,
            finished,
            (),
        )
    return (
        JobState.FAILED,
        f"Slurm no longer knows job {sid} and keeps no accounting of it; it wrote no exit record",
        None,
        None,
        (),
    )


def _reason(run: RunPaths, spec: JobSpec, info: SlurmJobInfo, state: JobState) -> str | None:
    tries = f" (requeued {info.restarts} time(s))" if info.restarts else ""
    kept = read_restarts(run)  # what the batch script's restart keeper decided (``_requeue``)
    if state is JobState.FAILED and kept.get("final_reason"):
        return str(kept["final_reason"]) + tries
    if state in (JobState.PREEMPTED, JobState.RESUMING):
        said = kept.get("reason") if kept["events"] and kept["events"][-1].get("action") == "resumed" else None
        why = said or f"Slurm state {info.state}" + (f": {info.reason}" if info.reason else "")
        return f"{why}{tries}"
    if state is JobState.PENDING:
        why = info.reason or "queued"
        stuck = _STUCK.get(why.split()[0].rstrip(","))
        return f"waiting in Slurm's queue: {why}{tries}" + (f"; {stuck}" if stuck else "")
    if state is JobState.RUNNING:
        return f"running{tries}" if tries else None
    if state is JobState.SUCCEEDED:
        return budget_stop_reason(run.root) if spec.budget is not None else None
    if state is JobState.CANCELLED:
        return f"cancelled in Slurm ({info.state}){tries}"
    cause = first_rank_error(run) or _last_words(run.logs / "batch.log") or _last_words(run.node_log(0))
    code = f", exit code {info.exit_code}" if info.exit_code is not None else ""
    return f"Slurm state {info.state}{code}{tries}" + (f"; first error: {cause}" if cause else "")


def _stopping(run: RunPaths, attempt: int) -> str | None:
    """Why attempt ``attempt``, still running in Slurm, is ending: a rank stopped on SIGTERM
    (``stops/rankN.json``), the restart keeper decided a requeue, or a drill was sent; else None."""
    kept = read_restarts(run)
    last = kept["events"][-1] if kept["events"] else None
    if isinstance(last, dict) and last.get("attempt") == attempt and last.get("action") == "resumed":
        return str(kept.get("reason") or "preempted")  # the requeue is on its way
    stops = [read_json(f) for f in run.stops.glob("rank*.json")] if run.stops.is_dir() else []
    got = [s for s in stops if isinstance(s, dict)]
    drill = read_json(run.preempt)
    if not got and isinstance(drill, dict) and drill.get("attempt") == attempt:
        return "preempted: the preemption drill sent SIGTERM to every rank (they checkpoint)"
    if not got:
        return None
    first = min(got, key=lambda s: float(s.get("signalled") or s.get("time") or 0))
    where = f"rank {first.get('rank')} (node {first.get('node')})"
    return f"preempted: {where} stopped on SIGTERM after step {first.get('step')}"
