"""The batch plan: the global batch stays fixed; gradient accumulation follows the world size.

``global_batch = micro_batch x world_size x accumulation``. On a resume with another world
size (or another card type, with another ``micro_batch``) the global batch and the schedule
position (the optimizer step) are kept and the accumulation is recomputed, so the run sees
the same samples per step and the same learning rate at every step. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_starverse.errors import BadInputError

__all__ = ["BatchPlan", "batch_plan"]


@dataclass(frozen=True)
class BatchPlan:
    """How one optimizer step is split: ``micro_batch`` x ``world_size`` x ``accumulation``."""

    global_batch: int
    micro_batch: int
    world_size: int
    accumulation: int
    requested_micro_batch: int

    def to_json(self) -> dict[str, Any]:
        return {
            "global_batch": self.global_batch,
            "micro_batch": self.micro_batch,
            "world_size": self.world_size,
            "accumulation": self.accumulation,
            "requested_micro_batch": self.requested_micro_batch,
        }

    def __str__(self) -> str:
        text = (
            f"global batch {self.global_batch} = micro batch {self.micro_batch} x {self.world_size} ranks"
            f" x {self.accumulation} accumulation steps"
        )
        if self.micro_batch != self.requested_micro_batch:
            text += f" (micro batch lowered from {self.requested_micro_batch} to divide the global batch)"
        return text

    def change_from(self, old: BatchPlan) -> str:
        """One line: what a resume from ``old`` keeps and what it recomputes."""
        if (old.world_size, old.micro_batch) == (self.world_size, self.micro_batch):
            return f"batch plan unchanged: {self}"
        return (
            f"global batch {self.global_batch} kept; world size {old.world_size} -> {self.world_size}, "
            f"micro batch {old.micro_batch} -> {self.micro_batch}, accumulation {old.accumulation} -> "
            f"{self.accumulation}"
        )


def batch_plan(*, global_batch: int, micro_batch: int, world_size: int) -> BatchPlan:
    """Split ``global_batch`` over ``world_size`` ranks: the largest micro batch <= ``micro_batch``
    such that ``micro x world`` divides the global batch; the rest is accumulation."""
    for name, value in (("global_batch", global_batch), ("micro_batch", micro_batch), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadInputError(f"{name} must be a whole number >= 1, got {value!r}", field=name)
    if global_batch % world_size:
        raise BadInputError(
            f"the global batch {global_batch} cannot be split over {world_size} ranks",
            field="global_batch",
            hint=f"choose a global batch that is a multiple of {world_size}, or another number of ranks",
        )
    per_rank = global_batch // world_size
    micro = min(micro_batch, per_rank)
    while per_rank % micro:
        micro -= 1
    return BatchPlan(global_batch, micro, world_size, per_rank // micro, micro_batch)
