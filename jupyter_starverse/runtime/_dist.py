"""Process group, device and model wrapping for the current mode (gloo/cpu or nccl/cuda)."""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from jupyter_starverse.errors import MissingDependencyError

from ._env import job_env

__all__ = [
    "Context",
    "agree_stop",
    "agree_stop_why",
    "barrier",
    "exit_after",
    "handle_sigterm",
    "init",
    "signalled_at",
    "stop_requested",
    "wrap",
]

_STOP = threading.Event()
_EXIT_AFTER_S = 25.0  # torchrun SIGKILLs 30 s after its SIGTERM: exit before that
_REPEAT_S = 2.0  # a second SIGTERM later than this after the first exits at once
_SIGNALLED: list[float] = []  # when this process received SIGTERM (epoch seconds)


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
            atexit.register(_destroy_group)
    _CONTEXT.append(Context(env.rank, env.local_rank, env.world_size, device, backend))
    return _CONTEXT[0]


def _destroy_group() -> None:
    """At exit: tear the process group down in order (left to the interpreter's end, gloo's
    threads sometimes abort the process: "terminate called without an active exception")."""
    import contextlib

    import torch.distributed as dist

    with contextlib.suppress(Exception):  # exiting anyway
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


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
            if _SIGNALLED and time.time() - _SIGNALLED[0] < _REPEAT_S:
                return  # torchrun's shutdown sends SIGTERM twice in a row: not a request to hurry
            os._exit(128 + signum)
        _SIGNALLED.append(time.time())
        _STOP.set()
        timer = threading.Timer(exit_after(), os._exit, args=(128 + signum,))
        timer.daemon = True
        timer.start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_term)


def exit_after() -> float:
    """Seconds from SIGTERM to a forced exit: before the launcher's grace period ends (default 25 s)."""
    grace = job_env().stop_grace
    return _EXIT_AFTER_S if grace is None else max(0.5, min(_EXIT_AFTER_S, grace - 1.0))


def signalled_at() -> float | None:
    """When this process received SIGTERM (``None``: it did not)."""
    return _SIGNALLED[0] if _SIGNALLED else None


def stop_requested() -> bool:
    """True once this process received SIGTERM."""
    return _STOP.is_set()


def agree_stop(*, also: bool = False) -> bool:
    """True on every rank if any rank received SIGTERM or passed ``also=True`` (one tiny all-reduce)."""
    return any(agree_stop_why(also=also))


def agree_stop_why(*, also: bool = False) -> tuple[bool, bool]:
    """``(any rank got SIGTERM, any rank passed also=True)``, the same on every rank."""
    if not _dist_ready():
        return _STOP.is_set(), also
    torch = _torch()
    import torch.distributed as dist

    flags = torch.tensor([1 if _STOP.is_set() else 0, 1 if also else 0], device=init().device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return bool(flags[0].item()), bool(flags[1].item())


def barrier() -> None:
    """Wait for every rank (no-op outside a process group)."""
    if _dist_ready():
        import torch.distributed as dist

        dist.barrier()
