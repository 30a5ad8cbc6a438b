"""Helpers for the local backend tests: a tiny training script and waits on real processes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from jupyter_starverse._procs import job_processes
from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import Job

if TYPE_CHECKING:
    from jupyter_starverse.catalog import Catalog

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


def pulled_corpus(settings: Settings, folder: Path) -> Catalog:
    """A one-file dataset ``corpus`` added and pulled into the store; the catalog that holds it."""
    from jupyter_starverse.catalog import Catalog

    src = folder / "corpus"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    catalog = Catalog(settings)
    catalog.add_dataset("corpus", str(src))
    catalog.pull("corpus")
    return catalog


def wait_for(what: Callable[[], bool], *, timeout: float = 180.0, every: float = 0.2, why: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {why or what}")
        time.sleep(every)


def wait_for_step(job: Job, step: int, *, timeout: float = 180.0) -> None:
    def reached() -> bool:
        points = read_metrics(Path(job.experiment_dir), from_logs=False)
        return bool(points) and points[-1].step >= step

    wait_for(reached, timeout=timeout, why=f"step {step} of {job.id}")


def assert_no_processes_left(job: Job) -> None:
    """Nothing of the job runs any more: no supervisor, agent or worker."""
    wait_for(lambda: not job_processes(job.id), timeout=30, why=f"processes of {job.id} to end")


def logs_text(backend: LocalBackend, job: Job) -> str:
    return "\n".join(line.render() for line in backend.logs(job.id))


@pytest.fixture(autouse=True)
def _stop_leftover_jobs(settings: Settings) -> Iterator[None]:
    """A test that fails half-way leaves no job running behind it."""
    yield
    backend = LocalBackend(settings)
    for job in backend.list():
        if not job.state.finished:
            backend.cancel(job.id, timeout=30)
