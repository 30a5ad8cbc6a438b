"""Workspace switchers: one interface, chosen by where the workspace runs.

- ``local``: the kernels' environment (``CUDA_VISIBLE_DEVICES``) and a kernel restart;
- ``kubernetes``: patch the workspace's own StatefulSet/Deployment onto the other pool;
- ``jupyterhub``: restart the user's server with the other KubeSpawner profile.

A switcher never touches running jobs; it only moves the workspace.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import BadInputError

if TYPE_CHECKING:
    from jupyter_starverse._settings import Settings

    from ._state import Mode

__all__ = ["LocalSwitcher", "SwitchOutcome", "WorkspaceSwitcher", "detect_workspace", "kernel_env", "make_switcher"]

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


def detect_workspace(environ: Mapping[str, str]) -> str:
    """``jupyterhub`` when a Hub spawned us, ``kubernetes`` inside a pod, else ``local``."""
    if all(environ.get(k) for k in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_USER")):
        return "jupyterhub"
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    return "local"


def make_switcher(settings: Settings, *, environ: Mapping[str, str] | None = None) -> WorkspaceSwitcher:
    """The switcher for where this workspace runs (``Settings.workspace`` or detected)."""
    env = os.environ if environ is None else environ
    where = settings.workspace if settings.workspace != "auto" else detect_workspace(env)
    if where == "local":
        return LocalSwitcher()
    if where == "kubernetes":
        from ._k8s import KubernetesSwitcher

        return KubernetesSwitcher(settings, environ=env)
    if where == "jupyterhub":
        from ._hub import HubSwitcher

        return HubSwitcher(settings, environ=env)
    raise BadInputError(
        f"unknown workspace kind {where!r}", field="workspace", hint="use local, kubernetes or jupyterhub"
    )
