"""Checkpoints through ``torch.distributed.checkpoint`` (DCP): any world size can load them.

Every rank writes its shard into ``<run>/checkpoints/.step-N.tmp``; after all finished,
rank 0 adds ``meta.json``, renames the folder to ``step-N`` and records it in the run's own
checkpoint record (``checkpoints/index.json``), so a half-written checkpoint is never picked
up. Older checkpoints beyond ``keep`` are removed.

Every checkpoint carries its health: one saved while the last logged loss was not finite (the
NaN guard of ``log_metrics``) or whose weights or optimizer state hold a NaN or an infinity
(one reduction per tensor on every rank, one all-reduce) is recorded unhealthy, is never
resumed from and does not count toward ``keep``, so a diverged run never deletes the newest
healthy checkpoint.

Loading unpickles the DCP ``.metadata``, so only checkpoints recorded and signed by a run whose
secret this process can read are loaded (see ``jupyter_starverse.experiments._checkpoints``):
a folder another user or another run planted in a shared experiments folder, or an edited
record, is skipped and named in the job log. Nothing else is unpickled: no ``torch.load``.
"""

from __future__ import annotations

import shutil
import time
import warnings
from collections.abc import Iterator
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

from ._dist import _dist_ready, barrier, init
from ._env import job_env
from ._guards import loss_problem

__all__ = ["checkpoint_problem", "find_resume_checkpoint", "load_latest", "save_checkpoint"]


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


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _probe(local: Any) -> Any:
    """A 0-d float32 that is not finite when ``local`` holds a NaN or an infinity (one pass, no copy).

    A sum for most tensors; float16 would overflow a sum, so its min plus max instead. A sum may
    also overflow without any NaN (huge weights): :func:`_finite` confirms such a tensor exactly.
    """
    import torch

    if local.dtype == torch.float16:
        low, high = torch.aminmax(local)
        return low.float() + high.float()
    if local.is_complex():
        return torch.isfinite(local).all().float().log()  # 0 when finite, -inf when not
    return local.sum().float()


def _finite(state: dict[str, Any]) -> bool:
    """Whether every floating-point tensor of this rank's part of ``state`` is finite (one sync per device)."""
    import torch

    by_device: dict[Any, list[tuple[Any, Any]]] = {}
    for t in _tensors(state):
        local = t.to_local() if hasattr(t, "to_local") else t  # a DTensor: this rank's shard
        if (local.is_floating_point() or local.is_complex()) and local.numel():
            by_device.setdefault(local.device, []).append((_probe(local), local))
    for items in by_device.values():
        finite = torch.isfinite(torch.stack([probe for probe, _ in items]))
        if bool(finite.all().item()):
            continue
        suspects = [local for ok, (_, local) in zip(finite.tolist(), items, strict=True) if not ok]
        if not all(bool(torch.isfinite(local).all().item()) for local in suspects):
            return False
    return True


def checkpoint_problem(state: dict[str, Any]) -> str | None:
    """Why a checkpoint of ``state`` saved now is unhealthy, the same on every rank (None: healthy).

    Collective: the loss guard's view and the weights check of every rank are all-reduced.
    """
    import torch

    loss = loss_problem()
    weights_ok = _finite(state)
    if _dist_ready():
        import torch.distributed as dist

        flags = torch.tensor([0 if loss is None else 1, 0 if weights_ok else 1], device=init().device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        loss_bad, weights_bad = bool(flags[0].item()), bool(flags[1].item())
    else:
        loss_bad, weights_bad = loss is not None, not weights_ok
    problems = []
    if loss_bad:
        problems.append(loss or "a rank logged a loss that was not finite")
    if weights_bad:
        problems.append("the weights or the optimizer state hold NaN or infinite values")
    return "; ".join(problems) or None


def save_checkpoint(step: int, *, model: Any, optimizer: Any = None, keep: int = 2, **extra: Any) -> Path:
    """Save model (and optimizer) after ``step``; collective: call it on every rank.

    The checkpoint is recorded unhealthy when the loss was not finite or the state is not
    (:func:`checkpoint_problem`); ``keep`` counts healthy checkpoints only.
    """
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
    problem = checkpoint_problem(state)
    with warnings.catch_warnings():
        # outside a process group DCP warns that it saves in a single process: that is the intent
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp_save(state, checkpoint_id=str(tmp), no_dist=not _distributed())
    barrier()
    if ctx.rank == 0:
        now = time.time()
        meta = {
            "step": int(step),
            "world_size": ctx.world_size,
            "time": now,
            "job_id": env.job_id,
            "healthy": problem is None,
            "problem": problem,
            **extra,
        }
        write_json(tmp / "meta.json", meta)
        shutil.rmtree(final, ignore_errors=True)
        tmp.replace(final)
        dropped = record_checkpoint(
            final,
            step=int(step),
            world_size=ctx.world_size,
            time=now,
            job_id=env.job_id,
            keep=max(keep, 0),
            healthy=problem is None,
            problem=problem,
        )
        for old in dropped:
            shutil.rmtree(old, ignore_errors=True)
        if problem is not None:
            print(f"checkpoint {final.name} is unhealthy ({problem}): no resume will start from it", flush=True)
    barrier()
    return final


def find_resume_checkpoint() -> Checkpoint | None:
    """This run's newest checkpoint (after a worker or node restart), else the one to resume from.

    Only healthy checkpoints signed by a run whose secret this process can read count;
    ``STARVERSE_RESUME_FROM`` naming any other folder raises ``PermissionDeniedError``
    (``ConflictError`` for an unhealthy one, ``NotFoundError`` when it is gone).
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
