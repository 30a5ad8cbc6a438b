"""Process group, device and model wrapping for the current mode (gloo/cpu or nccl/cuda)."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from typing import Any

from jupyter_starverse.errors import MissingDependencyError

from ._env import job_env

__all__ = ["Context", "agree_stop", "barrier", "handle_sigterm", "init", "stop_requested", "wrap"]

_STOP = threading.Event()
_EXIT_AFTER_S = 25.0  # torchrun SIGKILLs 30 s after its SIGTERM: exit before that


@dataclass(frozen=True)
class Context:
    """Rank, world and device of this process."""

    rank: int
    local_rank: int
    world_size: int
    device: str
    backend: str | None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is how training scripts run
        raise MissingDependencyError("torch", purpose="training") from e
    return torch


_CONTEXT: list[Context] = []


def init() -> Context:
    """Join the job's process group (once) and return rank, world and device."""
    if _CONTEXT:
        return _CONTEXT[0]
    torch = _torch()
    import torch.distributed as dist

    env = job_env()
    gpu = env.accelerator != "cpu" and torch.cuda.is_available()
    device = f"cuda:{env.local_rank}" if gpu else "cpu"
    if gpu:
        torch.cuda.set_device(env.local_rank)
    backend = None
    if env.distributed:
        backend = "nccl" if gpu else "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend=backend)
    _CONTEXT.append(Context(env.rank, env.local_rank, env.world_size, device, backend))
    return _CONTEXT[0]


def _dist_ready() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def wrap(model: Any) -> Any:
    """Wrap ``model`` for the job's template: DDP (``ddp``) or FSDP2 ``fully_shard`` (``fsdp``)."""
    ctx = init()
    model = model.to(ctx.device)
    if not _dist_ready() or ctx.world_size == 1:
        return model
    if job_env().template == "fsdp":
        from torch import nn
        from torch.distributed.fsdp import fully_shard

        # one FSDP unit per repeated block (the entries of every ModuleList), then the root
        for blocks in [m for m in model.modules() if isinstance(m, nn.ModuleList)]:
            for block in blocks:
                fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[ctx.local_rank] if ctx.device.startswith("cuda") else None)


def handle_sigterm() -> None:
    """On SIGTERM (cancel, budget cap, spot preemption) ask the loop to checkpoint and stop."""

    def _on_term(signum: int, _frame: object) -> None:
        if _STOP.is_set():
            os._exit(128 + signum)
        _STOP.set()
        timer = threading.Timer(_EXIT_AFTER_S, os._exit, args=(128 + signum,))
        timer.daemon = True
        timer.start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_term)


def stop_requested() -> bool:
    """True once this process received SIGTERM."""
    return _STOP.is_set()


def agree_stop(*, also: bool = False) -> bool:
    """True on every rank if any rank received SIGTERM or passed ``also=True`` (one tiny all-reduce)."""
    if not _dist_ready():
        return _STOP.is_set() or also
    torch = _torch()
    import torch.distributed as dist

    flag = torch.tensor([1 if _STOP.is_set() or also else 0], device=init().device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def barrier() -> None:
    """Wait for every rank (no-op outside a process group)."""
    if _dist_ready():
        import torch.distributed as dist

        dist.barrier()
