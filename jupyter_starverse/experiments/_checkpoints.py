"""Checkpoints of an experiment and the plan to resume from them.

A checkpoint is a folder ``<run>/checkpoints/step-<8 digits>/`` written with
``torch.distributed.checkpoint`` by every rank, plus ``meta.json`` written by rank 0
last: a folder without ``meta.json`` is incomplete and ignored. The latest checkpoint of
an experiment is the newest one of any of its runs; that is where a resumed run starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._layout import ExperimentPaths, RunPaths, read_json

__all__ = ["Checkpoint", "ResumePlan", "checkpoint_name", "latest_checkpoint", "list_checkpoints", "plan_resume"]

_STEP_DIR = re.compile(r"^step-(\d{8,})$")


def checkpoint_name(step: int) -> str:
    """Folder name of the checkpoint taken after ``step``."""
    return f"step-{step:08d}"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: the step it was taken after and the world size that wrote it."""

    step: int
    path: Path
    world_size: int
    time: float
    job_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "path": str(self.path),
            "world_size": self.world_size,
            "time": self.time,
            "job_id": self.job_id,
        }


def _roots(path: Path | ExperimentPaths | RunPaths) -> list[Path]:
    base = path.root if isinstance(path, (ExperimentPaths, RunPaths)) else Path(path)
    roots = [base / "checkpoints"]
    if (base / "runs").is_dir():
        roots += [run / "checkpoints" for run in (base / "runs").iterdir()]
    return [r for r in roots if r.is_dir()]


def list_checkpoints(path: Path | ExperimentPaths | RunPaths) -> list[Checkpoint]:
    """Complete checkpoints of a run folder, or of every run of an experiment; oldest first."""
    out = []
    for d in (d for root in _roots(path) for d in root.iterdir()):
        m = _STEP_DIR.match(d.name)
        meta = read_json(d / "meta.json") if m else None
        if m is None or not isinstance(meta, dict):
            continue
        out.append(
            Checkpoint(
                step=int(meta.get("step") or m.group(1)),
                path=d,
                world_size=int(meta.get("world_size", 0)),
                time=float(meta.get("time", 0.0)),
                job_id=meta.get("job_id"),
            )
        )
    return sorted(out, key=lambda c: (c.time, c.step))


def latest_checkpoint(path: Path | ExperimentPaths | RunPaths) -> Checkpoint | None:
    """The newest complete checkpoint of a run folder or of any run of an experiment."""
    found = list_checkpoints(path)
    return found[-1] if found else None


@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run will do: start after ``checkpoint.step`` with a new world size."""

    experiment: str
    checkpoint: Checkpoint | None
    old_world_size: int | None
    new_world_size: int

    @property
    def start_step(self) -> int:
        return self.checkpoint.step + 1 if self.checkpoint else 0

    @property
    def reshard(self) -> bool:
        return self.old_world_size is not None and self.old_world_size != self.new_world_size

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "checkpoint_step": self.checkpoint.step if self.checkpoint else None,
            "old_world_size": self.old_world_size,
            "new_world_size": self.new_world_size,
            "start_step": self.start_step,
            "reshard": self.reshard,
        }

    def __str__(self) -> str:
        if self.checkpoint is None:
            return (
                f"resume {self.experiment}: no checkpoint yet, starts at step 0 with world size {self.new_world_size}"
            )
        change = (
            f"{self.old_world_size} -> {self.new_world_size}" if self.reshard else f"{self.new_world_size} (unchanged)"
        )
        return (
            f"resume {self.experiment}: checkpoint step {self.checkpoint.step} ({self.checkpoint.path.name}), "
            f"world size {change}, continues at step {self.start_step}"
        )


def plan_resume(exp_dir: Path | ExperimentPaths, *, new_world_size: int) -> ResumePlan:
    """The resume plan for an experiment folder and the world size of the next run."""
    exp = exp_dir if isinstance(exp_dir, ExperimentPaths) else ExperimentPaths(Path(exp_dir))
    ckpt = latest_checkpoint(exp)
    return ResumePlan(exp.name, ckpt, ckpt.world_size if ckpt else None, new_world_size)
