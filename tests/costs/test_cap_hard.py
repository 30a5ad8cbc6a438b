"""The local cap stops a job for sure before its budget; small budgets are metered exactly."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.costs import BUDGET_REASON_PREFIX, NodeInterval, check_budget, load_price_table, read_cost
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec, JobState

IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    time.sleep(0.1)
"""


def _prices(tmp_path: Path, per_hour: str) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"currency": "CNY", "gpus": {"rtx4090": {"on_demand": "1.8"}},
                                "cpu_node": {"on_demand": per_hour}}))  # fmt: skip
    return path


def _settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_hour: str) -> Settings:
    monkeypatch.setenv("STARVERSE_PRICES", str(_prices(tmp_path, per_hour)))
    monkeypatch.setenv("STARVERSE_HOME", str(tmp_path / "home"))
    return Settings.from_env()


def test_a_sub_cent_budget_trips_metered_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path, monkeypatch, "0.36")  # 0.0001 CNY per second
    table = load_price_table(settings)
    spec = JobSpec(name="tiny", code="pass", budget=Decimal("0.0005"))
    before = check_budget(spec, [NodeInterval(0, 0.0, None)], table, now=4.0)
    assert not before.stop and before.cost.amount == Decimal("0.00") and before.cost.exact == Decimal("0.0004")
    at = check_budget(spec, [NodeInterval(0, 0.0, None)], table, now=5.0)
    assert at.stop and at.cost.amount == Decimal("0.00")  # rounded for display only
    ahead = check_budget(spec, [NodeInterval(0, 0.0, None)], table, now=1.0, hard_lookahead=4.0)
    assert ahead.hard_stop and ahead.reason and ahead.reason.startswith(BUDGET_REASON_PREFIX)


def test_a_budget_smaller_than_the_time_to_a_first_checkpoint_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path, monkeypatch, "360")  # 0.1 CNY per second
    backend = LocalBackend(settings)  # 30 s grace: stopped 31.5 s before the cap, 10 s to start
    with pytest.raises(BadInputError, match=r"lasts 20\.0 s at 0\.1 CNY/s, less than the 42 s") as err:
        backend.submit(JobSpec(name="short", code="pass", budget=Decimal("2")))
    assert err.value.field == "budget" and err.value.hint and "at least 4.15 CNY" in err.value.hint
    assert backend.list() == []
    backend.validate(JobSpec(name="enough", code="pass", budget=Decimal("6")))  # 60 s: accepted


@pytest.mark.slow
def test_a_job_that_ignores_sigterm_is_killed_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path, monkeypatch, "360")  # 0.1 CNY per second
    budget = Decimal("2.5")  # 25 s: stopped gracefully ~9.5 s before, killed ~2 s before the cap
    backend = LocalBackend(settings, grace=8)
    job = backend.submit(JobSpec(name="stubborn", code=IGNORES_SIGTERM, budget=budget, accelerator="cpu"))
    done = backend.wait(job.id, timeout=120)
    assert done.state is JobState.CANCELLED
    assert done.reason and done.reason.startswith(BUDGET_REASON_PREFIX) and "hard stop (SIGKILL" in done.reason
    record = read_cost(done.experiment_dir)
    assert record.cost.amount <= budget and record.cost.exact_amount <= budget
    assert not record.cost.running
    assert record.reason == done.reason
    time.sleep(0.5)
    from jupyter_starverse._procs import job_processes

    assert job_processes(job.id) == []
