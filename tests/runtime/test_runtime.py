"""The runtime a training script imports: job environment, metrics, mounts, checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse.errors import NotFoundError
from jupyter_starverse.experiments import latest_checkpoint, list_checkpoints, read_metrics
from jupyter_starverse.runtime import JobEnv, _dist
from jupyter_starverse.runtime._metrics import close_metrics


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process looks like rank 0 of a job whose run folder is ``tmp_path/run``."""
    run = tmp_path / "run"
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(run))
    monkeypatch.setenv("STARVERSE_JOB_ID", "job-1")
    monkeypatch.setenv("STARVERSE_MOUNTS", json.dumps({"text": str(tmp_path / "data")}))
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()
    yield run
    close_metrics()
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()


def test_job_env_parses_what_the_launcher_sets() -> None:
    env = JobEnv.from_env(
        {
            "RANK": "3",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "4",
            "STARVERSE_NODE_INDEX": "1",
            "TORCHELASTIC_RESTART_COUNT": "2",
            "STARVERSE_EXPERIMENT_DIR": "/r",
            "STARVERSE_STEPS": "50",
            "STARVERSE_CHECKPOINT_EVERY": "oops",
            "STARVERSE_MOUNTS": '{"a": "/s/a"}',
            "STARVERSE_TEMPLATE": "fsdp",
        }
    )
    assert (env.rank, env.local_rank, env.world_size, env.node, env.restart) == (3, 1, 4, 1, 2)
    assert env.run_dir == Path("/r") and env.checkpoint_dir == Path("/r/checkpoints")
    assert env.steps == 50 and env.checkpoint_every is None  # a bad value falls back to the default
    assert env.mounts == {"a": "/s/a"} and env.template == "fsdp"
    outside = JobEnv.from_env({})
    assert (outside.rank, outside.world_size, outside.run_dir, outside.mounts) == (0, 1, None, {})


def test_log_metrics_appends_records_on_rank_zero(job: Path) -> None:
    sv.log_metrics(0, loss=2.5, lr=0.1)
    sv.log_metrics(1, loss=2.0)
    close_metrics()
    points = read_metrics(job)
    assert [(p.step, p.values) for p in points] == [(0, {"loss": 2.5, "lr": 0.1}), (1, {"loss": 2.0})]
    assert all(p.time is not None and p.rank == 0 for p in points)


def test_log_metrics_is_silent_on_other_ranks_unless_asked(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    sv.job_env.cache_clear()
    sv.log_metrics(0, loss=1.0)
    sv.log_metrics(0, all_ranks=True, grad_norm=3.0)
    close_metrics()
    assert [(p.rank, p.values) for p in read_metrics(job)] == [(2, {"grad_norm": 3.0})]


def test_mount_path_by_catalog_name(job: Path, tmp_path: Path) -> None:
    assert sv.mount_path("text") == tmp_path / "data"
    with pytest.raises(NotFoundError) as err:
        sv.mount_path("other")
    assert err.value.hint == "launch with --mount other"


def test_checkpoint_round_trip_keeps_only_the_newest(job: Path) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    for step in (4, 9, 14):
        sv.save_checkpoint(step, model=model, optimizer=opt, keep=2)
    assert [c.step for c in list_checkpoints(job)] == [9, 14]
    assert not list((job / "checkpoints").glob(".*"))  # no half-written folder left behind
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    assert sv.load_latest(model=model, optimizer=opt) == 15
    for key, value in model.state_dict().items():
        assert torch.equal(value, saved[key])
    ckpt = latest_checkpoint(job)
    assert ckpt is not None and ckpt.world_size == 1 and ckpt.job_id == "job-1"


SIGTERM_SCRIPT = """
import os, signal, torch
from jupyter_starverse import runtime as sv
model = torch.nn.Linear(2, 1)
for step in sv.steps(1000, model=model):
    sv.log_metrics(step, loss=float(step))
    if step == 3:
        os.kill(os.getpid(), signal.SIGTERM)
print("loop ended")
"""


def test_sigterm_checkpoints_and_ends_the_loop_then_a_rerun_resumes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {
        "STARVERSE_EXPERIMENT_DIR": str(run),
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    out = subprocess.run([sys.executable, "-c", SIGTERM_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "stopping after step 3: checkpoint saved" in out.stdout and "loop ended" in out.stdout
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.step == 3
    again = subprocess.run(
        [sys.executable, "-c", SIGTERM_SCRIPT.replace("step == 3", "step == 5")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert "resumed from step-00000003" in again.stdout
    assert [p.step for p in read_metrics(run)] == [0, 1, 2, 3, 4, 5]


def test_tensorboard_events_when_tensorboard_is_installed(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    monkeypatch.setenv("TENSORBOARD_LOGDIR", str(job / "tensorboard"))
    sv.job_env.cache_clear()
    sv.log_metrics(0, loss=2.0)
    sv.log_metrics(1, loss=1.5)
    close_metrics()
    events = list((job / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(job / "tensorboard"))
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("loss")] == [(0, 2.0), (1, 1.5)]
