"""Run the runtime in this test process as if it were a job's rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse.runtime import _dist


def as_job(monkeypatch: pytest.MonkeyPatch, run: Path, *, resume_from: Path | None = None) -> None:
    """The environment a launched job's rank gets for run folder ``run`` (resuming ``resume_from`` if given),
    with the runtime's cached job environment and distributed context cleared so that it reads it."""
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(run))
    monkeypatch.setenv("STARVERSE_JOB_ID", run.name)
    if resume_from is None:
        monkeypatch.delenv("STARVERSE_RESUME_FROM", raising=False)
    else:
        monkeypatch.setenv("STARVERSE_RESUME_FROM", str(resume_from))
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()
