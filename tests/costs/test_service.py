"""``client.costs``: the cost functions bound to the settings (prices, experiments, user)."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.costs import CostService, Resources, parse_price_table
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import NodeRecord, RunStatus, write_status
from jupyter_starverse.jobmodel import MAX_BUDGET, Job, JobSpec, JobState, NodeStatus

from .conftest import small_doc

SPEC = JobSpec(name="svc", script="t.py", nodes=4, procs_per_node=8, accelerator="rtx4090")


def test_client_costs_shares_the_price_table(client: Starverse) -> None:
    assert client.costs.prices is client.prices
    assert client.costs.estimate(SPEC, "4h").amount == Decimal("230.40")


def test_preview_on_demand_with_a_budget(client: Starverse) -> None:
    preview = client.costs.preview(SPEC.replace(budget="100"), "4h")
    assert preview.per_hour_high == Decimal("57.6")  # 32 cards x 1.8
    assert preview.budget_lasts == 6250  # 100 / 57.6 h = 1h44m10s
    assert preview.estimate is not None and preview.estimate.amount == Decimal("230.40")
    assert str(preview).splitlines()[0] == (
        "32 x rtx4090, on_demand: 57.60 CNY/h; estimated 230.40 CNY for 4h; budget 100.00 CNY, lasts about 1h44m10s"
    )
    assert preview.to_json()["budget_lasts"] == 6250


def test_preview_warns_when_the_budget_will_stop_the_job(client: Starverse) -> None:
    short = client.costs.preview(SPEC.replace(budget="100"), "1h30m")  # 86.40
    assert short.warning is None
    long = client.costs.preview(SPEC.replace(budget="100"), "4h")
    assert long.warning == (
        "the estimate 230.40 CNY exceeds the 100.00 CNY budget: the job will be stopped after about 1h44m10s"
    )
    assert str(long).endswith("\n  warning: " + long.warning)
    daily = client.costs.preview(SPEC.replace(billing="daily", budget="500"))
    assert daily.warning is not None and "would be stopped at once" in daily.warning


def test_preview_spot_package_and_cpu(client: Starverse) -> None:
    spot = client.costs.preview(SPEC.replace(billing="spot", budget="10"))
    assert (spot.per_hour_low, spot.per_hour_high) == (Decimal("12.8"), Decimal("38.4"))
    assert spot.budget_lasts == 937  # counted at the high end
    daily = client.costs.preview(SPEC.replace(billing="daily", budget="10"))
    assert daily.minimum == Decimal("967.68")  # 24 h x 1.26 x 32, bought at start
    assert daily.budget_lasts is None
    assert "at least 967.68 CNY (first package)" in str(daily)
    cpu = client.costs.preview(SPEC.replace(accelerator="cpu"))
    assert cpu.resources == Resources("cpu", 4) and cpu.per_hour_high == Decimal("0.4")


def test_compare_all_types(client: Starverse) -> None:
    cmp = client.costs.compare(Resources("l40s", 2), "1h", billings=["on_demand"], accelerators=["all"])
    assert len(cmp.rows) == len(client.prices.gpus)


def _job(settings: Settings, job_id: str, *, started: float, experiment_dir: Path | None = None) -> Job:
    run = experiment_dir or settings.experiments / "svc" / "runs" / job_id
    run.mkdir(parents=True, exist_ok=True)
    return Job(
        id=job_id,
        backend="local",
        spec=SPEC.replace(nodes=1),
        state=JobState.RUNNING,
        experiment_dir=str(run),
        created=started,
        started=started,
        nodes=(NodeStatus(0, JobState.RUNNING, started=started),),
    )


def test_meter_record_and_total(client: Starverse, settings: Settings) -> None:
    now = time.time()
    job = _job(settings, "svc-1", started=now - 3600)
    assert client.costs.recorded(job) is None
    cost = client.costs.meter(job, now=now)
    assert cost.amount == Decimal("14.40") and cost.user == settings.user
    record = client.costs.record(job, now=now)
    assert client.costs.recorded(job) == record
    assert client.costs.total().amounts == (("CNY", Decimal("14.40")),)
    assert client.costs.total("nobody").amounts == ()


def test_meter_prefers_every_launch_in_status_json(client: Starverse, settings: Settings) -> None:
    now = time.time()
    job = _job(settings, "svc-2", started=now - 60)
    # The node ran twice (relaunched): 100 s, then 60 s so far. The Job only knows the first start.
    node = NodeRecord(0, state="running", started=now - 300, launches=((now - 300, now - 200), (now - 60, None)))
    write_status(Path(job.experiment_dir), RunStatus(job_id=job.id, state="running", nodes=(node,)))
    assert client.costs.meter(job, now=now).nodes[0].seconds == 160


def test_record_outside_the_experiments_root_is_refused(client: Starverse, settings: Settings, tmp_path: Path) -> None:
    job = _job(settings, "svc-3", started=time.time(), experiment_dir=tmp_path / "elsewhere")
    with pytest.raises(BadInputError, match="outside the experiments folder"):
        client.costs.record(job)


def test_check_budget_of_a_job(client: Starverse, settings: Settings) -> None:
    now = time.time()
    job = _job(settings, "svc-4", started=now - 3600)
    capped = Job(**{**job.__dict__, "spec": job.spec.replace(budget="14.40")})
    assert client.costs.check(capped, now=now).stop
    assert not client.costs.check(job, now=now).stop


def test_a_service_with_its_own_table(settings: Settings) -> None:
    costs = CostService(settings, table=parse_price_table(small_doc(), source="ops"))
    assert costs.estimate(Resources("t4", 1), "1h").currency == "USD"
    with pytest.raises(BadInputError, match="rtx4090"):
        costs.preview(SPEC)


def test_preview_of_an_absurd_budget(client: Starverse) -> None:
    with pytest.raises(BadInputError, match="budget"):  # past the bound: the spec refuses it
        SPEC.replace(budget="1e999999")
    preview = client.costs.preview(SPEC.replace(budget=str(MAX_BUDGET)), "1h")
    assert preview.budget_lasts is None and preview.warning is None
