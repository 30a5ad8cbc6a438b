"""The limits the supervisor enforces on a running job: the budget cap, the cost meter, the idle guard.

:class:`Limits` meters the job's cost into ``cost.json`` (and the status), stops it gracefully
when the budget would be reached within the real grace period, SIGKILLs it and closes its
billing intervals at once when the cap is about to be reached whatever it does with its SIGTERM,
gives the per-second rate that prices lost work, and stops a GPU job whose GPUs stay idle for
``job_idle_minutes`` (after a warning in its reason).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import replace
from decimal import Decimal

from jupyter_starverse._procs import job_processes, signal_pids
from jupyter_starverse.experiments import node_intervals
from jupyter_starverse.runtime._guards import gpu_utilisation

from ._supstate import BUDGET_EVERY_S, HARD_LOOKAHEAD_S, IDLE_POLL_S, SupervisorState

__all__ = ["Limits"]


class Limits(SupervisorState):
    def check_idle(self) -> None:
        """GPUs idle for ``job_idle_minutes``: a warning in the job's reason, then a graceful stop."""
        if self.idle is None or self.stop_reason is not None or time.monotonic() < self._next_idle:
            return
        self._next_idle = time.monotonic() + min(IDLE_POLL_S, self.idle.minutes * 60 / 8)
        now = time.time()
        verdict = self.idle.observe(now, gpu_utilisation(os.environ.get("CUDA_VISIBLE_DEVICES")))
        idle = self.idle.idle_minutes(now)
        if verdict == "warn" and not self._idle_warned:
            self._idle_warned = True
            left = self.idle.minutes - idle
            self.save(reason=f"idle guard: GPUs idle for {idle:.1f} min; the job stops in {left:.1f} min "
                      "unless they work again (STARVERSE_JOB_IDLE_MINUTES)")  # fmt: skip
        elif verdict == "ok" and self._idle_warned:
            self._idle_warned = False
            self.save(reason=None)
        elif verdict == "stop":
            self.request_stop(
                f"idle guard: the job's GPUs were idle for {idle:.1f} min "
                f"(STARVERSE_JOB_IDLE_MINUTES={self.idle.minutes:g}); stopped after a checkpoint",
                "failed",
            )

    def check_budget(self, *, final: bool = False) -> None:
        """Meter the cost into ``cost.json`` and enforce the cap.

        Graceful stop (SIGTERM: the runtime checkpoints) when the cost ``BUDGET_EVERY_S +
        grace + 1`` s from now reaches the budget, ``grace`` being the real time this supervisor
        gives a stopping job before SIGKILL; hard stop (SIGKILL now) when the cost
        ``HARD_LOOKAHEAD_S`` from now reaches it, whatever the job does with its SIGTERM.
        """
        if not final and time.monotonic() < self._next_budget:
            return
        self._next_budget = time.monotonic() + BUDGET_EVERY_S
        try:
            from jupyter_starverse.costs import check_budget, load_price_table, write_cost

            decision = check_budget(
                self.spec,
                node_intervals(self.status),
                load_price_table(self.settings),
                now=time.time(),
                grace=0.0 if final else BUDGET_EVERY_S + self.grace + 1.0,
                hard_lookahead=None if final or self.hard else HARD_LOOKAHEAD_S,
                job_id=self.plan.job_id,
                user=self.settings.user,
            )
            reason = None if final else decision.reason if decision.stop and not self._budget_stop else None
            write_cost(self.run.root, decision.cost, reason=reason)
        except Exception as e:
            print(f"cost meter: {e}", file=sys.stderr, flush=True)
            self._next_budget = time.monotonic() + 60.0  # costs: retry an unreadable price each minute, not each poll
            return
        self.status = replace(self.status, cost=str(decision.cost.amount))
        if final or not decision.stop:
            return
        if decision.hard_stop and decision.budget is not None:
            from jupyter_starverse.costs import hard_budget_reason

            why = (
                f"the job had not exited {time.time() - self._stop_sent:.0f} s after SIGTERM"
                if self._budget_stop
                else f"less than {HARD_LOOKAHEAD_S:.0f} s of budget left"
            )
            self.hard_kill(hard_budget_reason(decision.cost, decision.budget, why=why))
        elif decision.reason and not self._budget_stop:
            self._budget_stop = True
            self._stop_sent = time.time()
            self.request_stop(decision.reason, "cancelled")

    def hard_kill(self, reason: str) -> None:
        """SIGKILL every process of the job now and close the billing intervals at this moment."""
        from jupyter_starverse.costs import write_cost

        self.hard = True
        signal_pids(job_processes(self.plan.job_id, pid_dir=self.run.pids), signal.SIGKILL)
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        now = time.time()
        for n in self.status.nodes:
            if n.launches and n.launches[-1][1] is None:
                self.set_node(n.index, launches=(*n.launches[:-1], (n.launches[-1][0], now)))
        self.stop_reason, self.stop_state = reason, "cancelled"
        try:
            from jupyter_starverse.costs import job_cost, load_price_table

            cost = job_cost(
                self.spec, node_intervals(self.status), load_price_table(self.settings), now=now,
                job_id=self.plan.job_id, user=self.settings.user,
            )  # fmt: skip
            write_cost(self.run.root, cost, reason=reason)
        except Exception as e:
            print(f"cost meter: {e}", file=sys.stderr, flush=True)

    def per_second(self) -> tuple[Decimal | None, str | None]:
        try:
            from jupyter_starverse.costs import job_rate_per_second, load_price_table

            table = load_price_table(self.settings)
            return job_rate_per_second(self.spec, table), table.currency
        except Exception:
            return None, None
