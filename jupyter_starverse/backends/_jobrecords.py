"""What the local and Slurm backends share about a job kept in its run folder: where a planned job's
run folder is, what each of its ranks runs (the command, or the script with the framework's
arguments) and the environment it sees, the resume plan, the answer of a dry run, the
:class:`~jupyter_starverse.jobmodel.Job` a run folder's record ends as, and the listing of those
jobs newest first that skips a half-written record. Each backend keeps and translates its own
record (``status.json`` written by the local supervisor; ``slurm.json`` plus Slurm's state); the
launcher in front of the target (torchrun's worker, Slurm's rank wrapper) stays the backend's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from jupyter_starverse._settings import Settings
from jupyter_starverse.experiments import ExperimentPaths, ResumePlan, RunPaths, plan_resume
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, NodeStatus

from ._torchrun import job_env
from .templates import framework_args

__all__ = ["experiment_resume", "newest_first", "planned_run", "rank_env", "rank_target", "dry_run_job", "run_job"]

_T = TypeVar("_T")


def planned_run(settings: Settings, spec: JobSpec, job_id: str) -> RunPaths:
    """The run folder ``spec`` gets as job ``job_id`` (under its experiment)."""
    return ExperimentPaths.of(settings.experiments, spec.experiment_name).run(job_id)


def experiment_resume(settings: Settings, spec: JobSpec) -> ResumePlan:
    """Checkpoint step, old and new world size of ``spec`` resumed into its experiment."""
    exp = ExperimentPaths.of(settings.experiments, spec.experiment_name)
    return plan_resume(exp.root, new_world_size=spec.world_size, data_parallel=spec.data_parallel)


def rank_target(spec: JobSpec, run: RunPaths) -> list[str]:
    """What a rank runs after its launcher: the command, or the script (the run folder's copy of
    inline code), then the job's arguments and the framework's (``--deepspeed_config`` ...)."""
    extra = framework_args(spec, run_dir=str(run.root))
    if spec.command:
        return [*spec.command, *spec.args, *extra]
    script = str(run.script) if spec.code else str(Path(spec.script or "").expanduser().absolute())
    return [script, *spec.args, *extra]


def rank_env(
    spec: JobSpec,
    settings: Settings,
    job_id: str,
    run: RunPaths,
    *,
    mounts: dict[str, str],
    store_env: dict[str, str],
    resume: ResumePlan | None,
) -> dict[str, str]:
    """The job environment of every rank of ``spec`` as ``job_id`` in ``run`` (store, mounts, resume point)."""
    return job_env(
        spec,
        job_id=job_id,
        run_dir=str(run.root),
        checkpoint_dir=str(run.checkpoints),
        store=store_env.get("STARVERSE_STORE", settings.store),
        hf_cache=store_env.get("HF_HUB_CACHE", f"{settings.store}/hub"),
        mounts=mounts,
        resume_from=str(resume.checkpoint.path) if resume and resume.checkpoint else None,
    )


def dry_run_job(backend: str, settings: Settings, spec: JobSpec) -> Job:
    """What ``submit(spec, dry_run=True)`` answers once every check passed: a pending job that never starts."""
    run = planned_run(settings, spec, "dry-run")
    return Job("dry-run", backend, spec, JobState.PENDING, str(run.root), time.time())


def run_job(
    run: RunPaths,
    backend: str,
    spec: JobSpec,
    state: JobState,
    *,
    created: float,
    started: float | None,
    finished: float | None,
    reason: str | None,
    nodes: tuple[NodeStatus, ...],
    restarts: int,
) -> Job:
    """The job whose run folder is ``run`` (its id is the folder's name), as its record says."""
    return Job(
        id=run.job_id,
        backend=backend,
        spec=spec,
        state=state,
        experiment_dir=str(run.root),
        created=created,
        started=started,
        finished=finished,
        reason=reason,
        nodes=nodes,
        restarts=restarts,
    )


def newest_first(
    records: Iterable[_T], read: Callable[[_T], Job | None], *, skip: tuple[type[Exception], ...]
) -> list[Job]:
    """The job of every record, newest first; a record ``read`` answers None for, or fails on with
    one of ``skip`` (half-written, malformed, another backend's), is not a job."""
    jobs = []
    for record in records:
        try:
            job = read(record)
        except skip:
            continue
        if job is not None:
            jobs.append(job)
    return sorted(jobs, key=lambda j: j.created, reverse=True)
