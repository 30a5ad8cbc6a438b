"""The global batch of a template script, kept across resumes onto another world size.

The first run fixes the global batch (``--global-batch``, else micro batch x data-parallel
ranks); every checkpoint records the plan (``meta.json`` ``batch``); a resume reads it back
and recomputes only the split and the accumulation (:func:`jupyter_starverse.experiments.batch_plan`,
the plan the recipes use), so the run sees as many samples per optimizer step as before.
"""

from __future__ import annotations

from jupyter_starverse.experiments import BatchPlan, batch_plan, read_json

from ._checkpoint import find_resume_checkpoint

__all__ = ["keep_global_batch"]


def keep_global_batch(*, micro_batch: int, world_size: int, global_batch: int | None = None) -> BatchPlan:
    """The batch plan of this run over ``world_size`` data-parallel ranks, printed once.

    On a resume the global batch is the checkpoint's (``global_batch`` is then ignored, and
    said so when it differs); otherwise ``global_batch`` or ``micro_batch x world_size``.
    """
    from ._dist import init

    found = find_resume_checkpoint()
    old = None
    if found is not None:
        try:
            old = BatchPlan.from_json(read_json(found.path / "meta.json").get("batch"))
        except (OSError, ValueError, AttributeError):
            old = None
    wanted = global_batch or micro_batch * world_size
    total = old.global_batch if old is not None else wanted
    plan = batch_plan(global_batch=total, micro_batch=micro_batch, world_size=world_size, uneven=True)
    if init().is_main:
        if old is None:
            print(f"batch plan: {plan}", flush=True)
        else:
            print(f"batch plan on resume: {plan.change_from(old)}", flush=True)
            if global_batch and global_batch != total:
                print(f"--global-batch {global_batch} ignored: the run keeps the global batch {total}", flush=True)
    return plan
