"""Notebook widgets (plain ipywidgets, so they also work in VS Code).

``JobMonitor`` is imported lazily: the jobs REST handler uses the pure progress summary in
``_progress`` without pulling in ipywidgets.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobHandle", "JobMonitor"]


def __getattr__(name: str) -> Any:
    if name == "JobMonitor":
        from .monitor import JobMonitor

        return JobMonitor
    if name == "JobHandle":
        from ._handle import JobHandle

        return JobHandle
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
