"""Where jobs run: the local-process, Kubernetes and Slurm backends.

The package is not called ``launch``: ``jupyter_starverse.launch()`` is the public
function, and a package of that name would shadow it. The records and the backend
contract live one floor down, in :mod:`jupyter_starverse.jobmodel`.
"""

from __future__ import annotations

from .._settings import Settings
from ..errors import BadInputError
from ..jobmodel import LaunchBackend
from .templates import example_script

__all__ = ["BACKENDS", "example_script", "make_backend"]

#: Backend names every front door accepts.
BACKENDS = ("local", "kubernetes", "slurm")


def make_backend(name: str, settings: Settings, *, port: int | None = None) -> LaunchBackend:
    """Build the backend called ``name`` (``local``, ``kubernetes`` or ``slurm``).

    ``port`` pins the local backend's rendezvous port (default: a free one per job).
    """
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(settings, port=port)
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(settings)
    if name == "slurm":
        from .slurm import SlurmBackend

        return SlurmBackend(settings)
    raise BadInputError(f"unknown backend {name!r}", field="backend", hint="use " + ", ".join(map(repr, BACKENDS)))
