"""Which switcher moves this workspace: local kernel, JupyterHub profile, or Kubernetes controller."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from jupyter_starverse.errors import BadInputError

from ._switch import LocalSwitcher, WorkspaceSwitcher, machine_has_gpu

if TYPE_CHECKING:
    from jupyter_starverse._settings import Settings

__all__ = ["detect_workspace", "make_switcher"]


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
        return LocalSwitcher(has_gpu=machine_has_gpu(settings.local_gpu), backend=settings.backend)
    if where == "kubernetes":
        from ._k8s import KubernetesSwitcher

        return KubernetesSwitcher(settings, environ=env)
    if where == "jupyterhub":
        from ._hub import HubSwitcher

        return HubSwitcher(settings, environ=env)
    raise BadInputError(
        f"unknown workspace kind {where!r}", field="workspace", hint="use local, kubernetes or jupyterhub"
    )
