"""What a job will cost before it runs, per billing mode and GPU type.

Billing modes (``JobSpec.billing``):

``on_demand``
    Per second: ``rate x units x billed seconds / 3600``; each started second is billed.
``daily`` / ``weekly``
    Whole packages per unit: ``ceil(seconds / package seconds)`` packages, each
    ``package hours x rate x (1 - discount)``. Unused package time is paid for and shown.
``spot``
    Per second at the spot range ``[low, high]``: the estimate is a range, with a note that
    the capacity can be reclaimed (the job is checkpointed on SIGTERM and resumed; the
    steps since the last checkpoint are paid twice).

Units are GPU cards (``nodes x procs_per_node``) for a GPU job, nodes for a CPU job.
Money follows the rules in :mod:`._money` (exact, rounded once, ``ROUND_HALF_UP``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import BILLING_MODES, JobSpec

from ._html import line_html, table_html
from ._money import DurationLike, billable_seconds, fmt_money, fmt_seconds, money_for
from ._prices import PACKAGE_BILLINGS, PriceTable

__all__ = ["SPOT_NOTE", "Comparison", "Estimate", "Resources", "check_billing", "compare", "estimate"]

SPOT_NOTE = (
    "spot capacity can be reclaimed at any time: the job gets SIGTERM, checkpoints and resumes "
    "when capacity returns; work since the last checkpoint is paid again"
)
_MAX_UNITS = 4096 * 64


def check_billing(billing: str) -> str:
    """``billing`` if it is a known mode, else :class:`BadInputError` listing them."""
    if billing not in BILLING_MODES:
        raise BadInputError(
            f"unknown billing mode {billing!r}", field="billing", hint=f"use one of: {', '.join(BILLING_MODES)}"
        )
    return billing


@dataclass(frozen=True)
class Resources:
    """What is rented: ``count`` GPU cards of ``accelerator``, or ``count`` CPU nodes."""

    accelerator: str
    count: int

    def __post_init__(self) -> None:
        acc = str(self.accelerator).strip().lower()
        if not acc:
            raise BadInputError(
                "accelerator is empty", field="accelerator", hint="give a GPU type such as rtx4090, or cpu"
            )
        object.__setattr__(self, "accelerator", acc)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or not 1 <= self.count <= _MAX_UNITS:
            raise BadInputError(
                f"{self.unit} count must be a whole number from 1 to {_MAX_UNITS}, got {self.count!r}", field="cards"
            )

    @property
    def unit(self) -> str:
        """``card`` for GPUs, ``node`` for CPU."""
        return "node" if self.accelerator == "cpu" else "card"

    @classmethod
    def of(cls, job: JobSpec | Resources) -> Resources:
        """Cards (``nodes x procs_per_node``) of a GPU spec, nodes of a CPU spec."""
        if isinstance(job, Resources):
            return job
        if isinstance(job, JobSpec):
            return cls(job.accelerator, job.world_size if job.is_gpu else job.nodes)
        raise BadInputError(
            f"cannot price {type(job).__name__}", hint="pass a JobSpec or Resources(accelerator, count)"
        )

    def __str__(self) -> str:
        return f"{self.count} x {'CPU node' if self.unit == 'node' else self.accelerator}"


@dataclass(frozen=True)
class Estimate:
    """Price of running ``resources`` for ``seconds`` under ``billing``.

    ``low == high`` except for spot. ``rate_low``/``rate_high`` are per unit-hour after any
    package discount. ``packages`` is the number of packages bought per unit (package modes).
    """

    resources: Resources
    billing: str
    seconds: int
    billed_seconds: int
    rate_low: Decimal
    rate_high: Decimal
    low: Decimal
    high: Decimal
    currency: str
    packages: int | None = None
    note: str = ""

    @property
    def amount(self) -> Decimal:
        """The figure to plan with: the upper bound (equal to ``low`` outside spot)."""
        return self.high

    @property
    def is_range(self) -> bool:
        return self.low != self.high

    def fits(self, budget: Decimal | None) -> bool:
        """True when even the upper bound stays within ``budget`` (or there is no budget)."""
        return budget is None or self.high <= budget

    def to_json(self) -> dict[str, Any]:
        return {
            "accelerator": self.resources.accelerator,
            "count": self.resources.count,
            "unit": self.resources.unit,
            "billing": self.billing,
            "seconds": self.seconds,
            "billed_seconds": self.billed_seconds,
            "rate_low": str(self.rate_low),
            "rate_high": str(self.rate_high),
            "low": str(self.low),
            "high": str(self.high),
            "amount": str(self.amount),
            "currency": self.currency,
            "packages": self.packages,
            "note": self.note,
        }

    @property
    def figure(self) -> str:
        """``230.40 CNY`` or ``51.20 - 153.60 CNY``."""
        if self.is_range:
            return f"{self.low:,} - {fmt_money(self.high, self.currency)}"
        return fmt_money(self.high, self.currency)

    def _repr_html_(self) -> str:
        return line_html(self.figure, f"for {self.resources}, {fmt_seconds(self.seconds)}, {self.billing}", self.note)

    def __str__(self) -> str:
        head = f"{self.resources} for {fmt_seconds(self.seconds)}, {self.billing}: estimated {self.figure}"
        return f"{head}\n  {self.note}" if self.note else head

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def estimate(
    job: JobSpec | Resources,
    duration: DurationLike,
    billing: str | None = None,
    *,
    table: PriceTable,
) -> Estimate:
    """Price ``job`` running for ``duration``.

    Parameters
    ----------
    job
        A :class:`JobSpec` (its accelerator, cards and billing are used) or :class:`Resources`.
    duration
        Seconds, a ``timedelta`` or text such as ``"4h"``; rounded up to whole seconds.
    billing
        ``on_demand``, ``daily``, ``weekly`` or ``spot``; default: the spec's billing
        (``on_demand`` for :class:`Resources`).
    table
        The price table in force.

    Raises
    ------
    BadInputError
        Unknown GPU type or billing mode, a mode the table does not sell, a duration that
        is not positive or longer than a year.
    """
    res = Resources.of(job)
    mode = check_billing(billing or (job.billing if isinstance(job, JobSpec) else "on_demand"))
    seconds = billable_seconds(duration)
    price = table.price(res.accelerator)
    if mode in PACKAGE_BILLINGS:
        pkg = table.package(mode)
        count = -(-seconds // pkg.seconds)  # ceil
        rate = price.on_demand * (1 - pkg.discount)
        billed = count * pkg.seconds
        amount = money_for(rate, billed * res.count, table.decimals)
        unused = billed - seconds
        note = f"{count} {mode} package(s) of {pkg.hours}h per {res.unit} at {pkg.discount * 100:.0f}% off" + (
            f"; {fmt_seconds(unused)} of them unused" if unused else ""
        )
        return Estimate(res, mode, seconds, billed, rate, rate, amount, amount, table.currency, count, note)
    if mode == "spot":
        if price.spot is None:
            raise BadInputError(
                f"the {table.source} price table has no spot price for {res.accelerator}",
                field="billing",
                hint="choose on_demand, daily or weekly, or add a spot range to the price file",
            )
        lo_rate, hi_rate = price.spot
        low = money_for(lo_rate, seconds * res.count, table.decimals)
        high = money_for(hi_rate, seconds * res.count, table.decimals)
        return Estimate(res, mode, seconds, seconds, lo_rate, hi_rate, low, high, table.currency, None, SPOT_NOTE)
    amount = money_for(price.on_demand, seconds * res.count, table.decimals)
    rate = price.on_demand
    return Estimate(res, mode, seconds, seconds, rate, rate, amount, amount, table.currency, None, "billed per second")


@dataclass(frozen=True)
class Comparison:
    """The same job priced under several billing modes and GPU types, cheapest named.

    ``cheapest`` is the row with the lowest upper bound (a spot range counts by its high
    end, since its low end is not guaranteed); ties keep the first row. ``skipped`` says why
    a combination is missing (for example no spot price for that type): never a 0.
    """

    seconds: int
    currency: str
    rows: tuple[Estimate, ...]
    skipped: tuple[str, ...] = ()

    @property
    def cheapest(self) -> Estimate:
        return min(self.rows, key=lambda e: e.high)

    def to_json(self) -> dict[str, Any]:
        best = self.cheapest
        return {
            "seconds": self.seconds,
            "currency": self.currency,
            "rows": [r.to_json() for r in self.rows],
            "cheapest": {"accelerator": best.resources.accelerator, "billing": best.billing, "amount": str(best.high)},
            "skipped": list(self.skipped),
        }

    def _repr_html_(self) -> str:
        best = self.cheapest
        rows = [(r.resources.accelerator, str(r.resources.count), r.billing, r.figure) for r in self.rows]
        caption = f"for {fmt_seconds(self.seconds)}; cheapest in bold: {best.resources} {best.billing}"
        if self.skipped:
            caption += "; not priced: " + ", ".join(self.skipped)
        return table_html(("type", "count", "billing", "cost"), rows, mark=self.rows.index(best), caption=caption)

    def __str__(self) -> str:
        best = self.cheapest
        table = [("type", "count", "billing", "cost", "")]
        for r in self.rows:
            mark = "<- cheapest" if r is best else ""
            table.append((r.resources.accelerator, str(r.resources.count), r.billing, r.figure, mark))
        widths = [max(len(row[i]) for row in table) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in table]
        lines.append(f"for {fmt_seconds(self.seconds)}; cheapest: {best.resources} {best.billing}, {best.figure}")
        lines.extend(f"not priced: {s}" for s in self.skipped)
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def compare(
    job: JobSpec | Resources,
    duration: DurationLike,
    *,
    table: PriceTable,
    billings: Sequence[str] | None = None,
    accelerators: Iterable[str] | None = None,
) -> Comparison:
    """Price ``job`` under every billing mode (default: all four) and each GPU type given.

    With ``accelerators`` the same number of cards is priced on each type (``"all"`` is not
    special here: pass ``table.gpus``). A combination the table does not sell is listed in
    ``skipped``; an unknown GPU type or billing mode given explicitly is still an error.
    """
    res = Resources.of(job)
    modes = [check_billing(b) for b in (billings or BILLING_MODES)]
    types = [str(a).strip().lower() for a in (accelerators or [res.accelerator])]
    for acc in types:
        table.price(acc)  # unknown type: error now, not a silent gap
    seconds = billable_seconds(duration)
    rows: list[Estimate] = []
    skipped: list[str] = []
    for acc in types:
        for mode in modes:
            priced = Resources(acc, res.count)
            if mode == "spot" and table.price(acc).spot is None:
                skipped.append(f"{acc} spot (no spot price)")
                continue
            if mode in PACKAGE_BILLINGS and mode not in table.packages:
                skipped.append(f"{acc} {mode} (package not sold)")
                continue
            rows.append(estimate(priced, seconds, mode, table=table))
    if not rows:
        raise BadInputError("nothing to compare: the price table sells none of these combinations", field="billing")
    return Comparison(seconds, table.currency, tuple(rows), tuple(skipped))
