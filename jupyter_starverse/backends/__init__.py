"""Where jobs run: the local-process, Kubernetes and Slurm backends.

The package is not called ``launch``: ``jupyter_starverse.launch()`` is the public
function, and a package of that name would shadow it. The records and the backend
contract live one floor down, in :mod:`jupyter_starverse.jobmodel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BadInputError

if TYPE_CHECKING:
    from .._settings import Settings
    from ..jobmodel import LaunchBackend
    from .templates import example_script

__all__ = ["BACKENDS", "example_script", "make_backend"]


def __getattr__(name: str) -> Any:
    # Lazy: what a job's own processes import from here (``_worker``, Slurm's ``_node``/``_rank``/
    # ``_requeue``, started on every node before the first step) must not pay for the templates,
    # the catalog and the settings (~1 s a process on a busy node).
    if name == "example_script":
        from .templates import example_script

        return example_script
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
