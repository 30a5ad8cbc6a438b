"""What the template scripts share around their model: the text to train on, the ``(dp, split)`` mesh
of a model cut over ranks, one data-parallel optimizer step in micro batches, and what each step reports.

Every template (``ddp``, ``fsdp``, ``tp``, ``pp``) runs inside the job and imports this from the
installed package, as it imports :mod:`._lm`, so a script the backend copies into the run folder
(``train.py``) finds it too. Only the runtime, torch and ``errors`` are imported: nothing of a
service above the job.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from jupyter_starverse import runtime as sv
from jupyter_starverse.errors import BadInputError

from ._lm import CharData, lm_loss, load_text

__all__ = ["StepReport", "accumulate", "dataset_text", "split_mesh"]


def dataset_text(data: str | None, env: sv.JobEnv) -> str:
    """The text of the mounted dataset ``--data`` names (default: the job's only mount), else the built-in text."""
    name = data or (next(iter(env.mounts)) if len(env.mounts) == 1 else None)
    return load_text(sv.mount_path(name) if name else None)


def split_mesh(ctx: sv.Context, degree: int, *, dim: str, field: str, hint: str) -> tuple[int, DeviceMesh]:
    """The data-parallel size and the ``("dp", dim)`` mesh of a model split ``degree`` ways.

    A degree that does not divide the world size is refused, naming the launch ``field`` that set it.
    """
    if degree < 1 or ctx.world_size % degree:
        raise BadInputError(f"{field} {degree} does not divide the world size {ctx.world_size}", field=field, hint=hint)
    dp = ctx.world_size // degree
    return dp, init_device_mesh(ctx.device.split(":")[0], (dp, degree), mesh_dim_names=("dp", dim))


def accumulate(
    model: nn.Module, data: CharData, plan: sv.BatchPlan, ctx: sv.Context, *, dp_rank: int, dp: int
) -> torch.Tensor:
    """Forward and backward this data-parallel rank's share of the global batch, in the plan's micro
    batches (gradients accumulate); the share's mean loss. The caller zeroes and steps the optimizer."""
    total = torch.zeros((), device=ctx.device)
    for size in plan.chunks(dp_rank):
        x, y = data.batch(max(size, 1))  # a 0-sample chunk still runs, weighted 0: collectives stay in step
        loss = lm_loss(model(x.to(ctx.device)), y.to(ctx.device))
        # DDP / FSDP average over ranks: weighting by the share makes it the mean of the global batch
        (loss * (size * dp / plan.global_batch)).backward()  # type: ignore[no-untyped-call]
        total += loss.detach() * size
    return total / plan.share(dp_rank)


class StepReport:
    """What every step reports: tokens/s and TFLOPS/card for the monitor and the loss into the metrics,
    a loss line every 10 steps on rank 0, then the ``--step-sleep`` slowdown (tests).

    Made just before the training loop: the first step is timed from there.
    """

    def __init__(self, ctx: sv.Context, args: argparse.Namespace, plan: sv.BatchPlan, *, flops: float) -> None:
        self.ctx, self.plan = ctx, plan
        self.seq_len: int = args.seq_len
        self.sleep: float = args.step_sleep
        self.t0 = time.time()
        self.meter = sv.Throughput(flops_per_token=flops, cards=ctx.world_size)

    def __call__(self, step: int, loss: torch.Tensor) -> None:
        tokens = self.plan.global_batch * self.seq_len
        rates: dict[str, Any] = self.meter.step(tokens)
        sv.log_metrics(step, loss=loss, tokens=(step + 1) * tokens, **rates)
        if self.ctx.is_main and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - self.t0:.1f}s)", flush=True)
        if self.sleep:
            time.sleep(self.sleep)
