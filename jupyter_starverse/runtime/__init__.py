"""Imported inside training scripts: ``from jupyter_starverse import runtime as sv``.

Small on purpose. Rank, world and device for the current mode; ``log_metrics``;
checkpoints any world size can resume from; paths of mounted catalog entries; and a loop
helper that resumes, checkpoints every ``STARVERSE_CHECKPOINT_EVERY`` steps and, on
SIGTERM (cancel, budget cap, spot preemption), checkpoints before it exits::

    ctx = sv.init()
    model = sv.wrap(Net())
    opt = torch.optim.AdamW(model.parameters())
    for step in sv.steps(model=model, optimizer=opt):
        loss = ...
        sv.log_metrics(step, loss=loss)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import NotFoundError
from jupyter_starverse.experiments import BatchPlan

from ._batch import keep_global_batch
from ._budget import MARGIN_S, BudgetGuard, process_start
from ._checkpoint import find_resume_checkpoint, load_latest, save_checkpoint
from ._dist import Context, agree_stop_why, barrier, handle_sigterm, init, signalled_at, stop_requested, wrap
from ._env import JobEnv, job_env
from ._metrics import close_metrics, log_metrics
from ._reference import CURVES, CurveCheck, Departure, ReferenceCurve, ReferenceWatch, reference_series
from ._throughput import Throughput, train_flops_per_token

__all__ = [
    "CURVES",
    "Context",
    "CurveCheck",
    "Departure",
    "ReferenceCurve",
    "ReferenceWatch",
    "reference_series",
    "BatchPlan",
    "JobEnv",
    "barrier",
    "find_resume_checkpoint",
    "init",
    "job_env",
    "keep_global_batch",
    "load_latest",
    "log_metrics",
    "mount_path",
    "rank",
    "save_checkpoint",
    "Throughput",
    "train_flops_per_token",
    "steps",
    "stop_requested",
    "world_size",
    "wrap",
]


def rank() -> int:
    """Global rank of this process (0 outside a job)."""
    return job_env().rank


def world_size() -> int:
    """Number of ranks of the job (1 outside a job)."""
    return job_env().world_size


def mount_path(name: str) -> Path:
    """Path of the catalog entry ``name`` mounted for this job (``--mount NAME``)."""
    env = job_env()
    if name in env.mounts:
        return Path(env.mounts[name])
    if env.job_id is None:
        from jupyter_starverse._settings import Settings
        from jupyter_starverse.catalog import Catalog

        return Catalog(Settings.from_env()).mount(name)
    raise NotFoundError(
        f"{name!r} is not mounted in this job (mounted: {', '.join(env.mounts) or 'nothing'})",
        hint=f"launch with --mount {name}",
    )


def steps(
    total: int | None = None,
    *,
    model: Any,
    optimizer: Any = None,
    checkpoint_every: int | None = None,
    batch: BatchPlan | None = None,
) -> Iterator[int]:
    """Yield the step numbers still to run, resuming after the latest checkpoint.

    A checkpoint is saved every ``checkpoint_every`` steps (default
    ``STARVERSE_CHECKPOINT_EVERY``), after the last step (so a later run can resume), and
    as soon as any rank got SIGTERM; then the loop ends. ``checkpoint_every=0`` saves only
    on SIGTERM. ``total`` defaults to ``STARVERSE_STEPS`` (else 100). When the backend
    exported a budget cap (``STARVERSE_BUDGET``, Kubernetes), the loop also checkpoints and
    stops before the cap is reached and records why in ``cost.json`` (see ``_budget``).

    A stop on SIGTERM is recorded in ``stops/rankN.json`` (when this rank got the signal, the
    step, the checkpoint) for the launcher to tell a preemption from a finished run. When the
    launcher asks for it (``STARVERSE_PREEMPT_EXIT``, the local backend), the process then exits
    with that code instead of ending the loop, so nothing after the loop runs on a preempted
    attempt and the job is relaunched and resumes from this checkpoint.

    ``batch`` (from :func:`keep_global_batch`) is recorded in every checkpoint, so a resume onto
    another world size keeps the global batch.
    """
    env = job_env()
    total = total if total is not None else (env.steps or 100)
    every = checkpoint_every if checkpoint_every is not None else env.checkpoint_every
    handle_sigterm()
    guard = None
    if env.rank == 0:  # a cap exported by a backend with no supervisor beside the job (Kubernetes)
        guard = BudgetGuard.from_env(os.environ, run_dir=env.run_dir, job_id=env.job_id, now=process_start())
    start = load_latest(model=model, optimizer=optimizer)
    extra: dict[str, Any] = {"batch": batch.to_json()} if batch is not None else {}
    last_saved = start - 1
    step = start - 1
    reason: str | None = None
    slowest = 0.0  # longest step so far: the stop takes effect about one step after the decision
    try:
        for step in range(start, total):
            began = time.monotonic()
            yield step
            slowest = max(slowest, time.monotonic() - began)
            if guard is not None and reason is None:
                reason = guard.check(time.time(), lookahead=MARGIN_S + 2 * slowest)
            signalled, capped = agree_stop_why(also=reason is not None)
            if signalled or capped:
                save_checkpoint(step, model=model, optimizer=optimizer, **extra)
                why = f" ({reason})" if reason else ""
                print(f"stopping after step {step}: checkpoint saved{why}", flush=True)
                if not capped:  # a SIGTERM, not the job's own cap: possibly a preemption
                    _record_stop(env, step)
                    if env.preempt_exit is not None:
                        raise SystemExit(env.preempt_exit)
                return
            if every and (step + 1) % every == 0:
                save_checkpoint(step, model=model, optimizer=optimizer, **extra)
                last_saved = step
        if every != 0 and step >= start and last_saved != step:
            save_checkpoint(step, model=model, optimizer=optimizer, **extra)
    finally:
        if guard is not None:
            guard.record(reason=reason)
        close_metrics()


def _record_stop(env: JobEnv, step: int) -> None:
    """``stops/rankN.json``: this rank stopped on a SIGTERM after ``step`` and checkpointed it."""
    if env.run_dir is None:
        return
    from jupyter_starverse.experiments import write_json

    record = {
        "rank": env.rank,
        "node": env.node,
        "attempt": env.attempt,
        "pid": os.getpid(),
        "signalled": signalled_at(),  # None: another rank got the SIGTERM, this one followed
        "step": step,
        "checkpoint_step": step,
        "time": time.time(),
    }
    try:
        write_json(env.run_dir / "stops" / f"rank{env.rank}.json", record)
    except OSError as e:  # the record helps the launcher; it must never break the stop
        print(f"could not record the stop: {e}", flush=True)
