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

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import NotFoundError

from ._checkpoint import find_resume_checkpoint, load_latest, save_checkpoint
from ._dist import Context, agree_stop, barrier, handle_sigterm, init, stop_requested, wrap
from ._env import JobEnv, job_env
from ._metrics import close_metrics, log_metrics

__all__ = [
    "Context",
    "JobEnv",
    "barrier",
    "find_resume_checkpoint",
    "init",
    "job_env",
    "load_latest",
    "log_metrics",
    "mount_path",
    "rank",
    "save_checkpoint",
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
    total: int | None = None, *, model: Any, optimizer: Any = None, checkpoint_every: int | None = None
) -> Iterator[int]:
    """Yield the step numbers still to run, resuming after the latest checkpoint.

    A checkpoint is saved every ``checkpoint_every`` steps (default
    ``STARVERSE_CHECKPOINT_EVERY``), after the last step (so a later run can resume), and
    as soon as any rank got SIGTERM; then the loop ends. ``checkpoint_every=0`` saves only
    on SIGTERM. ``total`` defaults to ``STARVERSE_STEPS`` (else 100).
    """
    env = job_env()
    total = total if total is not None else (env.steps or 100)
    every = checkpoint_every if checkpoint_every is not None else env.checkpoint_every
    handle_sigterm()
    start = load_latest(model=model, optimizer=optimizer)
    last_saved = start - 1
    step = start - 1
    try:
        for step in range(start, total):
            yield step
            if agree_stop():
                save_checkpoint(step, model=model, optimizer=optimizer)
                print(f"stopping after step {step}: checkpoint saved", flush=True)
                return
            if every and (step + 1) % every == 0:
                save_checkpoint(step, model=model, optimizer=optimizer)
                last_saved = step
        if every != 0 and step >= start and last_saved != step:
            save_checkpoint(step, model=model, optimizer=optimizer)
    finally:
        close_metrics()
