"""The live meter: what a job has cost so far, from the time each node really ran.

A node is billed from the moment it started running until it finished (or ``now`` while it
runs); pending time is free. Each interval is taken to the microsecond and rounded up to
whole seconds (each started second is billed), then
``cost = rate x units per node x seconds / 3600`` summed over nodes and rounded once
(see :mod:`._money`). Package billing buys whole packages per unit and node as the node's
time crosses each package boundary. Spot is metered at the high end of the spot range,
an upper bound, because the price actually paid is only known from the provider's bill.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any, Protocol

from jupyter_starverse._format import format_money
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import Job, JobSpec

from ._estimate import check_billing
from ._html import line_html
from ._money import (
    _CTX,
    MAX_SECONDS,
    SECONDS_PER_HOUR,
    billable_seconds,
    fmt_money,
    fmt_seconds,
    money_for,
    parse_money,
)
from ._prices import PACKAGE_BILLINGS, PriceTable

__all__ = [
    "Cost",
    "IntervalLike",
    "NodeCost",
    "NodeInterval",
    "burn_rate",
    "check_priced",
    "intervals_of",
    "job_cost",
    "unit_rate",
    "units_per_node",
]


class IntervalLike(Protocol):
    """Anything with ``node``, ``start``, ``end`` (``experiments`` status intervals qualify)."""

    @property
    def node(self) -> int: ...
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float | None: ...


@dataclass(frozen=True)
class NodeInterval:
    """Node ``node`` ran from ``start`` to ``end`` (epoch seconds; ``None`` = still running)."""

    node: int
    start: float
    end: float | None = None


@dataclass(frozen=True)
class NodeCost:
    """Billed seconds of one node (summed over its intervals), and packages bought per unit."""

    node: int
    seconds: int
    running: bool
    packages: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "seconds": self.seconds, "running": self.running, "packages": self.packages}


@dataclass(frozen=True)
class Cost:
    """What a job has cost up to ``as_of``; ``amount`` rounded to the currency's minor unit.

    ``rate`` is per unit-hour (card-hour for GPUs, node-hour for CPU) after any package
    discount; for spot it is the range's high end (``upper_bound`` is then True).
    """

    accelerator: str
    billing: str
    units_per_node: int
    rate: Decimal
    currency: str
    amount: Decimal
    nodes: tuple[NodeCost, ...]
    as_of: float
    budget: Decimal | None = None
    upper_bound: bool = False
    job_id: str | None = None
    user: str | None = None
    exact: Decimal | None = None  # the amount before rounding: caps compare this (sub-cent budgets)

    @property
    def exact_amount(self) -> Decimal:
        """The unrounded amount (``amount`` for records written before it was kept)."""
        return self.amount if self.exact is None else self.exact

    @property
    def running(self) -> bool:
        return any(n.running for n in self.nodes)

    @property
    def unit_seconds(self) -> int:
        """Card-seconds (GPU) or node-seconds (CPU) billed so far."""
        return sum(n.seconds for n in self.nodes) * self.units_per_node

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.exact_amount >= self.budget

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "user": self.user,
            "accelerator": self.accelerator,
            "billing": self.billing,
            "units_per_node": self.units_per_node,
            "rate": str(self.rate),
            "currency": self.currency,
            "amount": str(self.amount),
            "exact": str(self.exact) if self.exact is not None else None,
            "budget": str(self.budget) if self.budget is not None else None,
            "upper_bound": self.upper_bound,
            "as_of": self.as_of,
            "running": self.running,
            "unit_seconds": self.unit_seconds,
            "nodes": [n.to_json() for n in self.nodes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cost:
        """Inverse of :meth:`to_json`; a malformed record is a :class:`BadInputError`."""
        try:
            nodes = tuple(
                NodeCost(int(n["node"]), int(n["seconds"]), bool(n["running"]), n.get("packages"))
                for n in data["nodes"]
            )
            budget = data.get("budget")
            exact = data.get("exact")
            return cls(
                accelerator=str(data["accelerator"]),
                billing=str(data["billing"]),
                units_per_node=int(data["units_per_node"]),
                rate=parse_money(data["rate"], field="rate"),
                currency=str(data["currency"]),
                amount=parse_money(data["amount"], field="amount"),
                nodes=nodes,
                as_of=float(data["as_of"]),
                budget=parse_money(budget, field="budget") if budget is not None else None,
                upper_bound=bool(data.get("upper_bound", False)),
                job_id=data.get("job_id"),
                user=data.get("user"),
                exact=parse_money(exact, field="exact") if exact is not None else None,
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, BadInputError):
                raise
            raise BadInputError(
                f"cost record is malformed: {e!r}", field="cost", hint="delete cost.json; it is rewritten by the meter"
            ) from None

    @property
    def figure(self) -> str:
        return ("<= " if self.upper_bound else "") + fmt_money(self.amount, self.currency)

    def __str__(self) -> str:
        unit = "node" if self.accelerator == "cpu" else "card"
        spent = fmt_seconds(self.unit_seconds)
        rate = format_money(self.rate, self.currency)
        line = f"{self.figure} so far ({spent} {unit}-time, {self.billing} at {rate}/{unit}-h)"
        if self.budget is not None:
            line += f"; budget {fmt_money(self.budget, self.currency)}"
            if self.over_budget:
                line += " reached"
        return line

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        return line_html(self.figure, str(self).split(" so far", 1)[1].strip(" ;"))


def units_per_node(spec: JobSpec) -> int:
    """Cards per node for a GPU job, 1 (the node itself) for a CPU job."""
    return spec.procs_per_node if spec.is_gpu else 1


def unit_rate(spec: JobSpec, table: PriceTable) -> tuple[Decimal, bool]:
    """Price per unit-hour the meter uses for ``spec`` and whether it is an upper bound (spot)."""
    price = table.price(spec.accelerator)
    billing = check_billing(spec.billing)
    if billing in PACKAGE_BILLINGS:
        return price.on_demand * (1 - table.package(billing).discount), False
    if billing == "spot":
        if price.spot is None:
            raise BadInputError(
                f"the {table.source} price table has no spot price for {spec.accelerator}",
                field="billing",
                hint="add a spot range to the price file or run with another billing mode",
            )
        return price.spot[1], True
    return price.on_demand, False


def check_priced(spec: JobSpec, table: PriceTable) -> Decimal:
    """The rate the meter will use for ``spec``; :class:`BadInputError` when it cannot be priced.

    Backends call this before starting a job with a budget: a cap on an unpriced job
    could never be reached.
    """
    try:
        return unit_rate(spec, table)[0]
    except BadInputError as e:
        raise BadInputError(
            f"JobSpec.budget: the cap cannot be enforced: {e.message}", field="budget", hint=e.hint
        ) from None


def intervals_of(job: Job) -> list[NodeInterval]:
    """Running intervals of a backend's :class:`Job` (nodes that never started cost nothing)."""
    return [NodeInterval(n.index, n.started, n.finished) for n in job.nodes if n.started is not None]


