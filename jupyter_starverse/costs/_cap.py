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

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, localcontext
from typing import Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

from ._meter import Cost, IntervalLike, burn_rate, check_priced, job_cost, unit_rate, units_per_node
from ._money import _CTX, MAX_SECONDS, SECONDS_PER_HOUR, fmt_money, seconds_for
from ._prices import PACKAGE_BILLINGS, PriceTable

__all__ = ["BUDGET_REASON_PREFIX", "CapDecision", "budget_reason", "cap_env", "check_budget"]

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


def budget_reason(
    cost: Cost, budget: Decimal, *, projected: Cost | None = None, how: str = "SIGTERM: the job checkpoints first"
) -> str:
    """The reason recorded in the experiment folder when the cap stops a job.

    ``projected`` is the cost by the time the job can have stopped (``now + grace``);
    it is mentioned when it differs from what was spent at the decision; ``how`` says
    how the job was stopped.
    """
    cap = fmt_money(budget, cost.currency)
    spent = f"{BUDGET_REASON_PREFIX}: {fmt_money(cost.amount, cost.currency)} spent of a {cap} cap"
    if projected is not None and projected.amount != cost.amount:
        spent += f" ({fmt_money(projected.amount, cost.currency)} by the time it can stop)"
    return spent + f"; stopped gracefully ({how})"


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


def cap_env(spec: JobSpec, table: PriceTable, *, user: str | None = None) -> dict[str, str]:
    """Environment that lets the job enforce its own cap (``runtime.steps`` reads it).

    For backends with no supervisor beside the job (Kubernetes). Empty without a budget.
    ``STARVERSE_COST_PER_SECOND`` is the whole job's rate (every node and card), rounded
    up; spot uses the high end of its range, so the cap is conservative.
    ``STARVERSE_COST_INFO`` describes the rate for the ``cost.json`` the job writes.
    """
    if spec.budget is None:
        return {}
    check_priced(spec, table)  # a cap on an unpriced job could never be reached
    rate, upper = unit_rate(spec, table)
    units = units_per_node(spec)
    with localcontext(_CTX):
        per_second = (rate * units * spec.nodes / SECONDS_PER_HOUR).quantize(Decimal("1e-12"), ROUND_CEILING)
    info = {
        "accelerator": spec.accelerator,
        "billing": spec.billing,
        "rate": str(rate),
        "units_per_node": units,
        "nodes": spec.nodes,
        "currency": table.currency,
        "decimals": table.decimals,
        "upper_bound": upper,
        "package_seconds": table.package(spec.billing).seconds if spec.billing in PACKAGE_BILLINGS else None,
        "user": user,
    }
    return {
        "STARVERSE_BUDGET": str(spec.budget),
        "STARVERSE_COST_PER_SECOND": format(per_second.normalize(), "f"),
        "STARVERSE_COST_INFO": json.dumps(info, sort_keys=True),
    }
