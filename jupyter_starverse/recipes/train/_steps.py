"""What every trainer loop of a recipe job shares: skipping the gradient sync, summing over ranks."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

__all__ = ["all_sum", "no_sync"]


def no_sync(model: Any, last: bool) -> contextlib.AbstractContextManager[Any]:
    """Skip the gradient all-reduce on all but the last micro batch (DDP ``no_sync``, FSDP2's switch)."""
    if last:
        if hasattr(model, "set_requires_gradient_sync"):
            model.set_requires_gradient_sync(True)
        return contextlib.nullcontext()
    if hasattr(model, "no_sync"):
        return model.no_sync()  # type: ignore[no-any-return]
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(False)
    return contextlib.nullcontext()


def all_sum(values: list[float], device: str) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t)
    return [float(x) for x in t.tolist()]
