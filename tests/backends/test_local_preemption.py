"""Preemption as a first-class event on real local jobs: checkpoint, relaunch, resume.

A SIGTERM nobody asked for (a provider's preemption), a lost agent or worker, and a dead
supervisor each end one *attempt*; the supervisor names the first event in time, records the
work lost since the last checkpoint, keeps the attempt's files apart and relaunches the whole
job, which resumes from its newest checkpoint: ``preempted -> resuming -> running``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.errors import ConflictError
from jupyter_starverse.experiments import read_metrics, read_status
from jupyter_starverse.jobmodel import JobSpec, JobState
from jupyter_starverse.watch import read_job_metrics, summarize

from ._local import (
    TINY,
    _stop_leftover_jobs,  # noqa: F401 - autouse: no job outlives its test
    assert_no_processes_left,
    logs_text,
    wait_for_step,
)

pytestmark = pytest.mark.slow


def _spec(name: str) -> JobSpec:
    return JobSpec(name=name, code=TINY, nodes=2, steps=30, checkpoint_every=5, env={"STEP_SLEEP": "0.1"})


def _pid(job_dir: str, rank: int) -> int:
    return int(json.loads((Path(job_dir) / "pids" / f"rank{rank}.json").read_text())["pid"])


def _wait_watching(backend: LocalBackend, job_id: str, timeout: float = 240) -> tuple[list[str], object]:
    states: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = backend.get(job_id)
        if not states or states[-1] != job.state.value:
            states.append(job.state.value)
        if job.state.finished:
            return states, job
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not finish; states {states}")


def test_a_sigterm_to_a_worker_is_a_preemption_resumed_with_every_step(settings: Settings) -> None:
    backend = LocalBackend(settings)
    job = backend.submit(_spec("preempt"))
    wait_for_step(job, 12)
    os.kill(_pid(job.experiment_dir, 1), signal.SIGTERM)
    states, done = _wait_watching(backend, job.id)
    assert done.state is JobState.SUCCEEDED, done.reason  # type: ignore[attr-defined]
    assert "resuming" in states and states[-2:] == ["running", "succeeded"]
    run = Path(job.experiment_dir)
    steps = sorted({p.step for p in read_metrics(run) if p.rank == 0})
    assert steps == list(range(30))  # every step, nothing redone: it checkpointed on the SIGTERM
    status = read_status(run)
    assert status is not None and status.restarts == 1 and status.preemptions == 1
    event = status.events[0]
    assert event.kind == "preempted" and "rank 1 (node 1) received SIGTERM" in event.cause
    assert event.steps_lost == 0 and event.action == "resumed"
    # attempts are kept apart: the first attempt's records moved under attempt-0/
    assert (run / "stops" / "attempt-0" / "rank1.json").is_file()
    assert not list((run / "errors").glob("rank*.json"))
    # the restart count reaches the job record and the progress line
    assert done.restarts == 1 and done.to_json()["restarts"] == 1  # type: ignore[attr-defined]
    prog = summarize(done, read_job_metrics(done))  # type: ignore[arg-type]
    assert prog.restarts == 1 and "1 restart" in prog.line()
    assert "--- restart 1" in logs_text(backend, done)  # type: ignore[arg-type]
    assert_no_processes_left(done)  # type: ignore[arg-type]


def test_a_killed_agent_is_recovered_without_losing_steps(settings: Settings) -> None:
    backend = LocalBackend(settings)
    job = backend.submit(_spec("agentkill"))
    wait_for_step(job, 12)
    status = read_status(Path(job.experiment_dir))
    assert status is not None and status.nodes[1].pid
    os.kill(status.nodes[1].pid, signal.SIGKILL)  # the agent alone: its worker keeps running
    done = backend.wait(job.id, timeout=240)
    assert done.state is JobState.SUCCEEDED, done.reason
    final = read_status(Path(job.experiment_dir))
    assert final is not None and final.restarts >= 1
    assert "node 1's torchrun agent was killed by SIGKILL" in final.events[0].cause
    assert final.events[0].steps_lost == 0  # its orphaned rank got SIGTERM and checkpointed
    assert read_metrics(Path(job.experiment_dir))[-1].step == 29
    assert_no_processes_left(done)


def test_the_root_cause_names_the_killed_rank_not_its_peers(settings: Settings) -> None:
    backend = LocalBackend(settings, preempt_restarts=0)  # no relaunch: the failure is final
    spec = JobSpec(name="rootcause", code=TINY, nodes=2, procs_per_node=2, steps=1000, checkpoint_every=5,
                   env={"STEP_SLEEP": "0.1"})  # fmt: skip
    job = backend.submit(spec)
    wait_for_step(job, 7)
    os.kill(_pid(job.experiment_dir, 2), signal.SIGKILL)
    done = backend.wait(job.id, timeout=240)
    assert done.state is JobState.FAILED
    assert done.reason and "rank 2 (node 1) was killed by SIGKILL" in done.reason, done.reason
    assert "lost since the checkpoint at step" in done.reason and "no restarts left" in done.reason
    status = read_status(Path(job.experiment_dir))
    assert status is not None and status.events[-1].action == "final" and status.events[-1].steps_lost is not None
    assert_no_processes_left(done)


def test_the_preemption_drill(settings: Settings) -> None:
    backend = LocalBackend(settings, grace=10)
    job = backend.submit(_spec("drill"))
    wait_for_step(job, 8)
    backend.preempt(job.id)
    states, done = _wait_watching(backend, job.id)
    assert done.state is JobState.SUCCEEDED, done.reason  # type: ignore[attr-defined]
    assert "resuming" in states
    status = read_status(Path(job.experiment_dir))
    assert status is not None and status.restarts == 1
    assert "preemption drill" in status.events[0].cause and status.events[0].steps_lost == 0
    with pytest.raises(ConflictError, match="only a running job"):
        backend.preempt(job.id)
