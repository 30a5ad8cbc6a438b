from __future__ import annotations

from decimal import Decimal

import pytest

from jupyter_starverse.costs import BUDGET_REASON_PREFIX, NodeInterval, PriceTable, check_budget
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import MAX_BUDGET, JobSpec

T0 = 1_800_000_000.0
ONE_CARD = JobSpec(name="cap", script="t.py", accelerator="rtx4090", budget=Decimal("10"))  # 0.0005 per second
RUNNING = [NodeInterval(0, T0, None)]


def test_no_budget_never_stops(table: PriceTable) -> None:
    decision = check_budget(ONE_CARD.replace(budget=None), RUNNING, table, now=T0 + 300 * 86400)
    assert not decision.stop and decision.budget is None and decision.reason is None


def test_stops_when_cost_reaches_the_budget(table: PriceTable) -> None:
    before = check_budget(ONE_CARD, RUNNING, table, now=T0 + 19980)  # 9.99
    assert not before.stop
    assert before.remaining == Decimal("0.01")
    assert before.seconds_left == 20
    at = check_budget(ONE_CARD, RUNNING, table, now=T0 + 20000)  # 10.00
    assert at.stop
    assert at.reason is not None and at.reason.startswith(BUDGET_REASON_PREFIX)
    assert (
        at.reason
        == "budget reached: 10.00 CNY spent of a 10.00 CNY cap; stopped gracefully (SIGTERM: the job checkpoints first)"
    )
    assert check_budget(ONE_CARD, RUNNING, table, now=T0 + 30000).stop


def test_grace_stops_early_enough_for_the_checkpoint(table: PriceTable) -> None:
    decision = check_budget(ONE_CARD, RUNNING, table, now=T0 + 19980, grace=30)
    assert decision.stop
    assert decision.cost.amount == Decimal("9.99")
    assert decision.projected.amount == Decimal("10.01")
    assert decision.reason is not None
    assert "9.99 CNY spent of a 10.00 CNY cap (10.01 CNY by the time it can stop)" in decision.reason
    with pytest.raises(BadInputError, match="grace"):
        check_budget(ONE_CARD, RUNNING, table, now=T0, grace=-1)


def test_finished_nodes_stop_the_burn(table: PriceTable) -> None:
    done = [NodeInterval(0, T0, T0 + 100)]
    decision = check_budget(ONE_CARD, done, table, now=T0 + 20000, grace=60)
    assert not decision.stop and decision.seconds_left is None


def test_package_billing_stops_before_buying_the_next_package(table: PriceTable) -> None:
    spec = ONE_CARD.replace(billing="daily", budget="40")  # one package is 24 x 1.26 = 30.24
    almost_a_day = T0 + 86400 - 600
    assert not check_budget(spec, RUNNING, table, now=almost_a_day).stop
    decision = check_budget(spec, RUNNING, table, now=almost_a_day, grace=900)
    assert decision.stop and decision.cost.amount == Decimal("30.24")
    assert decision.projected.amount == Decimal("60.48")
    # A budget below one package stops the job at once: never a surprise bill.
    assert check_budget(spec.replace(budget="30"), RUNNING, table, now=T0).stop


def test_multi_node_burn_rate(table: PriceTable) -> None:
    spec = JobSpec(name="cap", script="t.py", nodes=2, procs_per_node=4, accelerator="rtx4090", budget="100")
    both = [NodeInterval(0, T0, None), NodeInterval(1, T0, None)]
    decision = check_budget(spec, both, table, now=T0 + 3600)  # 8 cards x 1.8 = 14.40 per hour
    assert decision.cost.amount == Decimal("14.40")
    assert decision.seconds_left == 21400  # 85.60 / 14.40 h
    assert decision.to_json()["remaining"] == "85.60"


def test_absurd_budgets_do_not_overflow(table: PriceTable) -> None:
    with pytest.raises(BadInputError, match="budget"):  # the spec itself refuses a budget past the bound
        ONE_CARD.replace(budget="1e999999")
    huge = ONE_CARD.replace(budget=str(MAX_BUDGET))
    decision = check_budget(huge, RUNNING, table, now=T0 + 3600, grace=30)
    assert not decision.stop and decision.seconds_left is None  # more than a year away
