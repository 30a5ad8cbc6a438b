"""A diverged run never becomes the resume point (issue 38, finding 1).

A script whose loss turns NaN checkpoints every step: the checkpoints written at or after the
first NaN are recorded unhealthy, retention keeps the healthy ones, the NaN error names the
last healthy checkpoint and the command to resume from it, and ``--resume`` starts from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import ConflictError
from jupyter_starverse.experiments import (
    CHECKPOINT_INDEX,
    ExperimentPaths,
    checkpoint_name,
    latest_checkpoint,
    plan_resume,
    read_metrics,
    scan_checkpoints,
    write_json,
)
from jupyter_starverse.runtime import _dist, _guards
from jupyter_starverse.runtime._metrics import close_metrics

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

# A linear model through the runtime's loop; its loss is NaN from step NAN_FROM on (the lr
# makes the weights NaN as well after the first NaN step), a checkpoint after every step.
DIVERGES = """
import os, torch
from jupyter_starverse import runtime as sv
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.ones(8, 4), torch.zeros(8, 1)
nan_from = int(os.environ.get("NAN_FROM", "-1"))
for step in sv.steps(10, model=model, optimizer=opt, checkpoint_every=1):
    loss = (model(x) - y).pow(2).mean()
    if 0 <= nan_from <= step:
        loss = loss * float("nan")
    opt.zero_grad()
    loss.backward()
    opt.step()
    sv.log_metrics(step, loss=loss)
print("finite weights:", all(bool(torch.isfinite(p).all()) for p in model.parameters()))
"""


def _run(run: Path, *, nan_from: int = -1, resume_from: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "STARVERSE_EXPERIMENT_DIR": str(run),
        "STARVERSE_JOB_ID": run.name,
        "NAN_FROM": str(nan_from),
    }
    if resume_from is not None:
        env["STARVERSE_RESUME_FROM"] = str(resume_from)
    return subprocess.run([sys.executable, "-c", DIVERGES], env=env, capture_output=True, text=True, timeout=120)


def _index(run: Path) -> list[dict[str, object]]:
    return json.loads((run / "checkpoints" / CHECKPOINT_INDEX).read_text())["checkpoints"]


def test_training_into_nan_with_a_checkpoint_every_step_resumes_from_the_healthy_one(tmp_path: Path) -> None:
    exp = ExperimentPaths.of(tmp_path, "diverge")
    first = exp.run("first").root
    out = _run(first, nan_from=3)  # NaN at steps 3, 4, 5: the guard (3 steps) stops the job at step 5
    assert out.returncode != 0 and "NonFiniteLossError" in out.stderr, out.stderr
    healthy = first / "checkpoints" / checkpoint_name(2)
    assert "(steps 3 to 5)" in out.stderr
    assert f"the last healthy checkpoint is step 2 ({healthy})" in out.stderr, out.stderr
    assert "--experiment diverge --resume" in out.stderr
    assert "checkpoint step-00000003 is unhealthy" in out.stdout

    # retention (keep 2) kept the two newest healthy checkpoints beside the two unhealthy ones
    entries = {e["step"]: e for e in _index(first)}
    assert sorted(entries) == [1, 2, 3, 4]
    assert [s for s, e in sorted(entries.items()) if e["healthy"]] == [1, 2]
    assert "the loss was not finite (loss=nan) since step 3" in str(entries[3]["problem"])
    assert "NaN or infinite" in str(entries[4]["problem"])  # the weights went NaN too
    assert healthy.is_dir() and not (first / "checkpoints" / checkpoint_name(0)).exists()

    plan = plan_resume(exp, new_world_size=1)
    assert plan.checkpoint is not None and plan.checkpoint.path == healthy and plan.start_step == 3
    assert {i.step: i.reason.split(":")[0] for i in plan.ignored} == {3: "unhealthy", 4: "unhealthy"}
    assert "checkpoint step 2" in str(plan) and "unhealthy" in str(plan)

    second = exp.run("second").root
    again = _run(second, resume_from=plan.checkpoint.path)
    assert again.returncode == 0, again.stderr
    assert "resumed from step-00000002" in again.stdout and "finite weights: True" in again.stdout
    points = read_metrics(second)
    assert [p.step for p in points] == list(range(3, 10))
    assert all(p.values["loss"] == p.values["loss"] for p in points)  # no NaN after the resume
    last = latest_checkpoint(exp)
    assert last is not None and last.step == 9 and last.path.parent.parent == second


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process is rank 0 of a run folder ``e/runs/own`` (a fresh loss guard)."""
    run = ExperimentPaths.of(tmp_path, "e").run("own")
    run.make()
    write_json(run.spec, {"name": "e"})
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(run.root))
    monkeypatch.setenv("STARVERSE_JOB_ID", "own")
    monkeypatch.delenv("STARVERSE_RESUME_FROM", raising=False)
    monkeypatch.delenv("STARVERSE_NAN_STEPS", raising=False)
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()
    _guards._LOSS.clear()
    yield run.root
    close_metrics()
    _guards._LOSS.clear()
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()


