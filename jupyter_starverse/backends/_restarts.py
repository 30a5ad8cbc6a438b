"""The restart contract every backend keeps (local supervisor, Kubernetes, Slurm).

One *attempt* is one launch of every node. A preemption (a SIGTERM nobody asked for, a
disruption, a lost node) ends the attempt after the ranks checkpointed: they exit
:data:`PREEMPT_EXIT` when the launcher exports ``STARVERSE_PREEMPT_EXIT``. The whole group is
then relaunched from the newest checkpoint, up to :data:`PREEMPT_RESTARTS` times; a failure of
the script itself is relaunched up to ``JobSpec.max_restarts`` times. torchrun never restarts
on its own (``--max-restarts=0``): whoever relaunches keeps the budgets.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from decimal import Decimal

from jupyter_starverse.experiments import RunEvent, RunPaths, latest_checkpoint, read_metrics

__all__ = ["PREEMPT_EXIT", "PREEMPT_RESTARTS", "USAGE_EXIT", "RestartBudget", "archive_attempt", "lost_work"]

#: Exit code of a rank that stopped on SIGTERM after its checkpoint (128 + SIGTERM).
PREEMPT_EXIT = 143
#: Relaunches after preemptions and lost processes or nodes, unless the backend says otherwise.
PREEMPT_RESTARTS = 3
#: Exit code of a usage error (bad arguments): relaunching cannot help.
USAGE_EXIT = 2


@dataclass(frozen=True)
class RestartBudget:
    """Relaunches used so far, and whether one more is allowed for an attempt that ended ``kind``."""

    preemptions: int = 0
    failures: int = 0

    @property
    def restarts(self) -> int:
        return self.preemptions + self.failures

    def allows(self, kind: str, *, max_restarts: int, preempt_restarts: int = PREEMPT_RESTARTS) -> bool:
        """``kind`` is ``preempted`` (or ``lost``) or ``failed``; a usage error never restarts."""
        if kind in ("preempted", "lost"):
            return self.preemptions < preempt_restarts
        if kind == "failed":
            return self.failures < max_restarts
        return False

    def after(self, kind: str) -> RestartBudget:
        if kind in ("preempted", "lost"):
            return RestartBudget(self.preemptions + 1, self.failures)
        return RestartBudget(self.preemptions, self.failures + 1)

    def limit_text(self, kind: str, *, max_restarts: int, preempt_restarts: int = PREEMPT_RESTARTS) -> str:
        if kind in ("preempted", "lost"):
            return f"preemption budget {self.preemptions}/{preempt_restarts} used"
        return f"max_restarts={max_restarts} used"


def lost_work(
    run: RunPaths, *, attempt: int, started: float, when: float, per_second: Decimal | None, currency: str | None
) -> RunEvent:
    """What a resume redoes: steps run after the newest checkpoint, and their money (no cause yet)."""
    ckpt = latest_checkpoint(run)
    last: int | None = None
    for p in read_metrics(run.root, from_logs=False):
        if p.time is None or p.time >= started:
            last = p.step if last is None else max(last, p.step)
    ckpt_step = ckpt.step if ckpt is not None else None
    steps = None
    if last is not None:
        steps = max(0, last - (ckpt_step if ckpt_step is not None else -1))
    money = None
    if per_second is not None:
        since = max(started, ckpt.time if ckpt is not None and ckpt.time else started)
        seconds = max(0.0, when - since) if steps else 0.0
        money = format((per_second * Decimal(repr(seconds))).quantize(Decimal("0.0001")), "f")
    return RunEvent(
        attempt=attempt,
        time=when,
        kind="",
        cause="",
        checkpoint_step=ckpt_step,
        last_step=last,
        steps_lost=steps,
        money_lost=money,
        currency=currency,
    )


def archive_attempt(run: RunPaths, attempt: int) -> None:
    """Move the attempt's ``errors/rank*.json`` and ``stops/rank*.json`` into ``attempt-N/`` folders."""
    for folder in (run.errors, run.stops):
        if not folder.is_dir():
            continue
        target = run.attempt_dir(folder, attempt)
        for f in folder.glob("rank*.json"):
            target.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                f.replace(target / f.name)
