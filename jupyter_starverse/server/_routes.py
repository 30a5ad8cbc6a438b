"""The one route table: each area module contributes ``routes`` (paths under the namespace)."""

from __future__ import annotations

from typing import Any

from jupyter_server.utils import url_path_join

from . import (
    _cost,
    _data,
    _evals,
    _export,
    _feedback,
    _info,
    _jobs,
    _mode,
    _pipelines,
    _recipes,
    _serve,
    _store,
    _tensorboard,
)

__all__ = ["NAMESPACE", "make_handlers"]

NAMESPACE = "jupyter-starverse"

# Area modules whose ``routes`` are served; add yours here.
_AREAS = [
    _info,
    _cost,
    _jobs,
    _tensorboard,
    _store,
    _data,
    _mode,
    _pipelines,
    _recipes,
    _feedback,
    _export,
    _serve,
    _evals,
]


def make_handlers() -> list[tuple[str, Any]]:
    """Handlers with paths relative to the server's base URL (ExtensionApp prefixes it)."""
    return [(url_path_join("/", NAMESPACE, path), handler) for area in _AREAS for path, handler in area.routes]
