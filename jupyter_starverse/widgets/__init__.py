"""Notebook widgets (plain ipywidgets, so they also work in VS Code): display only.

What they show is computed in the core (:mod:`jupyter_starverse.watch` for jobs); these
modules draw it. ``JobMonitor`` is imported lazily, so ``JobHandle`` costs no ipywidgets
import until it is displayed.
"""

from __future__ import annotations

from typing import Any

from ._handle import JobHandle

__all__ = ["JobHandle", "JobMonitor"]


def __getattr__(name: str) -> Any:
    if name == "JobMonitor":
        from .monitor import JobMonitor

        return JobMonitor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
