"""The local backend on real torchrun agents: run, read back from another process, cancel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.experiments import latest_checkpoint, read_metrics, read_status
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._local import (
    TINY,
    _stop_leftover_jobs,  # noqa: F401 - autouse: no job outlives its test
    assert_no_processes_left,
    logs_text,
    pulled_corpus,
    wait_for_step,
)

pytestmark = pytest.mark.slow


def test_two_nodes_train_and_every_process_can_read_the_job(settings: Settings) -> None:
    backend = LocalBackend(settings)
    spec = JobSpec(name="tiny", code=TINY, nodes=2, procs_per_node=1, steps=8, checkpoint_every=4)
    job = backend.submit(spec)
    assert job.state in (JobState.PENDING, JobState.RUNNING)
    followed = [line.render() for line in backend.logs(job.id, follow=True)]  # returns once the job ended
    done = backend.get(job.id)
    assert done.state is JobState.SUCCEEDED, done.reason
    assert "[0] step 0 loss" in "\n".join(followed) and "[1] step 7 loss" in "\n".join(followed)
    assert [n.state for n in done.nodes] == [JobState.SUCCEEDED] * 2
    assert all(n.exit_code == 0 and n.started and n.finished for n in done.nodes)

    run = Path(done.experiment_dir)
    points = read_metrics(run)
    assert [p.step for p in points] == list(range(8))
    assert points[-1].values["loss"] < points[0].values["loss"]
    assert points[0].values["world"] == 2
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.step == 7 and ckpt.world_size == 2
    for rank in (0, 1):
        assert (run / "logs" / f"rank{rank}.log").is_file()
    text = logs_text(backend, done)
    assert "[0] step 0 loss" in text and "[1] step 7 loss" in text
    assert [line.rank for line in backend.logs(done.id, rank=1)] == [1] * len(list(backend.logs(done.id, rank=1)))
    status = read_status(run)
    assert status is not None and all(len(n.launches) == 1 and n.launches[0][1] for n in status.nodes)

    # a fresh backend in another process sees the same job: the folder is the truth
    code = (
        "from jupyter_starverse._settings import Settings;"
        "from jupyter_starverse.backends.local._local import LocalBackend;"
        f"j = LocalBackend(Settings.from_env()).get({done.id!r}); print(j.state.value, len(j.nodes))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["succeeded", "2"]
    assert [j.id for j in LocalBackend(settings).list()] == [done.id]
    assert_no_processes_left(done)


def test_job_outlives_the_process_that_launched_it_and_cancel_checkpoints(settings: Settings) -> None:
    # The "kernel" submits and is killed at once; the job runs on, detached in its own session.
    code = (
        "import os, signal;"
        "from jupyter_starverse._settings import Settings;"
        "from jupyter_starverse.jobmodel import JobSpec;"
        "from jupyter_starverse.backends.local._local import LocalBackend;"
        f"j = LocalBackend(Settings.from_env()).submit(JobSpec(name='long', code={TINY!r}, steps=100000,"
        " env={'STEP_SLEEP': '0.05'}));"
        "print(j.id, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    kernel = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert kernel.returncode == -9
    job_id = kernel.stdout.strip()
    backend = LocalBackend(settings)
    job = backend.get(job_id)
    wait_for_step(job, 3)
    status = read_status(Path(job.experiment_dir))
    assert status is not None and status.supervisor_pid
    assert os.getsid(status.supervisor_pid) != os.getsid(0)

    cancelled = backend.cancel(job_id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.reason == "cancelled by user"
    # the runtime got SIGTERM and checkpointed before it exited
    ckpt = latest_checkpoint(Path(job.experiment_dir))
    assert ckpt is not None and ckpt.step >= 3
    assert "checkpoint saved" in logs_text(backend, job)
    assert_no_processes_left(job)
    assert backend.cancel(job_id).state is JobState.CANCELLED  # idempotent


PLAIN = """
import os, sys
names = ["STARVERSE_EXPERIMENT_DIR", "STARVERSE_STORE", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TENSORBOARD_LOGDIR",
         "WANDB_DIR", "STARVERSE_STEPS", "OMP_NUM_THREADS", "RANK", "WORLD_SIZE", "MY_FLAG"]
