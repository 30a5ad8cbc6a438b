"""What GPU time costs: price tables, estimates, live meters and budget caps.

Everything here is a pure function of its inputs (a price table, a spec, run intervals,
``now``) except :mod:`._record` (``cost.json``) and :class:`CostService`, which binds the
functions to one :class:`~jupyter_starverse._settings.Settings`. Money rules: see
:mod:`._money` (Decimal, per-second billing rounded up, one ``ROUND_HALF_UP`` at the end).
"""

from __future__ import annotations

from ._cap import (
    BUDGET_REASON_PREFIX,
    CapDecision,
    budget_reason,
    cap_env,
    check_budget,
    check_budget_covers,
    hard_budget_reason,
    job_rate_per_second,
)
from ._estimate import SPOT_NOTE, Comparison, Estimate, Resources, compare, estimate
from ._meter import Cost, IntervalLike, NodeCost, NodeInterval, burn_rate, check_priced, intervals_of, job_cost
from ._mixed import (
    THROUGHPUT,
    GpuThroughput,
    MixedOption,
    MixedPlan,
    MixedStage,
    mixed_stages,
    parse_pools,
    plan_mixed,
)
from ._money import MAX_SECONDS, billable_seconds, parse_duration, parse_money
from ._prices import GpuPrice, Package, PriceTable, load_price_table, parse_price_table
from ._record import COST_FILE, CostRecord, UserTotal, budget_stop_reason, read_cost, user_total, write_cost
from ._service import CostService, Preview

__all__ = [
    "budget_stop_reason",
    "BUDGET_REASON_PREFIX",
    "COST_FILE",
    "MAX_SECONDS",
    "SPOT_NOTE",
    "CapDecision",
    "Comparison",
    "Cost",
    "CostRecord",
    "CostService",
    "Estimate",
    "GpuPrice",
    "GpuThroughput",
    "MixedOption",
    "MixedPlan",
    "THROUGHPUT",
    "IntervalLike",
    "NodeCost",
    "NodeInterval",
    "Package",
    "Preview",
    "PriceTable",
    "Resources",
    "UserTotal",
    "billable_seconds",
    "budget_reason",
    "burn_rate",
    "cap_env",
    "check_budget",
    "check_budget_covers",
    "check_priced",
    "compare",
    "estimate",
    "hard_budget_reason",
    "intervals_of",
    "job_cost",
    "job_rate_per_second",
    "load_price_table",
    "parse_duration",
    "parse_money",
    "parse_pools",
    "parse_price_table",
    "plan_mixed",
    "MixedStage",
    "mixed_stages",
    "read_cost",
    "user_total",
    "write_cost",
]
