"""Checkpoints through ``torch.distributed.checkpoint`` (DCP): any world size can load them.

Every rank writes its shard into ``<run>/checkpoints/.step-N.tmp``; after all finished,
rank 0 adds ``meta.json``, renames the folder to ``step-N`` and records it in the run's own
checkpoint record (``checkpoints/index.json``), so a half-written checkpoint is never picked
up. Older checkpoints beyond ``keep`` are removed.

Loading unpickles the DCP ``.metadata``, so only checkpoints this user's runs recorded are
loaded (see ``jupyter_starverse.experiments._checkpoints``): a folder another user planted
in a shared experiments folder is skipped, and named in the job log.
"""

from __future__ import annotations

import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from jupyter_starverse.experiments import (
    Checkpoint,
    IgnoredCheckpoint,
    checkpoint_name,
    latest_checkpoint,
    open_trusted_checkpoint,
    record_checkpoint,
    scan_checkpoints,
    verify_checkpoint,
    write_json,
)

from ._dist import barrier, init
from ._env import job_env

__all__ = ["find_resume_checkpoint", "load_latest", "save_checkpoint"]


def _distributed() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _state(model: Any, optimizer: Any) -> tuple[dict[str, Any], Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    optims = [] if optimizer is None else [optimizer]
    msd, osd = get_state_dict(model, optims)
    state: dict[str, Any] = {"model": msd}
    if optimizer is not None:
        state["optim"] = osd
    return state, optims


def save_checkpoint(step: int, *, model: Any, optimizer: Any = None, keep: int = 2, **extra: Any) -> Path:
    """Save model (and optimizer) after ``step``; collective: call it on every rank."""
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    env = job_env()
    ctx = init()
    root = env.checkpoint_dir or Path("checkpoints")
    final = root / checkpoint_name(step)
    tmp = root / f".{final.name}.tmp"
    if ctx.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
    barrier()
    state, _ = _state(model, optimizer)
    with warnings.catch_warnings():
        # outside a process group DCP warns that it saves in a single process: that is the intent
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp_save(state, checkpoint_id=str(tmp), no_dist=not _distributed())
    barrier()
    if ctx.rank == 0:
        now = time.time()
        meta = {"step": int(step), "world_size": ctx.world_size, "time": now, "job_id": env.job_id, **extra}
        write_json(tmp / "meta.json", meta)
        shutil.rmtree(final, ignore_errors=True)
        tmp.replace(final)
        dropped = record_checkpoint(
            final, step=int(step), world_size=ctx.world_size, time=now, job_id=env.job_id, keep=max(keep, 0)
        )
        for old in dropped:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def find_resume_checkpoint() -> Checkpoint | None:
    """This run's newest checkpoint (after a worker or node restart), else the one to resume from.

    Only checkpoints this user's runs recorded count; ``STARVERSE_RESUME_FROM`` naming any
    other folder raises ``PermissionDeniedError`` (and ``NotFoundError`` when it is gone).
    """
    env = job_env()
    if env.checkpoint_dir is not None:
        own = latest_checkpoint(env.checkpoint_dir.parent) if env.checkpoint_dir.is_dir() else None
        if own is not None:
            return own
    if env.resume_from is not None:
        return verify_checkpoint(env.resume_from)
    return None


def _ignored_elsewhere(chosen: Checkpoint) -> list[IgnoredCheckpoint]:
    """Folders of this run's experiment that a resume skipped as untrusted (for the job log)."""
    env = job_env()
    if env.run_dir is None or not (env.run_dir.parent.parent / "runs").is_dir():
        return []
    return [i for i in scan_checkpoints(env.run_dir.parent.parent).ignored if i.path.parent != chosen.path.parent]


def load_latest(*, model: Any, optimizer: Any = None) -> int:
    """Load the newest checkpoint into ``model`` / ``optimizer``; return the next step to run (0 if none)."""
    from torch.distributed.checkpoint.state_dict import set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    found = find_resume_checkpoint()
    if found is None:
        return 0
    init()
    if job_env().rank == 0 and found.path.parent != (job_env().checkpoint_dir or Path("checkpoints")):
        for skipped in _ignored_elsewhere(found):
            print(f"resume: ignored checkpoint {skipped.path}: {skipped.reason}", flush=True)
    state, optims = _state(model, optimizer)
    # checked again right before DCP unpickles its .metadata, and read through the checked folder
    with open_trusted_checkpoint(found.path) as (ckpt, through), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp_load(state, checkpoint_id=str(through), no_dist=not _distributed())
    set_state_dict(model, optims, model_state_dict=state["model"], optim_state_dict=state.get("optim", {}))
    print(f"resumed from {ckpt.path.name} (step {ckpt.step}, written by world size {ckpt.world_size})", flush=True)
    return ckpt.step + 1
