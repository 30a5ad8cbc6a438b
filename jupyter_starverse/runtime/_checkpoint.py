"""Checkpoints through ``torch.distributed.checkpoint`` (DCP): any world size can load them.

Every rank writes its shard into ``<run>/checkpoints/.step-N.tmp``; after all finished,
rank 0 adds ``meta.json`` and renames the folder to ``step-N``, so a half-written
checkpoint is never picked up. Older checkpoints beyond ``keep`` are removed.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import NotFoundError
from jupyter_starverse.experiments import Checkpoint, checkpoint_name, latest_checkpoint, list_checkpoints

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
        meta = {"step": int(step), "world_size": ctx.world_size, "time": time.time(), "job_id": env.job_id, **extra}
        (tmp / "meta.json").write_text(json.dumps(meta))
        shutil.rmtree(final, ignore_errors=True)
        tmp.replace(final)
        for old in list_checkpoints(root.parent)[:-keep] if keep > 0 else []:
            if old.path.parent == root:
                shutil.rmtree(old.path, ignore_errors=True)
    barrier()
    return final


def find_resume_checkpoint() -> Checkpoint | None:
    """This run's newest checkpoint (after a worker or node restart), else the one to resume from."""
    env = job_env()
    if env.checkpoint_dir is not None:
        own = latest_checkpoint(env.checkpoint_dir.parent) if env.checkpoint_dir.is_dir() else None
        if own is not None:
            return own
    if env.resume_from is not None:
        meta = env.resume_from / "meta.json"
        if not meta.is_file():
            raise NotFoundError(f"checkpoint {env.resume_from} is incomplete or gone", hint="launch without resume")
        data = json.loads(meta.read_text())
        return Checkpoint(
            int(data["step"]), env.resume_from, int(data.get("world_size", 0)), float(data.get("time", 0))
        )
    return None


def load_latest(*, model: Any, optimizer: Any = None) -> int:
    """Load the newest checkpoint into ``model`` / ``optimizer``; return the next step to run (0 if none)."""
    from torch.distributed.checkpoint.state_dict import set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    ckpt = find_resume_checkpoint()
    if ckpt is None:
        return 0
    init()
    state, optims = _state(model, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp_load(state, checkpoint_id=str(ckpt.path), no_dist=not _distributed())
    set_state_dict(model, optims, model_state_dict=state["model"], optim_state_dict=state.get("optim", {}))
    print(f"resumed from {ckpt.path.name} (step {ckpt.step}, written by world size {ckpt.world_size})", flush=True)
    return ckpt.step + 1
