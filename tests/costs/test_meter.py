from __future__ import annotations

from decimal import Decimal

import pytest

from jupyter_starverse.costs import Cost, NodeInterval, PriceTable, intervals_of, job_cost
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments._status import NodeInterval as StatusInterval
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, NodeStatus

NOW = 1_800_000_000.0
SPEC = JobSpec(name="meter", script="t.py", nodes=2, procs_per_node=4, accelerator="rtx4090")


def test_elapsed_times_rate_times_cards_per_node(table: PriceTable) -> None:
    intervals = [NodeInterval(0, NOW - 3600, NOW - 10), NodeInterval(1, NOW - 1800.5, None)]
    cost = job_cost(SPEC, intervals, table, now=NOW, job_id="j1", user="alice")
    # node 0: 3590 s, node 1: 1800.5 s -> 1801 s; 4 cards each at 1.8 per card-hour.
    assert [(n.node, n.seconds, n.running) for n in cost.nodes] == [(0, 3590, False), (1, 1801, True)]
    assert cost.unit_seconds == (3590 + 1801) * 4
    assert cost.amount == Decimal("10.78")  # 21564 x 1.8 / 3600 = 10.782
    assert cost.running
    assert cost.rate == Decimal("1.8") and not cost.upper_bound
    assert "10.78 CNY so far" in str(cost)


def test_restarts_are_summed_and_pending_nodes_are_free(table: PriceTable) -> None:
    intervals = [NodeInterval(0, NOW - 100, NOW - 60), NodeInterval(0, NOW - 30, None)]
    cost = job_cost(SPEC, intervals, table, now=NOW)
    assert [(n.node, n.seconds) for n in cost.nodes] == [(0, 70)]
    assert cost.amount == Decimal("0.14")  # 70 s x 4 cards x 0.0005


def test_nothing_ran_costs_zero_with_the_true_rate(table: PriceTable) -> None:
    cost = job_cost(SPEC, [], table, now=NOW)
    assert cost.amount == Decimal("0.00") and cost.nodes == ()
    assert cost.rate == Decimal("1.8")


def test_accepts_the_experiment_status_intervals(table: PriceTable) -> None:
    cost = job_cost(SPEC, [StatusInterval(0, NOW - 3600, NOW), StatusInterval(1, NOW - 3600, NOW)], table, now=NOW)
    assert cost.amount == Decimal("14.40")


def test_intervals_of_a_backend_job(table: PriceTable) -> None:
    job = Job(
        id="j",
        backend="local",
        spec=SPEC,
        state=JobState.RUNNING,
        experiment_dir="/x",
        created=NOW - 100,
        nodes=(
            NodeStatus(0, JobState.RUNNING, started=NOW - 60),
            NodeStatus(1, JobState.PENDING),
        ),
    )
    assert intervals_of(job) == [NodeInterval(0, NOW - 60, None)]
    assert job_cost(SPEC, intervals_of(job), table, now=NOW).amount == Decimal("0.12")


def test_cpu_job_is_metered_per_node(table: PriceTable) -> None:
    spec = SPEC.replace(accelerator="cpu")
    cost = job_cost(spec, [NodeInterval(0, NOW - 36000, NOW), NodeInterval(1, NOW - 36000, NOW)], table, now=NOW)
    assert cost.units_per_node == 1
    assert cost.amount == Decimal("2.00")  # 2 nodes x 10 h x 0.1
    assert "node-time" in str(cost)


def test_packages_are_bought_per_node_as_time_crosses_them(table: PriceTable) -> None:
    spec = SPEC.replace(billing="daily")
    just_started = job_cost(spec, [NodeInterval(0, NOW, None)], table, now=NOW)
    assert just_started.nodes[0].packages == 1
    assert just_started.amount == Decimal("120.96")  # 24 h x 1.26 x 4 cards
    day_and_a_bit = job_cost(spec, [NodeInterval(0, NOW - 86401, None)], table, now=NOW)
    assert day_and_a_bit.nodes[0].packages == 2
    assert day_and_a_bit.amount == Decimal("241.92")


def test_spot_is_metered_at_the_upper_bound(table: PriceTable) -> None:
    cost = job_cost(SPEC.replace(billing="spot"), [NodeInterval(0, NOW - 3600, NOW)], table, now=NOW)
    assert cost.upper_bound and cost.rate == Decimal("1.2")
    assert cost.amount == Decimal("4.80")
    assert cost.figure == "<= 4.80 CNY"


def test_clock_skew_on_a_running_node_counts_zero(table: PriceTable) -> None:
    cost = job_cost(SPEC, [NodeInterval(0, NOW + 5, None)], table, now=NOW)
    assert cost.nodes[0].seconds == 0 and cost.amount == Decimal("0.00")


def test_inconsistent_or_absurd_intervals_are_errors(table: PriceTable) -> None:
    with pytest.raises(BadInputError, match=r"finished .* before it started"):
        job_cost(SPEC, [NodeInterval(0, NOW, NOW - 1)], table, now=NOW)
    with pytest.raises(BadInputError, match="more than a year"):
        job_cost(SPEC, [NodeInterval(0, 0.0, None)], table, now=NOW)


def test_unknown_type_or_missing_spot_price_is_never_zero(table: PriceTable) -> None:
    with pytest.raises(BadInputError, match="no price for GPU type"):
        job_cost(SPEC.replace(accelerator="mi300x"), [NodeInterval(0, NOW - 1, NOW)], table, now=NOW)


def test_cost_json_round_trip(table: PriceTable) -> None:
    spec = SPEC.replace(budget="50")
    cost = job_cost(
        spec,
        [NodeInterval(0, NOW - 3600, NOW), NodeInterval(1, NOW - 10, None)],
        table,
        now=NOW,
        job_id="j",
        user="bob",
    )
    data = cost.to_json()
    assert data["amount"] == "7.22" and data["budget"] == "50"
    assert Cost.from_json(data) == cost
    with pytest.raises(BadInputError, match="malformed"):
        Cost.from_json({**data, "nodes": [{"node": 0}]})
    with pytest.raises(BadInputError, match="amount"):
        Cost.from_json({**data, "amount": "lots"})


def test_times_are_taken_to_the_microsecond(table: PriceTable) -> None:
    start = 1_796_001_012.4391704
    end = 1_796_004_612.4391706  # one float step (0.24 us) past start + 3600
    assert end - start > 3600
    cost = job_cost(SPEC, [NodeInterval(0, start, end)], table, now=end)
    assert cost.nodes[0].seconds == 3600
    # ...but a whole microsecond more is a started second.
    cost = job_cost(SPEC, [NodeInterval(0, start, start + 3600.00001)], table, now=end)
    assert cost.nodes[0].seconds == 3601
