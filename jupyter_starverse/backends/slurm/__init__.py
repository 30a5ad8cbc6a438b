"""The Slurm backend: a JobSpec as a readable sbatch script (``srun`` + torchrun), submitted with
``sbatch --parsable``, read back from ``scontrol`` / ``sacct`` and the run folder."""

from __future__ import annotations

from ._backend import RECORD, SCRIPT, SlurmBackend
from ._script import SlurmLaunch, render_script

__all__ = ["RECORD", "SCRIPT", "SlurmBackend", "SlurmLaunch", "render_script"]
