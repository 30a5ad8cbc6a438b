"""The Slurm backend: a JobSpec as a readable sbatch script (``srun``, one task per rank), submitted with
``sbatch --parsable``, read back from ``scontrol`` / ``sacct`` and the run folder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._backend import RECORD, SCRIPT, SlurmBackend
    from ._script import SlurmLaunch, render_script

__all__ = ["RECORD", "SCRIPT", "SlurmBackend", "SlurmLaunch", "render_script"]


def __getattr__(name: str) -> Any:
    # Lazy: ``python -m ...slurm._node`` / ``_rank`` / ``_requeue`` run on every node before the
    # first step, and need none of the backend (its import is ~1 s of a busy node's start-up).
    if name in ("RECORD", "SCRIPT", "SlurmBackend"):
        from . import _backend

        return getattr(_backend, name)
    if name in ("SlurmLaunch", "render_script"):
        from . import _script

        return getattr(_script, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
