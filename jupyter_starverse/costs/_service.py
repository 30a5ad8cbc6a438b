"""``client.costs``: the cost functions bound to one :class:`Settings` (prices, experiments, user)."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from jupyter_starverse._format import format_money, format_price_per_hour
from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import Job, JobSpec

from ._cap import CapDecision, check_budget
from ._estimate import Comparison, Estimate, Resources, check_billing, compare, estimate
from ._html import line_html
from ._meter import Cost, IntervalLike, intervals_of, job_cost
from ._mixed import MixedPlan, parse_pools, plan_mixed
from ._money import DurationLike, fmt_money, fmt_seconds, round_money, seconds_for
from ._prices import PACKAGE_BILLINGS, PriceTable, load_price_table
from ._record import CostRecord, UserTotal, read_cost, user_total, write_cost

__all__ = ["CostService", "Preview"]


@dataclass(frozen=True)
class Preview:
    """What a launch will cost, shown before it starts: the hourly burn, an estimate, the cap.

    ``budget_lasts`` is how long the budget pays for the job at the upper rate (seconds;
    per-second billing only). ``minimum`` is the first package every unit buys (packages).
    """

    resources: Resources
    billing: str
    currency: str
    per_hour_low: Decimal
    per_hour_high: Decimal
    budget: Decimal | None
    budget_lasts: int | None
    minimum: Decimal | None
    estimate: Estimate | None
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "accelerator": self.resources.accelerator,
            "count": self.resources.count,
            "unit": self.resources.unit,
            "billing": self.billing,
            "currency": self.currency,
            "per_hour_low": str(self.per_hour_low),
            "per_hour_high": str(self.per_hour_high),
            "budget": str(self.budget) if self.budget is not None else None,
            "budget_lasts": self.budget_lasts,
            "minimum": str(self.minimum) if self.minimum is not None else None,
            "estimate": self.estimate.to_json() if self.estimate else None,
            "warning": self.warning,
        }

    def __str__(self) -> str:
        rate = (
            f"{format_money(self.per_hour_low)} - {format_price_per_hour(self.per_hour_high, self.currency)}"
            if self.per_hour_low != self.per_hour_high
            else format_price_per_hour(self.per_hour_high, self.currency)
        )
        parts = [f"{self.resources}, {self.billing}: {rate}"]
        if self.minimum is not None:
            parts.append(f"at least {fmt_money(self.minimum, self.currency)} (first package)")
        if self.estimate is not None:
            parts.append(f"estimated {self.estimate.figure} for {fmt_seconds(self.estimate.seconds)}")
        if self.budget is not None:
            lasts = f", lasts about {fmt_seconds(self.budget_lasts)}" if self.budget_lasts is not None else ""
            parts.append(f"budget {fmt_money(self.budget, self.currency)}{lasts}")
        text = "; ".join(parts)
        return f"{text}\n  warning: {self.warning}" if self.warning else text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        head, _, rest = str(self).partition(": ")
        return line_html(head, rest.split("\n")[0], f"warning: {self.warning}" if self.warning else "")


def _warning(
    budget: Decimal | None, minimum: Decimal | None, est: Estimate | None, lasts: int | None, currency: str
) -> str | None:
    """Say before launch when the budget will stop the job (or stop it at once)."""
    if budget is None:
        return None
    if minimum is not None and minimum >= budget:
        first, cap = fmt_money(minimum, currency), fmt_money(budget, currency)
        return f"the first package costs {first}, at or above the {cap} budget: the job would be stopped at once"
    if est is not None and not est.fits(budget):
        when = f" after about {fmt_seconds(lasts)}" if lasts is not None else " before it finishes"
        return (
            f"the estimate {est.figure} exceeds the {fmt_money(budget, currency)} budget: the job will be stopped{when}"
        )
    return None


class CostService:
    """Estimates, comparisons, meters, records and caps with the settings' prices.

    Parameters
    ----------
    settings
        Where the price table (``prices_file``, ``currency``), experiments and user come from.
    table
        A price table to use instead of loading one (tests, the server's traitlets).
    """

    def __init__(self, settings: Settings, *, table: PriceTable | None = None) -> None:
        self.settings = settings
        self._table = table

    @functools.cached_property
    def prices(self) -> PriceTable:
        """The price table in force."""
        return self._table if self._table is not None else load_price_table(self.settings)

    def estimate(self, job: JobSpec | Resources, duration: DurationLike, billing: str | None = None) -> Estimate:
        """See :func:`jupyter_starverse.costs.estimate`."""
        return estimate(job, duration, billing, table=self.prices)

    def compare(
        self,
        job: JobSpec | Resources,
        duration: DurationLike,
        *,
        billings: Sequence[str] | None = None,
        accelerators: Sequence[str] | None = None,
    ) -> Comparison:
        """See :func:`jupyter_starverse.costs.compare`; ``accelerators=["all"]`` means every GPU type."""
        if accelerators is not None and list(accelerators) == ["all"]:
            accelerators = sorted(self.prices.gpus)
        return compare(job, duration, table=self.prices, billings=billings, accelerators=accelerators)

    def mixed(self, pools: str | Sequence[str], duration: DurationLike, billing: str = "on_demand") -> MixedPlan:
        """A plan across GPU types (``rtx4090:256,a100-80g:128``): see :func:`jupyter_starverse.costs.plan_mixed`."""
        return plan_mixed(parse_pools(list(pools) if not isinstance(pools, str) else pools), duration, billing,
                          table=self.prices)  # fmt: skip

    def preview(self, spec: JobSpec, duration: DurationLike | None = None) -> Preview:
        """The figures to show before ``spec`` is launched (duration optional)."""
        res = Resources.of(spec)
        billing = check_billing(spec.billing)
        price = self.prices.price(res.accelerator)
        minimum: Decimal | None = None
        if billing in PACKAGE_BILLINGS:
            pkg = self.prices.package(billing)
            low = high = price.on_demand * (1 - pkg.discount) * res.count
            minimum = round_money(low * pkg.hours, self.prices.decimals)
        elif billing == "spot":
            est = estimate(res, 3600, "spot", table=self.prices)  # raises when spot is not sold
            low, high = est.rate_low * res.count, est.rate_high * res.count
        else:
            low = high = price.on_demand * res.count
        lasts: int | None = None
        if spec.budget is not None and billing not in PACKAGE_BILLINGS and high > 0:
            lasts = seconds_for(spec.budget, high)
        est_for = estimate(res, duration, billing, table=self.prices) if duration is not None else None
        warning = _warning(spec.budget, minimum, est_for, lasts, self.prices.currency)
        return Preview(res, billing, self.prices.currency, low, high, spec.budget, lasts, minimum, est_for, warning)

    def preview_or_reason(self, spec: JobSpec, duration: DurationLike | None = None) -> Preview | str:
        """:meth:`preview`, or a sentence saying why the job cannot be priced (never a 0)."""
        try:
            return self.preview(spec, duration)
        except BadInputError as e:
            return f"not priced: {e}"

    # -- running jobs --------------------------------------------------------------
    def _run_dir(self, job: Job) -> Path:
        folder = Path(job.experiment_dir).resolve()
        root = Path(self.settings.experiments).resolve()
        if root != folder and root not in folder.parents:
            raise BadInputError(
                f"job {job.id} keeps its files outside the experiments folder ({folder})",
                field="experiment_dir",
                hint="costs are only recorded under STARVERSE_EXPERIMENTS",
            )
        return folder

    def intervals(self, job: Job) -> list[IntervalLike]:
        """Every run interval of every node: from ``status.json`` (all launches) or the job's nodes."""
        from jupyter_starverse.experiments._status import node_intervals, read_status

        try:
            status = read_status(Path(job.experiment_dir))
        except (OSError, ValueError, KeyError, TypeError):
            status = None
        if status is not None and any(n.launches for n in status.nodes):
            return list(node_intervals(status))
        return list(intervals_of(job))

    def meter(self, job: Job, *, now: float | None = None) -> Cost:
        """What ``job`` has cost so far (nothing is written)."""
        return job_cost(
            job.spec,
            self.intervals(job),
            self.prices,
            now=time.time() if now is None else now,
            job_id=job.id,
            user=self.settings.user,
        )

    def record(self, job: Job, *, now: float | None = None, reason: str | None = None) -> CostRecord:
        """Meter ``job`` and write ``cost.json`` into its run folder."""
        return write_cost(self._run_dir(job), self.meter(job, now=now), reason=reason)

    def recorded(self, job: Job) -> CostRecord | None:
        """The last ``cost.json`` of ``job``, or ``None`` if it was never metered."""
        try:
            return read_cost(self._run_dir(job))
        except FileNotFoundError:
            return None

    def check(self, job: Job, *, now: float | None = None, grace: float = 0.0) -> CapDecision:
        """Budget decision for ``job`` (see :func:`jupyter_starverse.costs.check_budget`)."""
        return check_budget(
            job.spec,
            self.intervals(job),
            self.prices,
            now=time.time() if now is None else now,
            grace=grace,
            job_id=job.id,
            user=self.settings.user,
        )

    def total(self, user: str | None = None) -> UserTotal:
        """What ``user`` (default: the settings' user) has spent over every experiment."""
        return user_total(self.settings.experiments, user or self.settings.user)
