from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from jupyter_starverse.costs import COST_FILE, NodeInterval, PriceTable, job_cost, read_cost, user_total, write_cost
from jupyter_starverse.costs._prices import parse_price_table
from jupyter_starverse.errors import BadInputError, StoreError
from jupyter_starverse.jobmodel import JobSpec

from .conftest import small_doc

NOW = 1_800_000_000.0
SPEC = JobSpec(name="rec", script="t.py", nodes=1, procs_per_node=2, accelerator="a100-80g")


def _run(root: Path, experiment: str, job_id: str) -> Path:
    folder = root / experiment / "runs" / job_id
    folder.mkdir(parents=True)
    return folder


def test_write_and_read_cost_json(tmp_path: Path, table: PriceTable) -> None:
    folder = _run(tmp_path, "exp", "j1")
    cost = job_cost(SPEC, [NodeInterval(0, NOW - 3600, None)], table, now=NOW, job_id="j1", user="alice")
    record = write_cost(folder, cost)
    assert record.path == str(folder / COST_FILE)
    assert sorted(p.name for p in folder.iterdir()) == [COST_FILE]  # no temp file left behind
    again = read_cost(folder)
    assert again.cost == cost and again.reason is None
    assert again.cost.amount == Decimal("13.00")


def test_a_stop_reason_survives_later_meter_readings(tmp_path: Path, table: PriceTable) -> None:
    folder = _run(tmp_path, "exp", "j1")
    first = job_cost(SPEC, [NodeInterval(0, NOW - 60, None)], table, now=NOW, user="alice")
    write_cost(folder, first, reason="budget reached: test")
    later = job_cost(SPEC, [NodeInterval(0, NOW - 60, NOW + 5)], table, now=NOW + 10, user="alice")
    record = write_cost(folder, later)
    assert record.reason == "budget reached: test"
    assert read_cost(folder).reason == "budget reached: test"
    assert read_cost(folder).cost == later


def test_write_into_a_missing_folder_is_a_store_error(tmp_path: Path, table: PriceTable) -> None:
    cost = job_cost(SPEC, [], table, now=NOW)
    with pytest.raises(StoreError, match="does not exist"):
        write_cost(tmp_path / "gone", cost)


def test_read_missing_and_malformed(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_cost(tmp_path)
    (tmp_path / COST_FILE).write_text("{oops")
    with pytest.raises(BadInputError, match="not valid JSON"):
        read_cost(tmp_path)
    (tmp_path / COST_FILE).write_text("[]")
    with pytest.raises(BadInputError, match="not a cost record"):
        read_cost(tmp_path)


def test_user_total_over_all_experiments(tmp_path: Path, table: PriceTable) -> None:
    root = tmp_path / "experiments"
    hour = [NodeInterval(0, NOW - 3600, NOW)]
    write_cost(_run(root, "a", "a-1"), job_cost(SPEC, hour, table, now=NOW, job_id="a-1", user="alice"))
    write_cost(
        _run(root, "a", "a-2"),
        job_cost(SPEC, [NodeInterval(0, NOW - 1800, None)], table, now=NOW + 1, job_id="a-2", user="alice"),
    )
    write_cost(_run(root, "b", "b-1"), job_cost(SPEC, hour, table, now=NOW, job_id="b-1", user="bob"))
    usd = parse_price_table(small_doc(), source="ops")
    t4 = SPEC.replace(accelerator="t4")
    write_cost(_run(root, "c", "c-1"), job_cost(t4, hour, usd, now=NOW, job_id="c-1", user="alice"))
    (_run(root, "d", "d-1") / COST_FILE).write_text("{broken")

    total = user_total(root, "alice")
    assert total.amounts == (("CNY", Decimal("19.50")), ("USD", Decimal("0.70")))  # 13.00 + 6.50; 2 x 0.35
    assert [r.cost.job_id for r in total.records] == ["a-2", "a-1", "c-1"]  # newest reading first
    assert total.running == 1
    assert len(total.unreadable) == 1 and "d-1" in total.unreadable[0]
    text = str(total)
    assert text.startswith("alice: 19.50 CNY, 0.70 USD over 3 run(s), 1 running")
    data = total.to_json()
    assert data["amounts"] == [{"currency": "CNY", "amount": "19.50"}, {"currency": "USD", "amount": "0.70"}]
    assert user_total(root, "bob").amounts == (("CNY", Decimal("13.00")),)


def test_user_total_without_experiments(tmp_path: Path) -> None:
    total = user_total(tmp_path / "none", "alice")
    assert total.amounts == () and total.records == ()
    assert str(total) == "alice: no metered runs yet"
