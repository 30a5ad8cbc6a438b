"""The tiny training script and waits of the local backend tests, shared by the Slurm tests and benchmark."""

from __future__ import annotations

from pathlib import Path

from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import Job
from tests.backends._local import TINY, wait_for, wait_for_step

__all__ = ["TINY", "last_step", "wait_for", "wait_for_step"]


def last_step(job: Job) -> int:
    """The newest step the job's runtime logged (-1 before the first)."""
    points = read_metrics(Path(job.experiment_dir), from_logs=False)
    return points[-1].step if points else -1
