"""The budget cap on a real local job: the meter reaches the cap, the job gets SIGTERM,
checkpoints, and stops; the reason is recorded in the experiment folder."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.costs import BUDGET_REASON_PREFIX, read_cost
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import list_checkpoints, read_metrics
from jupyter_starverse.jobmodel import JobSpec, JobState
from tests.costs._scripts import FOREVER as SCRIPT

pytestmark = pytest.mark.slow


def _write_prices(path: Path, cpu_per_hour: Decimal) -> None:
    doc = {"currency": "CNY", "gpus": {"rtx4090": {"on_demand": "1.8"}}, "cpu_node": {"on_demand": str(cpu_per_hour)}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)  # the supervisor re-reads the table at every check: never let it see half a file


def test_capped_local_job_stops_after_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    budget = Decimal("4")
    prices = tmp_path / "prices.json"
    _write_prices(prices, Decimal("0.36"))  # 0.0001 per second: the budget lasts 11 hours
    monkeypatch.setenv("STARVERSE_PRICES", str(prices))
    client = Starverse(Settings.from_env())
    spec = JobSpec(name="capped", code=SCRIPT, accelerator="cpu", steps=100_000, budget=budget)
    job = client.launch(spec)

    # Start-up time varies with the machine's load; once the job trains, the operator raises
    # the price so that the cap is reached about 40 s of node time from now.
    deadline = time.monotonic() + 240
    while not read_metrics(Path(job.experiment_dir), from_logs=False):
        assert time.monotonic() < deadline, "the job never started training"
        assert not client.attach(job.id).state.finished, client.attach(job.id).reason
        time.sleep(0.5)
    elapsed = client.costs.meter(client.attach(job.id)).unit_seconds
    _write_prices(prices, (budget * 3600 / (elapsed + 40)).quantize(Decimal("0.0001")))

    done = client.backend().wait(job.id, timeout=240)

    assert done.state is JobState.CANCELLED, done.reason
    assert done.reason is not None and done.reason.startswith(BUDGET_REASON_PREFIX)
    record = read_cost(done.experiment_dir)
    assert record.reason == done.reason
    assert record.cost.budget == budget
    assert not record.cost.running
    # Stopped early enough that the bill, checkpoint included, stays within the cap.
    assert budget / 4 < record.cost.amount <= budget
    fresh = Starverse(Settings.from_env())  # `client` holds the price table it loaded first
    assert record.cost == fresh.costs.meter(fresh.attach(job.id), now=record.cost.as_of)
    # The checkpoint was written on the way out (the script has no scheduled checkpoints).
    checkpoints = list_checkpoints(Path(done.experiment_dir))
    assert len(checkpoints) == 1
    assert checkpoints[0].step > 0
    logs = "".join(line.text + "\n" for line in client.backend().logs(job.id))
    assert f"stopping after step {checkpoints[0].step}: checkpoint saved" in logs
    # The per-user total counts the capped run.
    assert client.costs.total().amounts == (("CNY", record.cost.amount),)


SHORT = """
import torch
from jupyter_starverse import runtime as sv

sv.init()
model = torch.nn.Linear(2, 1)
for step in sv.steps(model=model, checkpoint_every=0):
    sv.log_metrics(step, loss=model(torch.ones(1, 2)).sum().item())
"""


def test_every_local_job_is_metered(settings: Settings) -> None:
    client = Starverse(settings)
    job = client.launch(JobSpec(name="metered", code=SHORT, accelerator="cpu", steps=3))
    done = client.backend().wait(job.id, timeout=240)
    assert done.state is JobState.SUCCEEDED, done.reason
    record = read_cost(done.experiment_dir)
    assert record.reason is None and record.cost.budget is None
    assert not record.cost.running and record.cost.unit_seconds > 0
    assert record.cost.amount == client.costs.meter(done, now=record.cost.as_of).amount
    assert client.costs.total().records[0].cost.job_id == job.id


def test_a_capped_job_must_be_priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"currency": "CNY", "gpus": {"rtx4090": {"on_demand": "1.8"}}, "cpu_node": {"on_demand": "0.1"}})
    )  # no spot price for CPU nodes
    monkeypatch.setenv("STARVERSE_PRICES", str(prices))
    client = Starverse(Settings.from_env())
    spec = JobSpec(name="unpriced", code=SHORT, accelerator="cpu", billing="spot", budget=Decimal("1"))
    with pytest.raises(BadInputError, match=r"cap cannot be enforced: .*no spot price") as err:
        client.launch(spec)
    assert err.value.field == "budget"
    assert client.jobs() == []
    # Without a cap the job may run unpriced; its meter says why instead of showing 0.
    client.backend().render(spec.replace(budget=None))
