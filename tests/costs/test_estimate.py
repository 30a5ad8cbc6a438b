from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal

import pytest

from jupyter_starverse.costs import SPOT_NOTE, PriceTable, Resources, compare, estimate, parse_price_table
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

from .conftest import small_doc

RTX32 = Resources("rtx4090", 32)


def test_seed_example_32_rtx4090_4_hours_on_demand(table: PriceTable) -> None:
    est = estimate(RTX32, timedelta(hours=4), "on_demand", table=table)
    assert est.amount == Decimal("230.40")
    assert est.low == est.high
    assert est.currency == "CNY"
    assert est.seconds == est.billed_seconds == 14400
    assert str(est).startswith("32 x rtx4090 for 4h, on_demand: estimated 230.40 CNY")


def test_seed_example_from_a_job_spec(table: PriceTable) -> None:
    spec = JobSpec(name="big", script="train.py", nodes=4, procs_per_node=8, accelerator="rtx4090")
    est = estimate(spec, "4h", table=table)
    assert est.resources == RTX32
    assert est.billing == "on_demand"
    assert est.amount == Decimal("230.40")
    # The spec's billing is the default; an explicit one wins.
    assert estimate(spec.replace(billing="daily"), "4h", table=table).billing == "daily"
    assert estimate(spec.replace(billing="daily"), "4h", "on_demand", table=table).amount == Decimal("230.40")


@pytest.mark.parametrize(
    ("duration", "billed", "amount"),
    [
        (14400, 14400, "230.40"),
        (Decimal("14400.2"), 14401, "230.42"),  # 14401 s x 0.016 = 230.416 -> 230.42
        (14400.000001, 14401, "230.42"),
        (timedelta(hours=4, microseconds=1), 14401, "230.42"),
        (Decimal("14399.0"), 14399, "230.38"),  # 230.384 -> 230.38
        ("4h0m1s", 14401, "230.42"),
    ],
)
def test_rounding_at_second_boundaries(table: PriceTable, duration: object, billed: int, amount: str) -> None:
    est = estimate(RTX32, duration, table=table)  # type: ignore[arg-type]
    assert est.billed_seconds == billed
    assert est.amount == Decimal(amount)


def test_half_up_at_the_minor_unit(table: PriceTable) -> None:
    one = Resources("rtx4090", 1)  # 0.0005 per second
    assert estimate(one, 10, table=table).amount == Decimal("0.01")  # 0.005 rounds up
    assert estimate(one, Decimal("9.01"), table=table).amount == Decimal("0.01")  # billed 10 s
    assert estimate(one, 8, table=table).amount == Decimal("0.00")  # 0.004 rounds down
    assert estimate(one, Decimal("0.2"), table=table).billed_seconds == 1


def test_three_day_job_on_each_package(table: PriceTable) -> None:
    on_demand = estimate(RTX32, "3d", "on_demand", table=table)
    daily = estimate(RTX32, "3d", "daily", table=table)
    weekly = estimate(RTX32, "3d", "weekly", table=table)
    assert on_demand.amount == Decimal("4147.20")  # 72 h x 1.8 x 32
    assert daily.packages == 3 and daily.amount == Decimal("2903.04")  # 3 x 24 h x 1.26 x 32
    assert daily.rate_high == Decimal("1.260")
    assert daily.billed_seconds == 3 * 86400
    assert "unused" not in daily.note
    assert weekly.packages == 1 and weekly.amount == Decimal("6773.76")  # 168 h x 1.26 x 32
    assert "4d of them unused" in weekly.note


def test_package_partly_used_buys_a_whole_one(table: PriceTable) -> None:
    est = estimate(Resources("a100-80g", 1), "24h1s", "daily", table=table)
    assert est.packages == 2
    assert est.amount == Decimal("218.40")  # 48 h x 6.5 x 0.7
    assert "23h59m59s of them unused" in est.note


def test_spot_is_a_range_with_an_interruption_note(table: PriceTable) -> None:
    est = estimate(RTX32, "4h", "spot", table=table)
    assert (est.low, est.high) == (Decimal("51.20"), Decimal("153.60"))
    assert est.is_range and est.amount == est.high
    assert est.note == SPOT_NOTE and "reclaimed" in est.note
    assert est.figure == "51.20 - 153.60 CNY"
    assert est.to_json()["low"] == "51.20"


def test_cpu_mode_prices_nodes(table: PriceTable) -> None:
    spec = JobSpec(name="cpu-job", script="t.py", nodes=4, procs_per_node=8, accelerator="cpu")
    est = estimate(spec, "10h", table=table)
    assert est.resources == Resources("cpu", 4)
    assert est.resources.unit == "node"
    assert est.amount == Decimal("4.00")
    assert "CPU node" in str(est)


def test_fits_budget(table: PriceTable) -> None:
    est = estimate(RTX32, "4h", table=table)
    assert est.fits(None) and est.fits(Decimal("230.40"))
    assert not est.fits(Decimal("230.39"))


