"""JobSpec checks its strings and numbers like a REST body, whoever builds it (CLI, magic, REST, spec.json)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

# a byte that is not UTF-8 in argv reaches Python as a lone surrogate (surrogateescape)
BAD = "x\udcff"


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("name", {"name": BAD}),
        ("display_name", {"display_name": BAD}),
        ("script", {"script": f"{BAD}.py"}),
        ("code", {"script": None, "code": f"print('{BAD}')"}),
        ("command", {"script": None, "command": ("python", BAD)}),
        ("args", {"args": ("--lr", BAD)}),
        ("env", {"env": {"A": BAD}}),
        ("secrets", {"secrets": {"A": f"env:{BAD}"}}),
        ("mounts", {"mounts": (BAD,)}),
        ("image", {"image": BAD}),
        ("workdir", {"workdir": BAD}),
        ("env_from", {"env_from": BAD}),
    ],
)
def test_a_lone_surrogate_in_any_string_is_bad_input_naming_the_field(field: str, changes: dict) -> None:
    with pytest.raises(BadInputError) as err:
        JobSpec(**{"name": "run", "script": "train.py", **changes})
    assert err.value.field == field
    assert "UTF-8" in err.value.message and err.value.hint
    str(err.value).encode("utf-8")  # the message itself prints anywhere


def test_paths_too_long_for_the_file_system_are_refused_before_use() -> None:
    with pytest.raises(BadInputError, match="255") as err:
        JobSpec(name="run", script="a" * 300 + ".py")
    assert err.value.field == "script"


@pytest.mark.parametrize("budget", ["1e9999999", Decimal("1E+9999999"), 1e300, "-1", 0, "abc", "NaN", float("inf")])
def test_a_budget_past_the_bound_or_not_positive_is_refused(budget: object) -> None:
    with pytest.raises(BadInputError) as err:
        JobSpec(name="run", script="train.py", budget=budget)
    assert err.value.field == "budget" and "at most" in (err.value.hint or "")


def test_good_values_still_pass() -> None:
    spec = JobSpec(name="Café run", script="train.py", budget="25.50", env={"LR": 0.1}, args=("--x", "ü"))
    assert spec.budget == Decimal("25.50") and spec.env == {"LR": "0.1"} and spec.display_name == "Café run"
    assert JobSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    "argv",
    [
        ["--name", BAD],
        ["--env", f"A={BAD}"],
        ["--budget", "1e9999999"],
        [f"{BAD}.py"],
    ],
)
def test_launch_dry_run_refuses_bad_arguments_with_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["launch", *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    # the flag the user typed, not the core's field name (issue 27)
    assert "JobSpec." not in err and "Traceback" not in err and "error: " in err