def test_nonfinite_weights_make_a_checkpoint_unhealthy_even_with_a_finite_loss(
    job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = torch.nn.Linear(3, 2)
    sv.log_metrics(0, loss=1.0)
    sv.save_checkpoint(0, model=model)
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    sv.log_metrics(1, loss=0.5)  # the loss looks fine: only the weights check sees it
    sv.save_checkpoint(1, model=model)
    scan = scan_checkpoints(job)
    assert [c.step for c in scan.trusted] == [0]
    assert [(c.step, c.healthy) for c in scan.unhealthy] == [(1, False)]
    assert "NaN or infinite" in str(scan.unhealthy[0].problem)
    meta = json.loads((job / "checkpoints" / checkpoint_name(1) / "meta.json").read_text())
    assert meta["healthy"] is False and "NaN or infinite" in meta["problem"]

    # a run told to resume from the unhealthy one explicitly refuses, saying why
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(job.parent / "next"))
    monkeypatch.setenv("STARVERSE_RESUME_FROM", str(job / "checkpoints" / checkpoint_name(1)))
    sv.job_env.cache_clear()
    with pytest.raises(ConflictError, match="unhealthy") as err:
        sv.load_latest(model=torch.nn.Linear(3, 2))
    assert err.value.hint and "--resume" in err.value.hint


def test_the_guard_still_marks_checkpoints_when_stopping_is_off(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARVERSE_NAN_STEPS", "0")
    model = torch.nn.Linear(3, 2)
    sv.log_metrics(0, loss=1.0)
    sv.save_checkpoint(0, model=model)
    for step in (1, 2, 3, 4):
        sv.log_metrics(step, loss=float("nan"))  # never stops: the limit is 0
        sv.save_checkpoint(step, model=model, keep=2)
    assert [c.step for c in scan_checkpoints(job).trusted] == [0]  # the only healthy one survives keep=2
    assert [c.step for c in scan_checkpoints(job).unhealthy] == [3, 4]
    sv.log_metrics(5, loss=0.25)  # finite again and finite weights: healthy again
    sv.save_checkpoint(5, model=model, keep=2)
    assert [c.step for c in scan_checkpoints(job).trusted] == [0, 5]
    assert sorted(p.name for p in (job / "checkpoints").iterdir() if p.name.startswith("step-")) == [
        checkpoint_name(s) for s in (0, 3, 4, 5)
    ]


@pytest.mark.slow
def test_a_local_torchrun_job_that_diverges_resumes_from_its_last_healthy_checkpoint(settings: Settings) -> None:
    """The same through the local backend: a real torchrun job, the preview's resume plan, a resumed job."""
    from jupyter_starverse.backends.local._local import LocalBackend
    from jupyter_starverse.client import Starverse
    from jupyter_starverse.jobmodel import JobSpec, JobState

    from ..backends._local import TINY

    diverges = TINY.replace(
        "    loss = (model(x) - y).pow(2).mean()\n",
        "    loss = (model(x) - y).pow(2).mean() * (float('nan') if step >= 3 else 1)\n",
    )
    backend = LocalBackend(settings)
    spec = JobSpec(name="nan", code=diverges, steps=1000, checkpoint_every=1, experiment="nan")
    job = backend.wait(backend.submit(spec).id, timeout=180)
    assert job.state is JobState.FAILED and "NonFiniteLossError" in (job.reason or ""), job.reason
    assert "the last healthy checkpoint is step 2" in (job.reason or ""), job.reason  # what jobs show says
    log = (Path(job.experiment_dir) / "logs" / "rank0.log").read_text()
    healthy = Path(job.experiment_dir) / "checkpoints" / checkpoint_name(2)
    assert f"the last healthy checkpoint is step 2 ({healthy})" in log and "--experiment nan --resume" in log

    plan = Starverse(settings).preview(spec.replace(resume=True)).resume
    assert plan is not None and plan.checkpoint is not None and plan.checkpoint.path == healthy
    assert "continues at step 3" in str(plan) and "unhealthy" in str(plan)

    again = backend.wait(backend.submit(spec.replace(name="nan-2", code=TINY, steps=6, resume=True)).id, timeout=180)
    assert again.state is JobState.SUCCEEDED, again.reason
    assert "resumed from step-00000002" in (Path(again.experiment_dir) / "logs" / "rank0.log").read_text()
    assert [p.step for p in read_metrics(Path(again.experiment_dir))] == [3, 4, 5]