print("env", " ".join(f"{n}={os.environ.get(n, '-')}" for n in names))
print("argv", sys.argv[1:])
for step in range(int(os.environ["STARVERSE_STEPS"])):
    print(f"iter {step}: loss={4.0 / (step + 1):.3f}")
"""


def test_a_script_without_the_runtime_gets_the_job_env_and_a_loss_curve_from_its_log(settings: Settings) -> None:
    backend = LocalBackend(settings)
    spec = JobSpec(name="plain", code=PLAIN, procs_per_node=2, steps=4, env={"MY_FLAG": "on"}, args=("--x", "a b"))
    done = backend.wait(backend.submit(spec).id, timeout=240)
    assert done.state is JobState.SUCCEEDED, done.reason
    run = Path(done.experiment_dir)
    env_line = next(line.text for line in backend.logs(done.id, rank=1) if line.text.startswith("env "))
    values = dict(item.split("=", 1) for item in env_line.split()[1:])
    assert values["STARVERSE_EXPERIMENT_DIR"] == str(run)
    assert values["STARVERSE_STORE"] == settings.store and values["HF_HUB_OFFLINE"] == "1"
    assert values["HF_HUB_CACHE"].startswith(settings.store)
    assert values["TENSORBOARD_LOGDIR"] == str(run / "tensorboard") and values["WANDB_DIR"] == str(run)
    assert (values["STARVERSE_STEPS"], values["OMP_NUM_THREADS"], values["MY_FLAG"]) == ("4", "1", "on")
    assert (values["RANK"], values["WORLD_SIZE"]) == ("1", "2")
    assert "argv ['--x', 'a b']" in logs_text(backend, done)
    assert [(p.step, p.values["loss"]) for p in read_metrics(run)] == [(0, 4.0), (1, 2.0), (2, 1.333), (3, 1.0)]
    assert_no_processes_left(done)


def test_a_command_job_runs_under_torchrun_and_a_failing_one_says_why(settings: Settings) -> None:
    backend = LocalBackend(settings)
    ok = JobSpec(name="cmd", command=(sys.executable, "-c", "import os; print('loss', os.environ['RANK'])"))
    done = backend.wait(backend.submit(ok).id, timeout=240)
    assert done.state is JobState.SUCCEEDED, done.reason
    bad = JobSpec(name="cmd-bad", command=(sys.executable, "-c", "raise SystemExit(3)"))
    failed = backend.wait(backend.submit(bad).id, timeout=240)
    assert failed.state is JobState.FAILED
    # the root cause is the rank's own exit code (torchrun's failure table), not the agent's
    assert failed.reason and failed.reason.startswith("node 0 failed: rank 0 (node 0) exited with code 3")
    assert "no restarts left (max_restarts=0)" in failed.reason
    assert_no_processes_left(failed)


def test_a_running_job_holds_its_mounts_against_store_rm(settings: Settings, tmp_path: Path) -> None:
    from jupyter_starverse.errors import ConflictError

    catalog = pulled_corpus(settings, tmp_path)
    backend = LocalBackend(settings)
    job = backend.submit(JobSpec(name="holder", code="import time\ntime.sleep(120)\n", mounts=("corpus",)))
    try:
        holders = catalog.holders("corpus")
        assert [h.holder for h in holders] == [job.id]  # held by the job's supervisor, not by us
        with pytest.raises(ConflictError, match=job.id):
            catalog.rm("corpus")
    finally:
        backend.cancel(job.id)
    backend.wait(job.id, timeout=120)
    import time

    deadline = time.monotonic() + 30  # the supervisor exits just after it records the final state
    while catalog.holders("corpus") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert catalog.holders("corpus") == []  # the supervisor is gone: so is its hold
    catalog.rm("corpus")