def _node_seconds(iv: IntervalLike, now: float) -> tuple[int, bool]:
    end = now if iv.end is None else iv.end
    if iv.end is not None and iv.end < iv.start:
        raise BadInputError(
            f"node {iv.node} finished ({iv.end}) before it started ({iv.start})",
            field="node_intervals",
            hint="the job's recorded times are inconsistent; check the clocks of the nodes",
        )
    # A running node whose start lies after ``now`` (clock skew between machines) ran 0 s so far.
    elapsed = max(0.0, float(end) - float(iv.start))
    if not math.isfinite(elapsed) or elapsed > MAX_SECONDS:
        billable_seconds(Decimal(repr(elapsed)), field=f"node {iv.node} running time")  # raises the clear error
    # Epoch floats carry ~0.2 us of noise: take the interval to the microsecond (integers, exact
    # below 2**53 us), then bill every started second, so exactly 3600 s is never billed 3601 s.
    micros = round(elapsed * 1_000_000)
    return -(-micros // 1_000_000), iv.end is None


def job_cost(
    spec: JobSpec,
    node_intervals: Iterable[IntervalLike],
    table: PriceTable,
    *,
    now: float | None = None,
    job_id: str | None = None,
    user: str | None = None,
) -> Cost:
    """The cost of ``spec`` from the intervals its nodes really ran, as of ``now``.

    Parameters
    ----------
    spec
        The job (accelerator, ``procs_per_node``, billing, budget).
    node_intervals
        When each node ran; several intervals per node (restarts) are summed.
    table
        Prices in force.
    now
        End of still-running intervals (epoch seconds; default ``time.time()``).
    """
    now = time.time() if now is None else now
    rate, upper = unit_rate(spec, table)
    seconds_of: dict[int, int] = {}
    running_of: dict[int, bool] = {}
    for iv in node_intervals:
        seconds, running = _node_seconds(iv, now)
        seconds_of[iv.node] = seconds_of.get(iv.node, 0) + seconds
        running_of[iv.node] = running_of.get(iv.node, False) or running
    units = units_per_node(spec)
    nodes: list[NodeCost] = []
    billed_unit_seconds = 0
    for index in sorted(seconds_of):
        seconds, running = seconds_of[index], running_of[index]
        packages: int | None = None
        billed = seconds
        if spec.billing in PACKAGE_BILLINGS:
            size = table.package(spec.billing).seconds
            packages = max(1, -(-seconds // size))  # a started node has bought its first package
            billed = packages * size
        nodes.append(NodeCost(index, seconds, running, packages))
        billed_unit_seconds += billed * units
    amount = money_for(rate, billed_unit_seconds, table.decimals)
    with localcontext(_CTX):
        exact = (rate * billed_unit_seconds / SECONDS_PER_HOUR).normalize()
    return Cost(
        accelerator=spec.accelerator,
        billing=spec.billing,
        units_per_node=units,
        rate=rate,
        currency=table.currency,
        amount=amount,
        nodes=tuple(nodes),
        as_of=now,
        budget=spec.budget,
        upper_bound=upper,
        job_id=job_id,
        user=user,
        exact=exact,
    )


def burn_rate(cost: Cost) -> Decimal:
    """Money per hour the job spends now (running nodes x units x rate)."""
    running = sum(1 for n in cost.nodes if n.running)
    return cost.rate * running * cost.units_per_node
