"""The embedded default backend: each node is a real ``torchrun`` agent on this machine."""

from __future__ import annotations

from ._local import LocalBackend

__all__ = ["LocalBackend"]
