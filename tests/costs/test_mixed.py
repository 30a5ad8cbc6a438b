"""Mixed pools: "256 x 4090 + 128 x A100 for 12 days", each option priced for the same work."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from jupyter_starverse.cli import main
from jupyter_starverse.costs import THROUGHPUT, PriceTable, Resources, estimate, parse_pools, plan_mixed
from jupyter_starverse.errors import BadInputError

DAYS_12 = 12 * 86400


def test_the_seeds_plan_is_priced_truthfully(table: PriceTable) -> None:
    pools = parse_pools("rtx4090:256,a100-80g:128")
    plan = plan_mixed(pools, "12d", "on_demand", table=table)
    by = {o.label: o for o in plan.options}
    # each pool for the whole 12 days: exactly what estimate prices (256 x 1.8 x 288 h, 128 x 6.5 x 288 h)
    assert by["rtx4090 pool"].high == Decimal("132710.40") == estimate(pools[0], DAYS_12, table=table).high
    assert by["a100-80g pool"].high == Decimal("239616.00")
    split = plan.recommended
    assert split.kind == "split" and split.seconds == DAYS_12 and split.high == Decimal("372326.40")
    r4090 = 256 * THROUGHPUT["rtx4090"].tflops
    ra100 = 128 * THROUGHPUT["a100-80g"].tflops
    assert by["rtx4090 pool"].work_share == pytest.approx(r4090 / (r4090 + ra100))
    assert plan.work_eflop == pytest.approx((r4090 + ra100) * DAYS_12 / 1e6)
    # one synchronous job: 384 cards at the 4090's pace, longer and dearer than the split, every card billed
    sync = by["one job over both pools"]
    assert sync.seconds == pytest.approx((r4090 + ra100) * DAYS_12 / (384 * THROUGHPUT["rtx4090"].tflops), abs=1)
    assert (
        sync.seconds > DAYS_12 and sync.high > split.high and {e.resources.count for e in sync.estimates} == {256, 128}
    )
    # single types: the same work on 384 cards of one type
    assert by["all a100-80g"].seconds < DAYS_12 < by["all rtx4090"].seconds
    assert by["all rtx4090"].seconds == sync.seconds
    assert by["all a100-80g"].high == estimate(Resources("a100-80g", 384), by["all a100-80g"].seconds, table=table).high
    assert split.launches == (
        "--gpu rtx4090 --nodes 32 --gpus-per-node 8",
        "--gpu a100-80g --nodes 16 --gpus-per-node 8",
    )
    assert sync.launches == () and by["all rtx4090"].launches == ("--gpu rtx4090 --nodes 48 --gpus-per-node 8",)
    text = str(plan)
    assert "split: a stage per pool" in text and "372,326.40 CNY" in text and "slowest card (rtx4090)" in text


def test_spot_and_packages_go_through_the_estimates(table: PriceTable) -> None:
    pools = parse_pools(["rtx4090:256", "a100-80g:128"])
    spot = plan_mixed(pools, "12d", "spot", table=table)
    assert spot.recommended.low < spot.recommended.high and " - " in spot.recommended.figure("CNY")
    weekly = plan_mixed(pools, "12d", "weekly", table=table)
    assert all(e.packages == 2 for e in weekly.recommended.estimates)  # 12 days = 2 weekly packages per card


@pytest.mark.parametrize(
    ("text", "why"),
    [("rtx4090:256", "two or more pools"), ("rtx4090:2,rtx4090:3", "two or more pools"), ("rtx4090", "TYPE:CARDS"),
     ("t4:8,rtx4090:8", "no throughput figures"), ("cpu:2,rtx4090:8", "GPU pools")],
)  # fmt: skip
def test_bad_pools_are_refused_with_a_hint(text: str, why: str) -> None:
    with pytest.raises(BadInputError, match=why) as err:
        parse_pools(text)
    assert err.value.hint


def test_cli_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "estimate", "--mixed", "rtx4090:256,a100-80g:128", "--duration", "12d", "--json"]
    assert main(argv) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert data["recommended"] == "split: a stage per pool" and data["seconds"] == DAYS_12
    kinds = [o["kind"] for o in data["options"]]
    assert kinds == ["pool", "pool", "split", "one job", "single", "single"]
    assert data["options"][2]["high"] == "372326.40" and data["throughput"]["rtx4090"]["memory_gib"] == 24
    assert main(["cost", "estimate", "--mixed", "rtx4090:8,a100-80g:8", "--gpu", "l40s", "--hours", "1"]) != 0
    assert "--mixed plans its own pools" in capsys.readouterr().err
