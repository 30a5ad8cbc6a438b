"""The Jupyter server extension: a thin REST front door over :class:`~jupyter_starverse.client.Starverse`."""

from __future__ import annotations

from ._app import StarverseApp

__all__ = ["StarverseApp"]
