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

__all__ = [
    "BUDGET_REASON_PREFIX",
    "CapDecision",
    "budget_reason",
    "cap_env",
    "check_budget",
    "check_budget_covers",
    "hard_budget_reason",
    "job_rate_per_second",
]

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
    hard_stop: bool = False  # the cap itself is (about to be) reached: kill now, no more grace

    def to_json(self) -> dict[str, Any]:
        return {
            "stop": self.stop,
            "cost": self.cost.to_json(),
            "projected": str(self.projected.amount),
            "budget": str(self.budget) if self.budget is not None else None,
            "remaining": str(self.remaining) if self.remaining is not None else None,
            "seconds_left": self.seconds_left,
            "reason": self.reason,
            "hard_stop": self.hard_stop,
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


def hard_budget_reason(cost: Cost, budget: Decimal, *, why: str) -> str:
    """The reason recorded when the cap had to kill the job (SIGKILL: no checkpoint on the way out)."""
    cap = fmt_money(budget, cost.currency)
    spent = f"{BUDGET_REASON_PREFIX}: {fmt_money(cost.amount, cost.currency)} spent of a {cap} cap"
    return spent + f"; hard stop (SIGKILL at the cap: {why})"


def job_rate_per_second(spec: JobSpec, table: PriceTable) -> Decimal:
    """What the whole job costs per second of running (every node and unit), exactly."""
    rate, _ = unit_rate(spec, table)
    with localcontext(_CTX):
        return rate * units_per_node(spec) * spec.nodes / SECONDS_PER_HOUR


def check_budget_covers(spec: JobSpec, table: PriceTable, *, startup_s: float, stop_margin_s: float) -> None:
    """Refuse a budget that runs out before the job could reach its first checkpoint.

    A capped job is stopped ``stop_margin_s`` seconds before its budget (poll interval plus
    the grace period a checkpoint may take); it needs ``startup_s`` seconds to start and
    train a first step. A budget smaller than both together would stop it before anything
    could be saved: :class:`BadInputError` with the figures.
    """
    if spec.budget is None:
        return
    per_second = job_rate_per_second(spec, table)
    if per_second <= 0 or spec.billing in PACKAGE_BILLINGS:
        return
    need_s = startup_s + stop_margin_s
    with localcontext(_CTX):
        need = per_second * Decimal(repr(need_s))
    if spec.budget >= need:
        return
    with localcontext(_CTX):  # only for a small budget: 1e9999999 / rate would overflow the context
        lasts = spec.budget / per_second
    cur = table.currency
    raise BadInputError(
        f"JobSpec.budget: {spec.budget} {cur} lasts {float(lasts):.1f} s at {per_second.normalize():f} {cur}/s, "
        f"less than the {need_s:.0f} s the job needs before its first checkpoint "
        f"({startup_s:.0f} s to start, {stop_margin_s:.0f} s of stop margin for the checkpoint)",
        field="budget",
        hint=f"give a budget of at least {need.quantize(Decimal('1e-6'), ROUND_CEILING).normalize():f} {cur}",
    )


def check_budget(
    spec: JobSpec,
    node_intervals: Iterable[IntervalLike],
    table: PriceTable,
    *,
    now: float,
    grace: float = 0.0,
    hard_lookahead: float | None = None,
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
    hard_lookahead
        Seconds a hard stop (SIGKILL) takes to show in the meter (poll interval, kill, the
        started second); ``hard_stop`` is set when the cost at ``now + hard_lookahead`` reaches
        the budget: the job must be killed now to stay within the cap.

    Costs are compared unrounded (a budget of 0.0005 trips), rounded only for display.
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
    stop = projected.exact_amount >= budget
    hard = False
    if hard_lookahead is not None:
        at = job_cost(spec, intervals, table, now=now + hard_lookahead, job_id=job_id, user=user)
        hard = at.exact_amount >= budget
    seconds_left: int | None = None
    rate = burn_rate(cost)
    if not stop and rate > 0 and spec.billing not in PACKAGE_BILLINGS:
        left = seconds_for(budget - cost.exact_amount, rate)
        seconds_left = None if left is None else max(0, left - math.ceil(grace))
    reason = budget_reason(cost, budget, projected=projected) if stop or hard else None
    return CapDecision(stop or hard, cost, projected, budget, remaining, seconds_left, reason, hard)


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
