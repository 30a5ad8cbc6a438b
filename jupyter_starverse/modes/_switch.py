"""Workspace switchers: one interface, chosen by where the workspace runs.

- ``local``: the kernels' environment (``CUDA_VISIBLE_DEVICES``) and a kernel restart;
- ``kubernetes``: patch the workspace's own StatefulSet/Deployment onto the other pool;
- ``jupyterhub``: restart the user's server with the other KubeSpawner profile.

A switcher never touches running jobs; it only moves the workspace.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import ConflictError

from ._mode import Mode

__all__ = ["GPU_BACKENDS", "LocalSwitcher", "SwitchOutcome", "WorkspaceSwitcher", "kernel_env", "machine_has_gpu"]

#: Backends whose jobs get GPUs elsewhere than on this machine.
GPU_BACKENDS = ("kubernetes", "slurm")
_NO_GPU = "this machine has no GPU (no /dev/nvidia0, no nvidia-smi)"


def machine_has_gpu(setting: str = "auto") -> bool:
    """Whether this machine has a GPU: ``STARVERSE_LOCAL_GPU`` (``yes``/``no``), else an NVIDIA
    device node or driver tool (cheap, no torch import)."""
    if setting in ("yes", "no"):
        return setting == "yes"
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


#: Where ``CUDA_VISIBLE_DEVICES`` was before CPU mode hid the GPUs (restored in GPU mode).
PREVIOUS_CUDA_ENV = "STARVERSE_PREVIOUS_CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class SwitchOutcome:
    """What a switcher changed.

    ``restarts_workspace`` is True when the whole workspace (pod, server) comes back
    elsewhere: kernels are then restored from their saved state when they start again.
    """

    where: str
    action: str
    restarts_workspace: bool

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where, "action": self.action, "restarts_workspace": self.restarts_workspace}


class WorkspaceSwitcher(ABC):
    """Moves the workspace between CPU and GPU."""

    where: str = ""

    @abstractmethod
    def check(self, target: Mode) -> None:
        """Raise (changing nothing) when the switch to ``target`` cannot work here."""

    @abstractmethod
    def apply(self, target: Mode) -> SwitchOutcome:
        """Make the switch. Kernels' state was saved before this is called."""

    def warnings(self, target: Mode) -> tuple[str, ...]:
        """What the user should know about a switch to ``target`` that :meth:`check` lets through."""
        return ()

    def workspace_mode(self, target: Mode) -> Mode:
        """The mode the workspace itself runs in (and is priced at) once switched to ``target``."""
        return target


def kernel_env(target: Mode, base: Mapping[str, str]) -> dict[str, str]:
    """The environment a kernel restarts with in ``target`` mode.

    CPU mode hides every GPU (``CUDA_VISIBLE_DEVICES=""``) and remembers the previous
    value; GPU mode puts the previous value back (or removes the variable).
    """
    env = dict(base)
    if target.kind == "cpu":
        if PREVIOUS_CUDA_ENV not in env:
            env[PREVIOUS_CUDA_ENV] = env.get("CUDA_VISIBLE_DEVICES", "<unset>")
        env["CUDA_VISIBLE_DEVICES"] = ""
        return env
    previous = env.pop(PREVIOUS_CUDA_ENV, None)
    if previous is None:
        return env
    if previous == "<unset>":
        env.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        env["CUDA_VISIBLE_DEVICES"] = previous
    return env


class LocalSwitcher(WorkspaceSwitcher):
    """The workspace is this machine: kernels restart with another ``CUDA_VISIBLE_DEVICES``.

    On a machine without a GPU, GPU mode is refused when jobs run here too (``backend`` local:
    every GPU launch would fail), and allowed with a warning when they go to a cluster
    (Kubernetes, Slurm): then the kernels stay on the CPU and the workspace's price stays the same.
    """

    where = "local"

    def __init__(self, *, has_gpu: bool | None = None, backend: str = "local") -> None:
        self.has_gpu = machine_has_gpu() if has_gpu is None else has_gpu
        self.backend = backend

    def check(self, target: Mode) -> None:
        if target.kind != "gpu" or self.has_gpu or self.backend in GPU_BACKENDS:
            return None
        raise ConflictError(
            f"GPU mode needs a GPU, and {_NO_GPU}: every job launched in it would fail",
            hint="stay in CPU mode here. To train on GPUs, send the jobs to a cluster: set STARVERSE_BACKEND="
            "kubernetes or slurm (GPU mode then asks the cluster for the cards), or launch one job with "
            "--backend kubernetes --gpu TYPE; where the GPU is not an NVIDIA one, set STARVERSE_LOCAL_GPU=yes",
        )

    def warnings(self, target: Mode) -> tuple[str, ...]:
        if target.kind != "gpu" or self.has_gpu:
            return ()
        if self.backend not in GPU_BACKENDS:  # only reached when already in GPU mode (check refuses a switch)
            return (
                f"{_NO_GPU}: every job launched in GPU mode fails here; switch back with `mode cpu` "
                "(`%sv mode cpu` in a notebook), or send jobs to a cluster (STARVERSE_BACKEND=kubernetes or slurm)",
            )
        return (
            f"{_NO_GPU}: the kernels here stay on the CPU and the workspace's price does not change; jobs "
            f"launched in GPU mode ask {self.backend} for {target.gpu_type} cards (priced at launch)",
        )

    def workspace_mode(self, target: Mode) -> Mode:
        return Mode("cpu") if target.kind == "gpu" and not self.has_gpu else target

    def apply(self, target: Mode) -> SwitchOutcome:
        hidden = "hidden from" if target.kind == "cpu" else "visible to"
        return SwitchOutcome("local", f"GPUs {hidden} kernels after their restart", restarts_workspace=False)
