"""Templates keep the global batch when a resume changes the world size (2x2 -> 1x3 keeps 32, not 24),
and the resume plan of a preview says so, or why it cannot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse.experiments import ExperimentPaths, batch_plan, checkpoint_name, plan_resume, record_checkpoint
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.runtime import _dist
from jupyter_starverse.runtime._metrics import close_metrics

FOUR = batch_plan(global_batch=32, micro_batch=8, world_size=4)  # 2 nodes x 2 ranks, 8 each


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    run = tmp_path / "run"
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(run))
    monkeypatch.setenv("STARVERSE_JOB_ID", "job-1")
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()
    yield run
    close_metrics()
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()


def test_an_uneven_split_keeps_every_sample_and_the_collectives_in_step() -> None:
    three = batch_plan(global_batch=32, micro_batch=8, world_size=3, uneven=True)
    assert [three.share(r) for r in range(3)] == [11, 11, 10] and three.accumulation == 2
    assert [three.chunks(r) for r in range(3)] == [[6, 5], [6, 5], [5, 5]]  # same count, each <= 8
    assert "global batch 32 kept; world size 4 -> 3" in three.change_from(FOUR)
    assert FOUR.even and not three.even and "11 or 10 samples" in str(three)
    with pytest.raises(Exception, match="multiple of 3"):  # the recipes keep their even split
        batch_plan(global_batch=32, micro_batch=8, world_size=3)


def test_a_resume_on_three_ranks_keeps_the_global_batch_of_four(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    sv.save_checkpoint(3, model=model, batch=FOUR.to_json())  # what sv.steps(batch=plan) records
    plan = sv.keep_global_batch(micro_batch=8, world_size=3)  # the 1x3 resume: 32, not 8 x 3 = 24
    assert plan.global_batch == 32 and sum(sum(plan.chunks(r)) for r in range(3)) == 32
    assert "global batch 32 kept; world size 4 -> 3, micro batch 8 -> 8, accumulation 1 -> 2" in capsys.readouterr().out
    assert sv.keep_global_batch(micro_batch=8, world_size=3, global_batch=12).global_batch == 32  # the run's wins
    assert "--global-batch 12 ignored" in capsys.readouterr().out


def _checkpoint(root: Path, exp: str, batch: dict[str, int] | None) -> None:
    run = ExperimentPaths.of(root, exp).run(f"{exp}-1")
    run.make()
    d = run.root / "checkpoints" / checkpoint_name(7)
    d.mkdir(parents=True)
    (d / ".metadata").write_bytes(b"dcp")
    (d / "meta.json").write_text(json.dumps({"step": 7, "world_size": 4, "time": 1.0, "batch": batch}))
    record_checkpoint(d, step=7, world_size=4, time=1.0)


def test_the_resume_plan_says_the_global_batch_is_kept_or_why_not(tmp_path: Path) -> None:
    _checkpoint(tmp_path, "lm", FOUR.to_json())
    spec = JobSpec(name="lm", script="x.py", nodes=1, procs_per_node=3)
    plan = plan_resume(ExperimentPaths.of(tmp_path, "lm"), new_world_size=3, data_parallel=spec.data_parallel)
    assert plan.new_batch is not None and plan.new_batch.global_batch == 32 and plan.new_batch.accumulation == 2
    assert "global batch 32 kept; world size 4 -> 3" in str(plan)
    assert plan.to_json()["keeps_global_batch"] is True

    tp = JobSpec(name="lm", script="x.py", procs_per_node=4, template="tp", tensor_parallel=2)
    assert "world size 4 -> 2" in str(plan_resume(ExperimentPaths.of(tmp_path, "lm"), new_world_size=4,
                                                  data_parallel=tp.data_parallel))  # fmt: skip

    wide = plan_resume(ExperimentPaths.of(tmp_path, "lm"), new_world_size=64)  # 32 sequences over 64 ranks
    assert wide.new_batch is None and wide.to_json()["keeps_global_batch"] is False
    assert "global batch 32 cannot be kept" in str(wide) and "at least 64" in str(wide)

    _checkpoint(tmp_path, "old", None)  # a checkpoint without a recorded plan: nothing claimed
    assert "global batch" not in str(plan_resume(ExperimentPaths.of(tmp_path, "old"), new_world_size=3))
