"""Idle guards on real local jobs: a diverged loss and idle GPUs stop the job, saying why."""

from __future__ import annotations

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._local import TINY, _stop_leftover_jobs, assert_no_processes_left, wait_for  # noqa: F401 - autouse

pytestmark = pytest.mark.slow

DIVERGES = TINY.replace(
    "    loss = (model(x) - y).pow(2).mean()\n",
    "    loss = (model(x) - y).pow(2).mean() * (float('nan') if step >= 3 else 1)\n",
)


def test_a_loss_that_stays_nan_stops_the_job_naming_the_steps(settings: Settings) -> None:
    backend = LocalBackend(settings)
    job = backend.submit(JobSpec(name="nan", code=DIVERGES, steps=1000, checkpoint_every=2))
    job = backend.wait(job.id, timeout=120)
    assert job.state is JobState.FAILED
    assert job.reason and "NonFiniteLossError" in job.reason and "(steps 3 to 5)" in job.reason, job.reason
    assert_no_processes_left(job)


def test_a_job_whose_gpus_stay_idle_is_warned_then_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from pathlib import Path

    util = Path(str(tmp_path)) / "gpu-util"
    util.write_text("0\n")  # what nvidia-smi would say of GPUs nobody uses
    monkeypatch.setenv("STARVERSE_GPU_UTIL_FILE", str(util))
    monkeypatch.setenv("STARVERSE_JOB_IDLE_MINUTES", "0.1")  # 6 s: a warning after 3 s, the stop after 6
    backend = LocalBackend(Settings.from_env())
    spec = JobSpec(name="idle", code=TINY, steps=100000, env={"STEP_SLEEP": "0.1"})
    job = backend.submit(spec)
    wait_for(lambda: "idle guard" in (backend.get(job.id).reason or ""), timeout=60, why="the idle warning")
    warned = backend.get(job.id)
    assert warned.state is JobState.RUNNING and "the job stops in" in (warned.reason or "")
    job = backend.wait(job.id, timeout=120)
    assert job.state is JobState.FAILED
    assert job.reason and "GPUs were idle for" in job.reason and "stopped after a checkpoint" in job.reason
    assert_no_processes_left(job)
