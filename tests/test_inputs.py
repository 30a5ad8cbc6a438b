"""``_inputs``: the checks of values from outside, each a BadInputError with the field and a hint."""

from __future__ import annotations

from decimal import Decimal

import pytest

from jupyter_starverse._inputs import check_number, check_path, check_text, find_surrogate
from jupyter_starverse.errors import BadInputError


@pytest.mark.parametrize("value", ["\ud800", "ok\udfff", 5, None, "", "   ", "x" * 11])
def test_check_text_refuses(value: object) -> None:
    with pytest.raises(BadInputError) as info:
        check_text(value, "name", max_len=10)
    assert info.value.field == "name" and info.value.hint


def test_check_text_passes_text_and_optional_none() -> None:
    assert check_text("中文 ok", "name") == "中文 ok"
    assert check_text(None, "name", required=False) is None
    assert check_text("", "comment", empty=True) == ""


@pytest.mark.parametrize("value", ["x" * 256, "a/" + "é" * 128, "a\x00b", "/" * 4097, "\udcff"])
def test_check_path_refuses_what_the_file_system_would(value: str) -> None:
    with pytest.raises(BadInputError) as info:
        check_path(value, "path")
    assert info.value.field == "path" and info.value.hint


def test_check_path_takes_a_full_length_name() -> None:
    assert check_path("x" * 255 + "/" + "y" * 255, "path")


@pytest.mark.parametrize(
    ("value", "kwargs"),
    [
        (1e308, {"high": 8784}),
        (float("inf"), {}),
        (float("nan"), {}),
        ("NaN", {}),
        ("-Infinity", {}),
        ("1e9999999", {"high": 10}),
        ("lots", {}),
        ("\u0663", {}),
        (True, {}),
        ([1], {}),
        (0, {"low": 0, "low_open": True}),
        (-1, {"low": 0}),
        (1.5, {"integer": True}),
    ],
)
def test_check_number_refuses(value: object, kwargs: dict[str, object]) -> None:
    with pytest.raises(BadInputError) as info:
        check_number(value, "hours", **kwargs)  # type: ignore[arg-type]
    assert info.value.field == "hours" and info.value.hint


def test_check_number_is_exact() -> None:
    assert check_number("1.8", "budget", low=0) == Decimal("1.8")
    assert check_number(0.1, "budget") == Decimal("0.1")
    assert check_number(10**30, "budget", low=0) == Decimal(10**30)


def test_find_surrogate_names_where() -> None:
    assert find_surrogate({"spec": {"env": {"A": ["ok", "\ud800"]}}}) == "spec.env.A[1]"
    assert find_surrogate({"a\udc80": 1}) == "body (a key)"
    assert find_surrogate({"spec": {"name": "中文", "n": 1}}) is None
