"""The one way our result objects become JSON (CLI ``--json`` and REST answers alike)."""

from __future__ import annotations

from typing import Any

__all__ = ["to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Our dataclasses expose ``to_json()``; containers are mapped element-wise; paths become strings."""
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "__fspath__"):
        return str(obj)
    return obj
