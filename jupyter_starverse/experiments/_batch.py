"""The batch plan: the global batch stays fixed; gradient accumulation follows the world size.

``global_batch = micro_batch x world_size x accumulation``. On a resume with another world
size (or another card type, with another ``micro_batch``) the global batch and the schedule
position (the optimizer step) are kept and the accumulation is recomputed, so the run sees
the same samples per step and the same learning rate at every step. Standard library only.

The recipes split the global batch evenly (it must be a multiple of the world size); the
templates also accept an uneven split (``uneven=True``: 32 over 3 ranks is 11 + 11 + 10), each
rank weighting its loss by its share, so a resume onto any world size keeps the global batch.
The plan a run trains with is recorded in its checkpoints (``meta.json`` ``batch``), which is
how a resume, and the resume plan of a preview, know what to keep.
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

    @classmethod
    def from_json(cls, data: Any) -> BatchPlan | None:
        """The plan a checkpoint or a recipe file recorded (``None`` when it holds none or a broken one)."""
        try:
            values = {k: int(data[k]) for k in cls.__dataclass_fields__}
        except (KeyError, TypeError, ValueError):
            return None
        return cls(**values) if all(v >= 1 for v in values.values()) else None

    @property
    def even(self) -> bool:
        return self.global_batch % self.world_size == 0

    def share(self, rank: int) -> int:
        """Samples rank ``rank`` trains on per optimizer step (the first ranks take one more when uneven)."""
        base, extra = divmod(self.global_batch, self.world_size)
        return base + (1 if rank < extra else 0)

    def chunks(self, rank: int) -> list[int]:
        """The sizes of rank ``rank``'s ``accumulation`` micro batches (each <= ``micro_batch``; the
        same count on every rank, so the gradient collectives stay in step; a 0 is a pass that
        only keeps them in step)."""
        q, r = divmod(self.share(rank), self.accumulation)
        return [q + (1 if i < r else 0) for i in range(self.accumulation)]

    def __str__(self) -> str:
        if self.even:
            text = (
                f"global batch {self.global_batch} = micro batch {self.micro_batch} x {self.world_size} ranks"
                f" x {self.accumulation} accumulation steps"
            )
        else:
            text = (
                f"global batch {self.global_batch} = {self.share(0)} or {self.share(self.world_size - 1)} samples"
                f" on each of {self.world_size} ranks, micro batch <= {self.micro_batch}"
                f" x {self.accumulation} accumulation steps"
            )
        if self.micro_batch != self.requested_micro_batch:
            text += f" (micro batch lowered from {self.requested_micro_batch} to divide the global batch)"
        return text

    def change_from(self, old: BatchPlan) -> str:
        """One line: what a resume from ``old`` keeps and what it recomputes."""
        if (old.world_size, old.micro_batch, old.global_batch) == (
            self.world_size,
            self.micro_batch,
            self.global_batch,
        ):
            return f"batch plan unchanged: {self}"
        if old.global_batch != self.global_batch:
            return f"global batch {old.global_batch} -> {self.global_batch} (not kept): {self}"
        return (
            f"global batch {self.global_batch} kept; world size {old.world_size} -> {self.world_size}, "
            f"micro batch {old.micro_batch} -> {self.micro_batch}, accumulation {old.accumulation} -> "
            f"{self.accumulation}"
        )


def batch_plan(*, global_batch: int, micro_batch: int, world_size: int, uneven: bool = False) -> BatchPlan:
    """Split ``global_batch`` over ``world_size`` ranks: the largest micro batch <= ``micro_batch``
    such that ``micro x world`` divides the global batch; the rest is accumulation.

    With ``uneven`` a global batch that is no multiple of the world size is split as evenly as
    it goes (ranks differ by one sample) instead of refused; it must still be >= the world size.
    """
    for name, value in (("global_batch", global_batch), ("micro_batch", micro_batch), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadInputError(f"{name} must be a whole number >= 1, got {value!r}", field=name)
    if global_batch % world_size and not (uneven and global_batch >= world_size):
        hint = f"choose a global batch that is a multiple of {world_size}, or another number of ranks"
        if uneven:
            hint = f"choose a global batch of at least {world_size} (one sample per rank), or fewer ranks"
        raise BadInputError(
            f"the global batch {global_batch} cannot be split over {world_size} ranks", field="global_batch", hint=hint
        )
    if global_batch % world_size:
        most = -(-global_batch // world_size)
        micro = min(micro_batch, most)
        return BatchPlan(global_batch, micro, world_size, -(-most // micro), micro_batch)
    per_rank = global_batch // world_size
    micro = min(micro_batch, per_rank)
    while per_rank % micro:
        micro -= 1
    return BatchPlan(global_batch, micro, world_size, per_rank // micro, micro_batch)
