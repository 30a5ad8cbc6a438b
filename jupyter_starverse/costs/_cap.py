"""Budget cap: when must a job stop so that its bill stays within ``JobSpec.budget``.

The rule (pure, no clock of its own): a job must stop when its metered cost at
``now + grace`` reaches the budget (``cost >= budget``). With ``grace = 0`` this is
exactly "the meter reached the cap". A supervisor that polls every ``p`` seconds and
gives the job ``g`` seconds to checkpoint passes ``grace = p + g`` so the final bill,
checkpoint included, stays within the cap. Package billing is covered by the same rule:
the cost jumps when a node buys its next package, so the job stops ``grace`` seconds
before that purchase rather than after it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.launch._spec import JobSpec

from ._meter import Cost, IntervalLike, burn_rate, job_cost
from ._money import MAX_SECONDS, fmt_money, seconds_for
from ._prices import PACKAGE_BILLINGS, PriceTable

__all__ = ["BUDGET_REASON_PREFIX", "CapDecision", "budget_reason", "check_budget"]

#: Every reason recorded for a budget stop starts with this (front doors match on it).
BUDGET_REASON_PREFIX = "budget reached"


@dataclass(frozen=True)
class CapDecision:
    """Whether to stop now, and how much money and time are left.

    ``seconds_left`` is the time until the cap at the current burn rate (per-second billing
    only; ``None`` without a budget, with nothing running, or for packages, where the next
    check is simply the next poll).
    """

    stop: bool
    cost: Cost
    projected: Cost
    budget: Decimal | None
    remaining: Decimal | None
    seconds_left: int | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "stop": self.stop,
            "cost": self.cost.to_json(),
            "projected": str(self.projected.amount),
            "budget": str(self.budget) if self.budget is not None else None,
            "remaining": str(self.remaining) if self.remaining is not None else None,
            "seconds_left": self.seconds_left,
            "reason": self.reason,
        }


def budget_reason(cost: Cost, budget: Decimal, *, projected: Cost | None = None) -> str:
    """The reason recorded in the experiment folder when the cap stops a job.

    ``projected`` is the cost by the time the job can have stopped (``now + grace``);
    it is mentioned when it differs from what was spent at the decision.
    """
    cap = fmt_money(budget, cost.currency)
    spent = f"{BUDGET_REASON_PREFIX}: {fmt_money(cost.amount, cost.currency)} spent of a {cap} cap"
    if projected is not None and projected.amount != cost.amount:
        spent += f" ({fmt_money(projected.amount, cost.currency)} by the time it can stop)"
    return spent + "; stopped gracefully (SIGTERM: the job checkpoints first)"


def check_budget(
    spec: JobSpec,
    node_intervals: Iterable[IntervalLike],
    table: PriceTable,
    *,
    now: float,
    grace: float = 0.0,
    job_id: str | None = None,
    user: str | None = None,
) -> CapDecision:
    """Decide whether ``spec`` must stop now.

    Parameters
    ----------
    spec
        The job; ``spec.budget`` is the cap (``None``: never stop).
    node_intervals
        When each node ran (see :func:`job_cost`).
    table
        Prices in force.
    now
        The current time (epoch seconds).
    grace
        Seconds of running still to come before a stop takes effect (poll interval plus
        checkpoint time); the decision is taken on the cost at ``now + grace``.
    """
    if grace < 0 or grace > MAX_SECONDS:
        raise BadInputError(f"grace must be between 0 and {MAX_SECONDS} seconds, got {grace}", field="grace")
    intervals = list(node_intervals)
    cost = job_cost(spec, intervals, table, now=now, job_id=job_id, user=user)
    projected = job_cost(spec, intervals, table, now=now + grace, job_id=job_id, user=user) if grace else cost
    budget = spec.budget
    if budget is None:
        return CapDecision(False, cost, projected, None, None, None, None)
    remaining = budget - cost.amount
    stop = projected.amount >= budget
    seconds_left: int | None = None
    rate = burn_rate(cost)
    if not stop and rate > 0 and spec.billing not in PACKAGE_BILLINGS:
        left = seconds_for(budget - cost.amount, rate)
        seconds_left = None if left is None else max(0, left - math.ceil(grace))
    reason = budget_reason(cost, budget, projected=projected) if stop else None
    return CapDecision(stop, cost, projected, budget, remaining, seconds_left, reason)
