"""Where jobs run: the spec, the backend contract and the backends."""

from __future__ import annotations

import sys
import types
from typing import Any

from .._settings import Settings
from ..errors import BadInputError
from ._backend import Job, JobState, LaunchBackend, LogLine, NodeStatus
from ._spec import BILLING_MODES, FRAMEWORKS, TEMPLATES, JobSpec

__all__ = [
    "BILLING_MODES",
    "FRAMEWORKS",
    "TEMPLATES",
    "Job",
    "JobSpec",
    "JobState",
    "LaunchBackend",
    "LogLine",
    "NodeStatus",
    "make_backend",
]


def make_backend(name: str, settings: Settings) -> LaunchBackend:
    """Build the backend called ``name`` (``local`` or ``kubernetes``)."""
    if name == "local":
        from ._local import LocalBackend

        return LocalBackend(settings)
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(settings)
    raise BadInputError(f"unknown backend {name!r}", field="backend", hint="use 'local' or 'kubernetes'")


class _LaunchModule(types.ModuleType):
    """``jupyter_starverse.launch`` is this package *and* the front-door function.

    The package attribute ``jupyter_starverse.launch`` is this module once it is imported,
    which hides the lazy ``launch`` function of ``jupyter_starverse/__init__.py``; calling
    the module forwards to :func:`jupyter_starverse._api.launch`.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from jupyter_starverse._api import launch

        return launch(*args, **kwargs)


sys.modules[__name__].__class__ = _LaunchModule
