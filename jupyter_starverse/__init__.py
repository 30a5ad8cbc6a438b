"""jupyter_starverse: train large models on rented GPUs from a notebook.

This module holds entry points only (Jupyter server extension, lab extension paths,
IPython extension) and lazy access to the Python front door (``launch``, ``jobs``,
``attach``), so ``import jupyter_starverse`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._version import __version__

__all__ = ["__version__", "attach", "jobs", "launch"]

_API = ("launch", "jobs", "attach")


def __getattr__(name: str) -> Any:
    if name == "__version__":  # lazy: package metadata costs a job's every process on every node
        from ._version import __version__

        return __version__
    if name in _API:
        from . import _api

        return getattr(_api, name)
    raise AttributeError(f"module 'jupyter_starverse' has no attribute {name!r}")


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-starverse"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server import StarverseApp

    return [{"module": "jupyter_starverse", "app": StarverseApp}]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_starverse``: registers ``%sv`` / ``%%sv``."""
    from .magics import StarverseMagics

    ipython.register_magics(StarverseMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Nothing to release: magics hold no resources."""
