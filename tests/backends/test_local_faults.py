"""Faults on real processes: a killed worker, a killed node, a resume with another world size."""

from __future__ import annotations

import itertools
import json
import os
import signal
from pathlib import Path

import pytest

from jupyter_starverse._procs import job_processes
from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.experiments import MetricPoint, latest_checkpoint, read_metrics, read_status
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._local import (
    TINY,
    _stop_leftover_jobs,  # noqa: F401 - autouse: no job outlives its test
    assert_no_processes_left,
    logs_text,
    pulled_corpus,
    wait_for,
    wait_for_step,
)

pytestmark = pytest.mark.slow


def _resumed(points: list[MetricPoint]) -> list[int]:
    """Steps at which the step counter went back (a restart resumed from a checkpoint)."""
    return [b.step for a, b in itertools.pairwise(points) if b.step <= a.step]


def test_killed_worker_restarts_and_resumes_from_the_last_checkpoint(settings: Settings) -> None:
    backend = LocalBackend(settings)
    spec = JobSpec(name="wkill", code=TINY, nodes=2, steps=30, checkpoint_every=5, max_restarts=2,
                   env={"STEP_SLEEP": "0.15"})  # fmt: skip
    job = backend.submit(spec)
    wait_for_step(job, 12)
    run = Path(job.experiment_dir)
    victim = json.loads((run / "pids" / "rank1.json").read_text())["pid"]
    os.kill(victim, signal.SIGKILL)
    done = backend.wait(job.id, timeout=300)
    assert done.state is JobState.SUCCEEDED, done.reason
    points = read_metrics(run)
    resumed = _resumed(points)
    assert resumed, "the step counter never went back: no restart happened"
    assert resumed[0] > 0 and resumed[0] % 5 == 0  # right after a checkpoint, not from scratch
    assert points[-1].step == 29
    text = logs_text(backend, done)
    assert "--- restart 1" in text and "resumed from step-" in text
    assert_no_processes_left(done)


def test_killed_node_is_relaunched_and_the_job_resumes(settings: Settings) -> None:
    backend = LocalBackend(settings)
    spec = JobSpec(name="nkill", code=TINY, nodes=2, steps=30, checkpoint_every=5, max_restarts=2,
                   env={"STEP_SLEEP": "0.15"})  # fmt: skip
    job = backend.submit(spec)
    wait_for_step(job, 12)
    node1 = job_processes(job.id, node=1)
    assert len(node1) >= 2  # the agent and its worker
    for pid in node1:
        os.kill(pid, signal.SIGKILL)
    done = backend.wait(job.id, timeout=300)
    assert done.state is JobState.SUCCEEDED, done.reason
    status = read_status(Path(done.experiment_dir))
    assert status is not None
    # node 1 cannot rejoin the running group (its peers lost their collective): the whole group is
    # relaunched from the last checkpoint, one rendezvous round per attempt
    assert len(status.nodes[1].launches) == 2 and len(status.nodes[0].launches) == 2
    assert status.restarts == 1 and status.events[0].kind == "lost" and status.events[0].action == "resumed"
    points = read_metrics(Path(done.experiment_dir))
    resumed = _resumed(points)
    assert resumed and resumed[0] > 0 and points[-1].step == 29
    assert_no_processes_left(done)


def test_resume_into_the_experiment_with_another_process_count(settings: Settings) -> None:
    backend = LocalBackend(settings)
    first = backend.submit(JobSpec(name="r1", code=TINY, nodes=2, steps=6, checkpoint_every=3, experiment="exp"))
    first = backend.wait(first.id, timeout=240)
    assert first.state is JobState.SUCCEEDED, first.reason
    ckpt = latest_checkpoint(Path(first.experiment_dir))
    assert ckpt is not None and (ckpt.step, ckpt.world_size) == (5, 2)

    spec = JobSpec(name="r2", code=TINY, nodes=1, procs_per_node=3, steps=10, experiment="exp", resume=True)
    plan = backend.resume_plan(spec)
    assert plan.checkpoint is not None and plan.checkpoint.step == 5
    assert (plan.old_world_size, plan.new_world_size, plan.start_step) == (2, 3, 6)
    assert json.loads(backend.render(spec, output="json"))["resume"]["old_world_size"] == 2

    second = backend.wait(backend.submit(spec).id, timeout=240)
    assert second.state is JobState.SUCCEEDED, second.reason
    points = read_metrics(Path(second.experiment_dir))
    assert [p.step for p in points] == [6, 7, 8, 9]
    assert points[0].values["world"] == 3
    first_loss = read_metrics(Path(first.experiment_dir))[-1].values["loss"]
    assert points[0].values["loss"] < first_loss  # continued training, not a fresh model
    assert "written by world size 2" in logs_text(backend, second)
    assert_no_processes_left(second)


def test_a_dead_supervisor_fails_the_job_and_stops_its_processes(settings: Settings) -> None:
    backend = LocalBackend(settings, preempt_restarts=0)  # no relaunch allowed: the job fails
    job = backend.submit(JobSpec(name="orphan", code=TINY, nodes=2, steps=100000, env={"STEP_SLEEP": "0.1"}))
    wait_for_step(job, 1)
    status = read_status(Path(job.experiment_dir))
    assert status is not None and status.supervisor_pid
    os.kill(status.supervisor_pid, signal.SIGKILL)
    wait_for(lambda: backend.get(job.id).state.finished, timeout=60, why="the job to be seen as failed")
    failed = backend.get(job.id)
    assert failed.state is JobState.FAILED
    assert failed.reason and "supervisor process died" in failed.reason
    assert_no_processes_left(failed)
    # billing ended at the supervisor's last heartbeat, not when someone looked
    final = read_status(Path(job.experiment_dir))
    assert final is not None and final.heartbeat is not None
    ends = [b for n in final.nodes for _, b in n.launches]
    assert ends and all(b is not None and b <= final.heartbeat + 1e-6 for b in ends)


@pytest.mark.slow
def test_a_supervisor_that_takes_over_holds_the_mounts_again(settings: Settings, tmp_path: Path) -> None:
    from jupyter_starverse.errors import ConflictError

    catalog = pulled_corpus(settings, tmp_path)
    backend = LocalBackend(settings)
    spec = JobSpec(name="adopted", code=TINY, steps=100000, mounts=("corpus",), env={"STEP_SLEEP": "0.1"})
    job = backend.submit(spec)
    try:
        wait_for_step(job, 1)
        first = read_status(Path(job.experiment_dir))
        assert first is not None and first.supervisor_pid
        os.kill(first.supervisor_pid, signal.SIGKILL)  # its hold dies with it

        def adopted() -> bool:
            status = read_status(Path(backend.get(job.id).experiment_dir))  # a reader starts the new one
            pid = status.supervisor_pid if status else None
            return pid not in (None, first.supervisor_pid) and [h.pid for h in catalog.holders("corpus")] == [pid]

        wait_for(adopted, timeout=60, why="the new supervisor to hold the mount")
        assert [h.holder for h in catalog.holders("corpus")] == [job.id]
        with pytest.raises(ConflictError, match=job.id):
            catalog.rm("corpus")  # still refused while the resumed job reads it
        wait_for(lambda: backend.get(job.id).restarts == 1, timeout=60, why="the takeover's restart")
    finally:
        backend.cancel(job.id)
    assert_no_processes_left(backend.wait(job.id, timeout=120))
