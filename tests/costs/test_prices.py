from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.costs import Resources, estimate, load_price_table, parse_price_table
from jupyter_starverse.errors import BadInputError

from .conftest import small_doc


def test_shipped_table_has_the_seed_prices(cost_settings: Settings) -> None:
    table = load_price_table(cost_settings)
    assert table.currency == "CNY"
    assert table.source == "shipped"
    assert table.price("rtx4090").on_demand == Decimal("1.8")
    assert table.price("A100-80G").on_demand == Decimal("6.5")
    assert table.price("rtx4090").spot == (Decimal("0.4"), Decimal("1.2"))
    assert table.price("cpu").on_demand == Decimal("0.1")
    assert table.package("daily").discount == Decimal("0.30")
    assert table.package("weekly").hours == 168
    assert "rtx4090" in str(table) and "CNY" in str(table)


def test_table_json_keeps_exact_strings(cost_settings: Settings) -> None:
    data = load_price_table(cost_settings).to_json()
    assert data["gpus"]["rtx4090"] == {"on_demand": "1.8", "spot": ["0.4", "1.2"]}
    assert data["packages"]["daily"] == {"name": "daily", "hours": 24, "discount": "0.30"}


def test_operator_file_replaces_the_table(tmp_path: Path, write_prices) -> None:  # type: ignore[no-untyped-def]
    path = write_prices(small_doc())
    settings = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_PRICES": str(path)})
    table = load_price_table(settings)
    assert table.currency == "USD"
    assert table.source == str(path)
    assert estimate(Resources("t4", 2), "10h", table=table).amount == Decimal("7.00")
    with pytest.raises(BadInputError, match="rtx4090"):
        table.price("rtx4090")


def test_currency_override_relabels(tmp_path: Path) -> None:
    settings = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_CURRENCY": "usd"})
    table = load_price_table(settings)
    assert table.currency == "USD"
    assert estimate(Resources("rtx4090", 1), "1h", table=table).currency == "USD"


def test_bad_currency_override(tmp_path: Path) -> None:
    settings = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_CURRENCY": "yuan"})
    with pytest.raises(BadInputError, match="currency"):
        load_price_table(settings)


def test_json_floats_stay_exact() -> None:
    import json

    doc = json.loads(
        '{"currency": "CNY", "gpus": {"x": {"on_demand": 1.1}}, "cpu_node": {"on_demand": 0.1}}', parse_float=Decimal
    )
    table = parse_price_table(doc, source="t")
    assert table.price("x").on_demand == Decimal("1.1")
    # 3 cards x 1.1 x 1 h is 3.30 exactly (binary floats would give 3.3000000000000003).
    assert estimate(Resources("x", 3), 3600, table=table).amount == Decimal("3.30")


def test_unknown_gpu_type_is_an_error_never_zero(cost_settings: Settings) -> None:
    table = load_price_table(cost_settings)
    with pytest.raises(BadInputError, match="no price for GPU type 'v100'") as err:
        table.price("v100")
    assert err.value.hint and "rtx4090" in err.value.hint


def test_spot_is_optional_but_never_zero(write_prices, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_prices(small_doc())
    table = load_price_table(Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_PRICES": str(path)}))
    assert table.price("t4").spot is None
    with pytest.raises(BadInputError, match="no spot price"):
        estimate(Resources("t4", 1), "1h", "spot", table=table)
    with pytest.raises(BadInputError, match="no 'weekly' package"):
        estimate(Resources("t4", 1), "1h", "weekly", table=table)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a JSON object"),
        (small_doc(currency=None), "'currency' is missing"),
        (small_doc(currency="dollars"), "not a currency code"),
        (small_doc(gpus={}), "'gpus' must map"),
        (small_doc(gpus={"t4": {"on_dmand": "1"}}), "unknown key"),
        (small_doc(gpus={"t4": {"spot": ["1", "2"]}}), "no 'on_demand' price"),
        (small_doc(gpus={"t4": {"on_demand": "-1"}}), "non-negative"),
        (small_doc(gpus={"t4": {"on_demand": "cheap"}}), "not an amount"),
        (small_doc(gpus={"t4": {"on_demand": True}}), "not an amount"),
        (small_doc(gpus={"t4": {"on_demand": "1e999999"}}), "not a plausible price"),
        (small_doc(gpus={"t4": {"on_demand": "sNaN"}}), "non-negative"),
        (small_doc(gpus={"t4": {"on_demand": "1", "spot": ["2", "1"]}}), "above high"),
        (small_doc(gpus={"t4": {"on_demand": "1", "spot": "0.5"}}), r"\[low, high\]"),
        (small_doc(gpus={"T 4": {"on_demand": "1"}}), "not a valid GPU type"),
        (small_doc(gpus={"cpu": {"on_demand": "1"}}), "not a valid GPU type"),
        (small_doc(cpu_node=None), "cpu_node must be an object"),
        (small_doc(packages={"monthly": {"hours": 720, "discount": "0.5"}}), "unknown package"),
        (small_doc(packages={"daily": {"hours": 24, "discount": "1"}}), "must be below 1"),
        (small_doc(packages={"daily": {"hours": 0, "discount": "0.1"}}), "whole number of hours"),
        (small_doc(packages={"daily": {"hours": 24}}), "no 'discount'"),
        (small_doc(decimals=9), "decimals"),
        (small_doc(curency="USD"), "unknown key"),
    ],
)
def test_malformed_documents_are_clear_errors(doc: object, message: str) -> None:
    with pytest.raises(BadInputError, match=message) as err:
        parse_price_table(doc, source="ops.json")
    assert "ops.json" in err.value.message
    assert err.value.hint


def test_comment_keys_are_allowed() -> None:
    table = parse_price_table(
        small_doc(_comment="set by ops", gpus={"t4": {"on_demand": "1", "_note": "x"}}), source="t"
    )
    assert table.price("t4").on_demand == Decimal(1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"currency": "CNY", "gpus": {"x": {"on_demand": NaN}}, "cpu_node": {"on_demand": 1}}', "not valid JSON"),
        ("", "not valid JSON"),
    ],
)
def test_malformed_price_file(tmp_path: Path, write_prices, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = write_prices(text)
    settings = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_PRICES": str(path)})
    with pytest.raises(BadInputError, match=message):
        load_price_table(settings)


def test_missing_or_unreadable_price_file(tmp_path: Path) -> None:
    missing = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_PRICES": str(tmp_path / "nope.json")})
    with pytest.raises(BadInputError, match="does not exist") as err:
        load_price_table(missing)
    assert err.value.hint and "STARVERSE_PRICES" in err.value.hint
    folder = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_PRICES": str(tmp_path)})
    with pytest.raises(BadInputError, match="cannot be read"):
        load_price_table(folder)


def test_notebook_html_is_escaped() -> None:
    table = parse_price_table(small_doc(), source="<ops & co>")
    html = table._repr_html_()
    assert "&lt;ops &amp; co&gt;" in html and "<ops" not in html
    assert "<td>t4</td><td>card-h</td><td>0.35</td><td>-</td><td>0.28</td>" in html
