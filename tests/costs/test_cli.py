"""``starverse cost ...`` and ``%sv cost ...``: one parser, two front doors."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.cli import main
from jupyter_starverse.costs import Comparison, Estimate, NodeInterval, job_cost, load_price_table, write_cost
from jupyter_starverse.jobmodel import JobSpec


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_seed_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "cost", "estimate", "--gpu", "rtx4090", "--cards", "32", "--hours", "4")
    assert code == 0
    assert out.splitlines()[0] == "32 x rtx4090 for 4h, on_demand: estimated 230.40 CNY"


def test_estimate_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("cost", "estimate", "--gpu", "rtx4090", "--cards", "32", "--duration", "4h", "--billing", "spot", "--json")
    code, out, _ = _run(capsys, *argv)
    assert code == 0
    data = json.loads(out)
    assert (data["low"], data["high"], data["currency"]) == ("51.20", "153.60", "CNY")


def test_all_billing_modes_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("cost", "estimate", "--gpu", "rtx4090", "--cards", "32", "--duration", "3d", "--billing", "all", "--json")
    code, out, _ = _run(capsys, *argv)
    assert code == 0
    data = json.loads(out)
    assert [r["billing"] for r in data["rows"]] == ["on_demand", "daily", "weekly", "spot"]
    assert data["cheapest"]["billing"] == "spot"
    code, out, _ = _run(capsys, *argv[:-1])
    assert "<- cheapest" in out and "2,903.04 CNY" in out


def test_compare_gpu_types(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "cost", "estimate", "--gpu", "a100-80g", "--cards", "8", "--hours", "2", "--compare")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 1 + 5 + 1  # header, 5 GPU types on demand, summary
    assert lines[-1] == "for 2h; cheapest: 8 x rtx4090 on_demand, 28.80 CNY"
    code, out, _ = _run(
        capsys,
        "cost",
        "estimate",
        "--gpu",
        "a100-80g",
        "--cards",
        "8",
        "--hours",
        "2",
        "--compare",
        "h100-80g",
        "--json",
    )
    assert [r["accelerator"] for r in json.loads(out)["rows"]] == ["a100-80g", "h100-80g"]


def test_cpu_mode_is_the_default_type(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "cost", "estimate", "--cards", "3", "--hours", "10")
    assert code == 0
    assert out.startswith("3 x CPU node for 10h, on_demand: estimated 3.00 CNY")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--gpu", "v100", "--hours", "1"), "no price for GPU type 'v100'"),
        (("--gpu", "rtx4090", "--hours", "-4"), "must be positive"),
        (("--gpu", "rtx4090", "--hours", "0"), "must be positive"),
        (("--gpu", "rtx4090", "--hours", "100000"), "more than a year"),
        (("--gpu", "rtx4090", "--hours", "nan"), "not a number of hours"),
        (("--gpu", "rtx4090", "--hours", "x"), "not a number of hours"),
        (
            (
                "--gpu",
                "rtx4090",
            ),
            "how long will the job run",
        ),
        (("--gpu", "rtx4090", "--hours", "1", "--duration", "1h"), "either --hours or --duration"),
        (("--gpu", "rtx4090", "--duration", "soon"), "not a duration"),
        (("--gpu", "rtx4090", "--hours", "1", "--billing", "hourly"), "invalid choice: 'hourly'"),
        (("--gpu", "rtx4090", "--hours", "1", "--cards", "0"), "count must be a whole number"),
        (("--gpu", "rtx4090", "--hours", "1", "--cards", "2.5"), "not a whole number"),
        (("--gpu", "rtx4090", "--hours", "1", "--compare", "v100"), "v100"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = _run(capsys, "cost", "estimate", *argv)
    assert code == 2
    assert out == ""
    assert message in err


def test_malformed_price_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text('{"currency": "CNY", "gpus": {"rtx4090": {"on_demand": "1,8"}}, "cpu_node": {"on_demand": "0.1"}}')
    monkeypatch.setenv("STARVERSE_PRICES", str(bad))
    code, _, err = _run(capsys, "cost", "prices")
    assert code == 2
    assert "gpus.rtx4090.on_demand" in err and "not an amount" in err


def test_prices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "cost", "prices", "--json")
    assert code == 0
    assert json.loads(out)["gpus"]["a100-80g"]["on_demand"] == "6.5"


def test_total(capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings.from_env()
    table = load_price_table(settings)
    spec = JobSpec(name="t", script="t.py", accelerator="rtx4090", procs_per_node=2)
    run = settings.experiments / "t" / "runs" / "t-1"
    run.mkdir(parents=True)
    write_cost(run, job_cost(spec, [NodeInterval(0, 0.0, 3600.0)], table, now=3600.0, job_id="t-1", user=settings.user))
    code, out, _ = _run(capsys, "cost", "total")
    assert code == 0
    assert out.splitlines()[0] == f"{settings.user}: 3.60 CNY over 1 run(s), 0 running"
    code, out, _ = _run(capsys, "cost", "total", "--user", "somebody-else", "--json")
    assert json.loads(out)["amounts"] == []


def test_unknown_job(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "cost", "job", "no-such-job")
    assert code == 3
    assert "no-such-job" in err


def test_bare_cost_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "cost")
    assert code == 0
    assert "estimate" in out and "total" in out


def test_magic_returns_the_objects() -> None:
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import get_ipython

    ip: Any = get_ipython()
    ip.run_line_magic("load_ext", "jupyter_starverse")
    est = ip.run_line_magic("sv", "cost estimate --gpu rtx4090 --cards 32 --hours 4")
    assert isinstance(est, Estimate) and est.amount == Decimal("230.40")
    cmp = ip.run_line_magic("sv", "cost estimate --gpu rtx4090 --cards 32 --duration 3d --billing all")
    assert isinstance(cmp, Comparison) and cmp.cheapest.billing == "spot"
    with pytest.raises(UsageError, match="no price for GPU type"):
        ip.run_line_magic("sv", "cost estimate --gpu v100 --hours 1")


def test_job_meter(capsys: pytest.CaptureFixture[str]) -> None:
    from .test_server import _finished_run

    _finished_run(Settings.from_env().experiments, "exp-2", budget="7.40")
    code, out, _ = _run(capsys, "cost", "job", "exp-2")
    assert code == 0
    assert out.strip() == "7.40 CNY so far (4h6m40s card-time, on_demand at 1.80 CNY/card-h); budget 7.40 CNY reached"


def test_launch_dry_run_shows_the_price_first(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    argv = ("launch", "--nodes", "2", "--procs", "2", "--steps", "5", "--budget", "1", "--dry-run")
    code, out, err = _run(capsys, *argv)
    assert code == 0
    # the price comes first, on stderr, so stdout stays exactly the document
    assert err.splitlines()[0] == "# cost: 2 x CPU node, on_demand: 0.20 CNY/h; budget 1.00 CNY, lasts about 5h"
    assert [n["index"] for n in yaml.safe_load(out)["nodes"]] == [0, 1]
    code, out, _ = _run(capsys, "launch", "--nodes", "2", "--procs", "2", "--dry-run", "--billing", "spot", "--json")
    cost = json.loads(out)["cost"]
    assert (cost["per_hour_low"], cost["per_hour_high"]) == ("0.08", "0.16")


def test_train_dry_run_says_why_a_job_is_not_priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_starverse.cli import parse
    from jupyter_starverse.client import Starverse

    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"currency": "CNY", "gpus": {"x": {"on_demand": "1"}}, "cpu_node": {"on_demand": "1"}})
    )
    monkeypatch.setenv("STARVERSE_PRICES", str(prices))
    client = Starverse(Settings.from_env())
    args = parse(["train", "--nodes", "1", "--billing", "spot", "--dry-run"], cell="print(1)", notebook=True)
    preview = args.run(client, args)
    assert preview.cost == "not priced: the " + str(prices) + " price table has no spot price for cpu" + (
        " (choose on_demand, daily or weekly, or add a spot range to the price file)"
    )
    assert str(preview).startswith("# cost: not priced: ")
