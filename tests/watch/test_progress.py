from __future__ import annotations

from decimal import Decimal

import pytest

from jupyter_starverse.experiments._metrics import MetricPoint
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, NodeStatus
from jupyter_starverse.watch._progress import format_duration, summarize


def _job(state: JobState = JobState.RUNNING, *, steps: int | None = 10, finished: float | None = None) -> Job:
    spec = JobSpec(name="t", code="print(1)", nodes=2, procs_per_node=2, steps=steps)
    nodes = tuple(NodeStatus(index=i, state=state, pid=100 + i) for i in range(2))
    return Job(
        id="t-1",
        backend="local",
        spec=spec,
        state=state,
        experiment_dir="/x",
        created=1000.0,
        started=1010.0,
        finished=finished,
        nodes=nodes,
    )


def _records() -> list[MetricPoint]:
    out = []
    for step in range(5):
        for rank in (0, 1):
            # rank 1 logs a different loss: the chart must follow rank 0 only
            loss = 3.0 - step * 0.5 if rank == 0 else 100.0
            out.append(MetricPoint(step, {"loss": loss, "lr": 0.1}, 2000.0 + step * 0.5, rank))
    return out


def test_summary_of_a_running_job() -> None:
    p = summarize(_job(), _records(), now=1030.0)
    assert p.step == 4
    assert p.total_steps == 10
    assert p.fraction == pytest.approx(0.5)
    assert p.metric == "loss"
    assert p.points == ((0, 3.0), (1, 2.5), (2, 2.0), (3, 1.5), (4, 1.0))
    assert p.value == 1.0
    assert p.steps_per_s == pytest.approx(2.0)
    assert p.eta_s == pytest.approx(2.5)  # 5 steps left at 2 steps/s
    assert p.elapsed_s == pytest.approx(20.0)
    assert [r.rank for r in p.ranks] == [0, 1, 2, 3]
    assert [r.last_step for r in p.ranks] == [4, 4, None, None]
    assert "step 5/10 (50%)" in p.line()
    assert "ETA 2s" in p.line()


def test_finished_job_uses_its_end_time_and_no_eta_in_line() -> None:
    p = summarize(_job(JobState.SUCCEEDED, finished=1070.0), _records(), now=99999.0)
    assert p.elapsed_s == pytest.approx(60.0)
    assert "ETA" not in p.line()
    assert p.to_json()["state"] == "succeeded"


def test_no_metrics_yet_and_unknown_total() -> None:
    p = summarize(_job(JobState.PENDING, steps=None), [], now=1030.0)
    assert p.step is None and p.fraction is None and p.eta_s is None and p.points == ()
    assert p.elapsed_s == 0.0
    assert p.metric is None


def test_metric_other_than_loss_is_charted() -> None:
    recs = [MetricPoint(s, {"accuracy": s / 10}, 1.0 + s, 0) for s in range(3)]
    p = summarize(_job(), recs, now=1030.0)
    assert p.metric == "accuracy"
    assert p.points[-1] == (2, 0.2)


def test_cost_text_passed_through() -> None:
    p = summarize(_job(), [], now=1030.0, cost="not priced: no price for GPU type 'x'")
    assert p.cost is None
    assert p.cost_text is not None and p.cost_text.startswith("not priced")
    assert p.to_json()["cost"] is None


def test_cost_from_the_meter(settings) -> None:
    import dataclasses

    from jupyter_starverse.costs import CostService, intervals_of

    job = _job(JobState.SUCCEEDED, finished=1010.0 + 3600)
    nodes = tuple(dataclasses.replace(n, started=1010.0, finished=1010.0 + 3600) for n in job.nodes)
    job = dataclasses.replace(job, nodes=nodes)
    service = CostService(settings)
    cost = service.meter(job, now=job.finished)
    p = summarize(job, [], cost=cost)
    assert p.cost == cost.amount
    assert p.cost > Decimal(0)
    assert p.currency == cost.currency
    assert intervals_of(job)


@pytest.mark.parametrize(("secs", "text"), [(0, "0s"), (59.4, "59s"), (75, "1m15s"), (3700, "1h01m"), (-3, "0s")])
def test_format_duration(secs: float, text: str) -> None:
    assert format_duration(secs) == text