def test_compare_billing_modes_names_the_cheapest(table: PriceTable) -> None:
    cmp = compare(RTX32, "3d", table=table, billings=["on_demand", "daily", "weekly"])
    assert [r.billing for r in cmp.rows] == ["on_demand", "daily", "weekly"]
    assert cmp.cheapest.billing == "daily"
    assert "<- cheapest" in str(cmp).splitlines()[2]
    data = cmp.to_json()
    assert data["cheapest"] == {"accelerator": "rtx4090", "billing": "daily", "amount": "2903.04"}


def test_compare_counts_spot_by_its_high_end(table: PriceTable) -> None:
    # 1 h: spot high 1.2 < on demand 1.8 < daily package (24 h x 1.26).
    cmp = compare(Resources("rtx4090", 1), "1h", table=table)
    assert cmp.cheapest.billing == "spot"
    assert len(cmp.rows) == 4
    # 3 days on an A100: spot high 4.5 x 72 = 324 is just below daily 3 x 24 x 4.55 = 327.6.
    cmp = compare(Resources("a100-80g", 1), "3d", table=table)
    assert cmp.cheapest.billing == "spot"
    assert cmp.cheapest.high == Decimal("324.00")


def test_compare_gpu_types(table: PriceTable) -> None:
    cmp = compare(RTX32, "4h", table=table, billings=["on_demand"], accelerators=sorted(table.gpus))
    assert len(cmp.rows) == len(table.gpus)
    assert {r.resources.count for r in cmp.rows} == {32}
    assert cmp.cheapest.resources.accelerator == "rtx4090"
    by_type = {r.resources.accelerator: r.amount for r in cmp.rows}
    assert by_type["a100-80g"] == Decimal("832.00")
    with pytest.raises(BadInputError, match="v100"):
        compare(RTX32, "4h", table=table, accelerators=["rtx4090", "v100"])


def test_compare_skips_what_is_not_sold_instead_of_showing_zero() -> None:
    table = parse_price_table(small_doc(), source="ops")
    cmp = compare(Resources("t4", 1), "2h", table=table)
    assert [r.billing for r in cmp.rows] == ["on_demand", "daily"]
    assert cmp.skipped == ("t4 weekly (package not sold)", "t4 spot (no spot price)")
    assert all(r.amount > 0 for r in cmp.rows)
    assert "not priced: t4 spot" in str(cmp)
    with pytest.raises(BadInputError, match="nothing to compare"):
        compare(Resources("t4", 1), "2h", table=table, billings=["spot"])


@pytest.mark.parametrize(
    ("duration", "message"),
    [
        (-1, "must be positive"),
        (0, "must be positive"),
        (timedelta(seconds=-5), "must be positive"),
        (Decimal("-0.5"), "must be positive"),
        (math.nan, "not a finite duration"),
        (math.inf, "not a finite duration"),
        (Decimal("NaN"), "not a finite duration"),
        (True, "not a duration"),
        ("4", "not a duration"),
        ("four hours", "not a duration"),
        ("-4h", "not a duration"),
        (366 * 86400 + 1, "more than a year"),
        ("400d", "more than a year"),
        (timedelta(days=10_000), "more than a year"),
    ],
)
def test_bad_durations(table: PriceTable, duration: object, message: str) -> None:
    with pytest.raises(BadInputError, match=message) as err:
        estimate(RTX32, duration, table=table)  # type: ignore[arg-type]
    assert err.value.field == "duration"


def test_a_full_year_is_fine(table: PriceTable) -> None:
    assert estimate(Resources("rtx4090", 1), "366d", table=table).amount == Decimal("15811.20")


def test_bad_billing_and_resources(table: PriceTable) -> None:
    with pytest.raises(BadInputError, match="unknown billing mode 'hourly'") as err:
        estimate(RTX32, "1h", "hourly", table=table)
    assert err.value.hint and "on_demand" in err.value.hint
    with pytest.raises(BadInputError, match="no price for GPU type"):
        estimate(Resources("tpu-v5", 1), "1h", table=table)
    for count in (0, -3, True, 10**9):
        with pytest.raises(BadInputError, match="count"):
            Resources("rtx4090", count)
    with pytest.raises(BadInputError, match="empty"):
        Resources("  ", 1)
    with pytest.raises(BadInputError, match="cannot price"):
        estimate("rtx4090", "1h", table=table)  # type: ignore[arg-type]


def test_notebook_html_marks_the_cheapest(table: PriceTable) -> None:
    cmp = compare(RTX32, "3d", table=table, billings=["on_demand", "daily"])
    html = cmp._repr_html_()
    assert '<tr style="font-weight:bold"><td>rtx4090</td><td>32</td><td>daily</td><td>2,903.04 CNY</td></tr>' in html
    assert "<b>230.40 CNY</b>" in estimate(RTX32, "4h", table=table)._repr_html_()
