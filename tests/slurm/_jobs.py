"""Tiny training scripts for the Slurm tests and benchmark, and waits on their metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import Job

# A linear model trained with the runtime: resumes, checkpoints, logs "loss", and can be
# slowed down per step (STEP_SLEEP) so that tests can act while it runs.
TINY = """
import os, time, torch
from jupyter_starverse import runtime as sv

ctx = sv.init()
torch.manual_seed(0)
model = sv.wrap(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.ones(16, 8), torch.zeros(16, 1)
sleep = float(os.environ.get("STEP_SLEEP", "0"))
for step in sv.steps(model=model, optimizer=opt):
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sv.log_metrics(step, loss=loss, world=ctx.world_size)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(sleep)
"""


def wait_for(what: Callable[[], bool], *, timeout: float = 120.0, every: float = 0.2, why: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {why or what}")
        time.sleep(every)


def last_step(job: Job) -> int:
    points = read_metrics(Path(job.experiment_dir), from_logs=False)
    return points[-1].step if points else -1


def wait_for_step(job: Job, step: int, *, timeout: float = 120.0) -> None:
    wait_for(lambda: last_step(job) >= step, timeout=timeout, why=f"step {step} of {job.id}")