def test_rank_records_place_ranks_and_mark_failures() -> None:
    from jupyter_starverse.watch._progress import RankRecord

    records = [
        # torchrun put rank 0 on node 1: the record wins over the launch order
        RankRecord(rank=0, node=1, local_rank=0, pid=11, attempt=0),
        RankRecord(rank=1, node=1, local_rank=1, pid=12, attempt=1, error="RuntimeError: boom", error_attempt=0),
        RankRecord(rank=2, node=0, local_rank=0, pid=13, attempt=0, error="ValueError: bad", error_attempt=0),
    ]
    p = summarize(_job(), [], now=1030.0, ranks=records)
    by_rank = {r.rank: r for r in p.ranks}
    assert by_rank[0].node == 1 and by_rank[0].pid == 11
    # rank 1 failed on attempt 0 but was restarted (attempt 1): running again, no error shown
    assert by_rank[1].state is JobState.RUNNING and by_rank[1].error is None and by_rank[1].restarts == 1
    assert by_rank[2].state is JobState.FAILED and by_rank[2].error == "ValueError: bad"
    # rank 3 has no worker yet
    assert by_rank[3].state is JobState.PENDING and by_rank[3].pid is None


def test_cost_text_names_the_budget(settings) -> None:
    import dataclasses

    from jupyter_starverse.costs import CostService

    job = _job(JobState.RUNNING)
    job = dataclasses.replace(job, spec=job.spec.replace(budget="0.5"))
    nodes = tuple(dataclasses.replace(n, started=1010.0) for n in job.nodes)
    job = dataclasses.replace(job, nodes=nodes)
    service = CostService(settings)
    early = summarize(job, [], now=1011.0, cost=service.meter(job, now=1011.0))
    assert early.cost_text is not None and early.cost_text.endswith(f"of 0.5 {early.currency} budget")
    late = summarize(job, [], now=10**6, cost=service.meter(job, now=10**6))
    assert late.cost_text is not None and late.cost_text.endswith("budget (reached)")


def test_each_rank_shows_its_own_speed_loss_tokens_and_tflops() -> None:
    lead = [
        MetricPoint(step, {"loss": 3.0 - step * 0.5, "tokens_per_s": 5120.0, "tflops_per_card": 1.2}, 2000.0 + step, 0)
        for step in range(3)
    ]
    # rank 2 kept its own records (ranks/rank2.jsonl): 4 steps in 2 s, its own loss
    own = {2: [MetricPoint(0, {"loss": 3.1}, 2000.0, 2), MetricPoint(4, {"loss": 1.9}, 2002.0, 2)]}
    p = summarize(_job(), lead, now=2010.0, rank_points=own)
    r0, r1, r2, r3 = p.ranks
    assert (r0.steps_per_s, r0.value, r0.tokens_per_s, r0.tflops) == (pytest.approx(1.0), 2.0, 5120.0, 1.2)
    assert r0.stats_text() == "1.00 steps/s  loss 2  5,120 tokens/s  1.2 TFLOPS"
    assert (r2.steps_per_s, r2.metric, r2.value, r2.last_step) == (pytest.approx(2.0), "loss", 1.9, 4)
    assert r2.stats_text() == "2.00 steps/s  loss 1.9"
    assert r1.stats_text() == r3.stats_text() == ""  # ranks that kept no record show nothing made up
    # the job's line carries the lead rank's throughput and TFLOPS, as the seed article's logs do
    fields = dict(p.line_fields())
    assert fields["tokens"] == "5,120 tokens/s" and fields["tflops"] == "1.2 TFLOPS/card"
    data = p.to_json(points=False)
    assert data["tflops"] == 1.2 and data["ranks"][2]["steps_per_s"] == pytest.approx(2.0)


def test_a_starting_job_shows_its_phase_not_running_with_every_rank_pending() -> None:
    from jupyter_starverse.watch._progress import RankRecord

    job = _job()  # 2 nodes up, 4 ranks (2 x 2), nothing logged yet
    assert job.spec.world_size == 4
    three = [RankRecord(rank=r, node=r // 2, local_rank=r % 2, pid=10 + r) for r in range(3)]
    p = summarize(job, [], now=1010.0, ranks=three)
    assert p.phase == "waiting for rendezvous (3/4 ranks up)"
    assert dict(p.line_fields())["phase"] == p.phase and p.to_json()["phase"] == p.phase
    assert "rendezvous (3/4 ranks up)" in p.line()
    four = [*three, RankRecord(rank=3, node=1, local_rank=1, pid=13)]
    assert "loading the model (4/4 ranks up)" in (summarize(job, [], now=1010.0, ranks=four).phase or "")
    # once a step is logged, and after the end, the phase is gone
    rec = [MetricPoint(0, {"loss": 3.0}, 1001.0, 0)]
    assert summarize(job, rec, now=1010.0, ranks=four).phase is None
    assert summarize(_job(JobState.SUCCEEDED, finished=1020.0), [], now=1030.0).phase is None
