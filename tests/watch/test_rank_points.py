"""Every rank keeps its own speed and loss (``ranks/rankN.jsonl``); the watch reads them from the ends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import Job, JobSpec, JobState
from jupyter_starverse.runtime import _metrics
from jupyter_starverse.watch import read_rank_points


@pytest.fixture
def rank2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process looks like rank 2 of a 4-rank job whose run folder is ``tmp_path/run``."""
    run = tmp_path / "run"
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(run))
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    sv.job_env.cache_clear()
    yield run
    _metrics.close_metrics()
    sv.job_env.cache_clear()


def test_a_rank_records_itself_at_most_every_few_seconds(rank2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(_metrics.time, "time", lambda: clock[0])
    for step in range(10):  # 10 steps in 1 s: one record (the first), not ten
        sv.log_metrics(step, loss=3.0 - step * 0.1, tokens_per_s=2048)
        clock[0] += 0.1
    clock[0] += _metrics.RANK_EVERY_S
    sv.log_metrics(30, loss=1.5, tokens_per_s=4096)
    _metrics.close_metrics()
    assert read_metrics(rank2) == []  # metrics.jsonl stays rank 0's (and all_ranks records)
    lines = (rank2 / "ranks" / "rank2.jsonl").read_text().splitlines()
    assert len(lines) == 2

    job = Job("j-1", "local", JobSpec(name="j", code="x=1", procs_per_node=4), JobState.RUNNING, str(rank2), 0.0)
    points = read_rank_points(job)
    assert list(points) == [2]
    assert [(p.step, p.values["loss"], p.rank) for p in points[2]] == [(0, 3.0, 2), (30, 1.5, 2)]
    assert points[2][-1].time == pytest.approx(1000.0 + 1.0 + _metrics.RANK_EVERY_S)


def test_a_finished_rank_records_its_last_step(rank2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 400 steps in 1 s: rank 0 logs all, the others every few seconds; at the end every rank's
    # record says 400 (was 384 beside rank 0's 400 after a success: read as "stopped early")
    clock = [1000.0]
    monkeypatch.setattr(_metrics.time, "time", lambda: clock[0])
    for step in range(1, 401):
        sv.log_metrics(step, loss=1.0 / step)
        clock[0] += 0.0025
    _metrics.close_metrics()
    lines = (rank2 / "ranks" / "rank2.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 400]
    _metrics.close_metrics()  # closing twice writes nothing more
    assert len((rank2 / "ranks" / "rank2.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("environ", "mode"),
    [
        ({}, "offline"),  # nothing configured: the run stays in the run folder, nothing leaves the machine
        ({"WANDB_API_KEY": "k"}, "online"),  # the user gave a key (a secret by reference): online
        ({"WANDB_API_KEY": "  "}, "offline"),
        ({"WANDB_API_KEY": "k", "STARVERSE_WANDB": "offline"}, "offline"),  # our setting decides
        ({"STARVERSE_WANDB": "online"}, "online"),  # e.g. a key kept in ~/.netrc by `wandb login`
        ({"STARVERSE_WANDB": "off", "WANDB_API_KEY": "k"}, "disabled"),
        ({"WANDB_MODE": "online"}, "online"),
        ({"WANDB_MODE": "dryrun", "WANDB_API_KEY": "k"}, "offline"),
        ({"WANDB_MODE": "disabled"}, "disabled"),
    ],
)
def test_wandb_is_online_only_when_the_user_configured_it(environ: dict[str, str], mode: str) -> None:
    assert _metrics.wandb_mode(environ) == mode


def test_a_rank_that_logs_in_its_own_loop_records_its_last_step_when_it_exits(tmp_path: Path) -> None:
    # a script's own loop (no sv.steps, no close_metrics): the monitor's final step of rank 1 is
    # its last one (6), as rank 0's is, not the first one that was due (1)
    import os
    import subprocess
    import sys

    run = tmp_path / "run"
    code = "from jupyter_starverse import runtime as sv\n[sv.log_metrics(s, loss=1.0 / (s + 1)) for s in range(6)]\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARVERSE_")}
    env.update({"STARVERSE_EXPERIMENT_DIR": str(run), "RANK": "1", "WORLD_SIZE": "2", "STARVERSE_WANDB": "off"})
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    steps = [json.loads(line)["step"] for line in (run / "ranks" / "rank1.jsonl").read_text().splitlines()]
    assert steps == [0, 5]
