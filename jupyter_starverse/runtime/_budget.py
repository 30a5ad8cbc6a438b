"""The budget cap enforced inside the job, for backends with no supervisor beside it.

The Kubernetes backend exports ``STARVERSE_BUDGET``, ``STARVERSE_COST_PER_SECOND`` (the
whole job's rate) and ``STARVERSE_COST_INFO`` (see ``costs.cap_env``). Rank 0 meters
``rate x billed seconds`` from the start of its process, plus the seconds an earlier attempt
of the same job recorded in ``cost.json`` (a restarted pod keeps counting). When the cost
``lookahead`` seconds from now reaches the budget, :func:`~jupyter_starverse.runtime.steps`
has every rank checkpoint and stop, and rank 0 records the reason in ``cost.json`` in the
format the local supervisor uses. Pending time before the process starts is not billed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_starverse.costs import Cost

__all__ = ["BudgetGuard", "process_start"]

_IMPORTED = time.time()

#: How often rank 0 rewrites ``cost.json`` while the job runs (the live meter).
WRITE_EVERY_S = 10.0
#: Fixed look-ahead on top of the loop's own (checkpoint and exit are still billed).
MARGIN_S = 5.0
_HOW = "in the job: every rank checkpointed first"


def process_start() -> float:
    """When this process started (epoch seconds; Linux ``/proc``, else when this module was imported)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines() if x.startswith("btime"))
        return min(_IMPORTED, boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED


def _decimal(raw: str | None) -> Decimal | None:
    try:
        value = Decimal(raw.strip()) if raw else None
    except InvalidOperation:
        return None
    return value if value is not None and value.is_finite() and value >= 0 else None


@dataclass
class BudgetGuard:
    """Rank 0's meter of a capped job; ``check`` says when the job must stop."""

    budget: Decimal
    per_second: Decimal
    info: Mapping[str, Any]
    started: float
    prior_seconds: int = 0
    run_dir: Path | None = None
    job_id: str | None = None
    _next_write: float = 0.0

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str], *, run_dir: Path | None, job_id: str | None, now: float
    ) -> BudgetGuard | None:
        """The guard the job's environment asks for, or ``None`` (no cap, or a malformed one)."""
        budget = _decimal(environ.get("STARVERSE_BUDGET"))
        per_second = _decimal(environ.get("STARVERSE_COST_PER_SECOND"))
        if budget is None or per_second is None:
            if environ.get("STARVERSE_BUDGET"):
                print("budget cap: STARVERSE_BUDGET or STARVERSE_COST_PER_SECOND unreadable", file=sys.stderr)
            return None
        try:
            info = json.loads(environ.get("STARVERSE_COST_INFO", "") or "{}")
        except ValueError:
            info = {}
        guard = cls(budget, per_second, info if isinstance(info, dict) else {}, now, 0, run_dir, job_id)
        guard.prior_seconds = guard._recorded_seconds()
        return guard

    def _recorded_seconds(self) -> int:
        """Seconds an earlier attempt of this job already recorded (0 when none)."""
        if self.run_dir is None:
            return 0
        from jupyter_starverse.costs import read_cost
        from jupyter_starverse.errors import BadInputError

        try:
            record = read_cost(self.run_dir)
        except (OSError, BadInputError):
            return 0
        if record.cost.job_id != self.job_id:
            return 0
        return max((n.seconds for n in record.cost.nodes), default=0)

    def cost(self, now: float, *, running: bool = True) -> Cost:
        """The job's cost as of ``now`` (every node assumed to run as long as rank 0)."""
        from jupyter_starverse.costs import Cost, NodeCost
        from jupyter_starverse.costs._money import round_money

        seconds = self.prior_seconds + max(0, math.ceil(round(now - self.started, 6)))
        billed, packages = seconds, None
        size = self.info.get("package_seconds")
        if isinstance(size, int) and size > 0:
            packages = max(1, -(-seconds // size))
            billed = packages * size
        decimals = self.info.get("decimals", 2)
        decimals = decimals if isinstance(decimals, int) and 0 <= decimals <= 4 else 2
        nodes = self.info.get("nodes", 1)
        nodes = nodes if isinstance(nodes, int) and nodes > 0 else 1
        units = self.info.get("units_per_node", 1)
        return Cost(
            accelerator=str(self.info.get("accelerator", "")),
            billing=str(self.info.get("billing", "on_demand")),
            units_per_node=units if isinstance(units, int) and units > 0 else 1,
            rate=_decimal(str(self.info.get("rate", ""))) or Decimal(0),
            currency=str(self.info.get("currency", "")),
            amount=round_money(self.per_second * billed, decimals),
            exact=self.per_second * billed,
            nodes=tuple(NodeCost(i, seconds, running, packages) for i in range(nodes)),
            as_of=now,
            budget=self.budget,
            upper_bound=bool(self.info.get("upper_bound", False)),
            job_id=self.job_id,
            user=self.info.get("user") if isinstance(self.info.get("user"), str) else None,
        )

    def check(self, now: float, *, lookahead: float) -> str | None:
        """The reason to stop now (cost at ``now + lookahead`` reaches the budget), else ``None``.

        Also rewrites ``cost.json`` every ``WRITE_EVERY_S`` seconds.
        """
        from jupyter_starverse.costs import budget_reason

        cost = self.cost(now)
        projected = self.cost(now + max(0.0, lookahead))
        if projected.exact_amount >= self.budget:  # exact: a sub-cent budget trips too
            return budget_reason(cost, self.budget, projected=projected, how=_HOW)
        if now >= self._next_write:
            self._next_write = now + WRITE_EVERY_S
            self.record(now, running=True)
        return None

    def record(self, now: float | None = None, *, reason: str | None = None, running: bool = False) -> None:
        """Write ``cost.json`` (with ``reason`` when the cap stopped the job); never raises."""
        if self.run_dir is None:
            return
        from jupyter_starverse.costs import write_cost

        try:
            write_cost(self.run_dir, self.cost(time.time() if now is None else now, running=running), reason=reason)
        except Exception as e:  # the meter must never break training
            print(f"cost meter: {e}", file=sys.stderr, flush=True)
