"""Workspace switchers: one interface, chosen by where the workspace runs.

- ``local``: the kernels' environment (``CUDA_VISIBLE_DEVICES``) and a kernel restart;
- ``kubernetes``: patch the workspace's own StatefulSet/Deployment onto the other pool;
- ``jupyterhub``: restart the user's server with the other KubeSpawner profile.

A switcher never touches running jobs; it only moves the workspace.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:

    from ._mode import Mode

__all__ = ["LocalSwitcher", "SwitchOutcome", "WorkspaceSwitcher", "kernel_env"]

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
    """The workspace is this machine: kernels restart with another ``CUDA_VISIBLE_DEVICES``."""

    where = "local"

    def check(self, target: Mode) -> None:
        return None

    def apply(self, target: Mode) -> SwitchOutcome:
        hidden = "hidden from" if target.kind == "cpu" else "visible to"
        return SwitchOutcome("local", f"GPUs {hidden} kernels after their restart", restarts_workspace=False)
