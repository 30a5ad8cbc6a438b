"""``jobs show``: ranks, restarts and the cost so far, in text and in ``--json``."""

from __future__ import annotations

import json

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.cli import main as cli_main
from tests.widgets._jobs import quick_job, slow_job


def test_show_json_has_ranks_restarts_and_cost(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    handle = quick_job(settings)
    assert cli_main(["jobs", "show", handle.id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["restarts"] == 0
    (rank,) = shown["ranks"]
    assert rank["rank"] == 0 and rank["node"] == 0 and rank["state"] == "succeeded" and rank["last_step"] == 4
    assert rank["pid"]
    assert shown["cost"]["currency"] and shown["cost"]["text"]  # the meter's reading, as a decimal string
    assert shown["cost"]["amount"] is None or float(shown["cost"]["amount"]) >= 0

    assert cli_main(["jobs", "show", handle.id]) == 0
    text = capsys.readouterr().out
    assert "progress    step 5/5" in text  # counted as the monitor and the panel count
    assert f"cost        {shown['cost']['text']}\n" in text  # finished: no "so far"
    rank_line = next(line for line in text.splitlines() if line.strip().startswith("rank 0"))
    assert rank_line.split()[:5] == ["rank", "0", "node0", "succeeded", "step"] and "loss 0.4" in rank_line


@pytest.mark.slow
def test_show_of_a_running_job_says_the_cost_so_far(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    handle = slow_job(settings, steps=40)
    try:
        assert cli_main(["jobs", "show", handle.id]) == 0
        text = capsys.readouterr().out
        assert " so far" in text.split("cost", 1)[1].splitlines()[0]
        assert "rank 0  node0  running" in text
    finally:
        handle.cancel()


def test_show_says_the_tokens_per_second_and_tflops_the_job_logged(tmp_path: object) -> None:
    """The rates ``runtime.Throughput`` measures, named as the monitor names them (not raw keys)."""
    from jupyter_starverse import runtime as sv
    from jupyter_starverse.cli._jobs import JobDetail
    from jupyter_starverse.experiments import MetricPoint, progress
    from jupyter_starverse.jobmodel import Job, JobSpec, JobState

    meter = sv.Throughput(flops_per_token=6e9, cards=2)
    rates = meter.step(4096)
    assert rates["tflops_per_card"] == pytest.approx(6e9 * rates["tokens_per_s"] / 2 / 1e12)
    assert "tflops_per_card" not in sv.Throughput().step(10)  # no FLOPs given: no TFLOPS claimed
    points = [
        MetricPoint(0, {"loss": 2.0}),
        MetricPoint(1, {"loss": 1.5, "tokens_per_s": 5120.0, "tflops_per_card": 1.2}),
    ]
    job = Job("j1", "local", JobSpec(name="rates", command=("true",), steps=2), JobState.SUCCEEDED, str(tmp_path), 0.0)
    text = str(JobDetail(job, progress(points, total=2), None, None))
    line = next(ln for ln in text.splitlines() if ln.startswith("throughput"))
    assert line.split(None, 1)[1] == "5,120 tokens/s, 1.2 TFLOPS/card"
    assert "tokens_per_s" not in text and "loss 1.5" in text
