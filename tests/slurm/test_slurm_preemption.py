"""Preemption and restarts on the real test Slurm cluster (the shared ``slurm_cluster`` fixture).

``jobs preempt`` sends what a preemption sends (``scancel --signal=TERM``): every rank
checkpoints and exits 143, the batch script records a preemption and requeues the job, which
resumes from that checkpoint: ``preempted -> resuming -> running -> succeeded``. A failure of
the script is requeued up to ``max_restarts``; then it is final, saying why.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_starverse.backends.slurm import SlurmBackend
from jupyter_starverse.errors import ConflictError
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._cluster import APT_HINT, missing_programs
from ._jobs import TINY, wait_for_step

if missing_programs():
    pytest.skip(
        f"Slurm is not installed here (no {', '.join(missing_programs())}): {APT_HINT}", allow_module_level=True
    )

pytestmark = pytest.mark.slow

FLAKY = TINY.replace(
    "    time.sleep(sleep)\n",
    "    time.sleep(sleep)\n"
    "    if step == 3 and ctx.rank == 1 and os.environ.get('STARVERSE_ATTEMPT') == '0':\n"
    "        raise RuntimeError('flaky hardware')\n",
)


def _steps(run: Path) -> list[int]:
    return [p.step for p in read_metrics(run, from_logs=False)]


def test_preempt_drill_checkpoints_requeues_and_resumes(slurm: SlurmBackend) -> None:
    spec = JobSpec(name="spot", code=TINY, nodes=2, steps=24, checkpoint_every=4, env={"STEP_SLEEP": "0.25"})
    job = slurm.submit(spec)
    wait_for_step(job, 6)
    drilled = time.monotonic()
    states: list[JobState] = [slurm.preempt(job.id).state]
    while not (states and states[-1].finished) and time.monotonic() - drilled < 180:
        state = slurm.get(job.id).state
        if not states or states[-1] is not state:
            states.append(state)
        time.sleep(0.2)
    done = slurm.get(job.id)
    assert done.state is JobState.SUCCEEDED, (states, done.reason)
    assert JobState.PREEMPTED in states and JobState.RESUMING in states, states
    assert states[0] is JobState.PREEMPTED  # at once, not once the ranks got round to it
    assert states.index(JobState.RESUMING) < states.index(JobState.SUCCEEDED)
    assert JobState.RUNNING not in states[: states.index(JobState.RESUMING)], states  # no flicker
    assert done.restarts == 1
    run = Path(done.experiment_dir)
    (event,) = json.loads((run / "restarts.json").read_text())["events"]
    assert event["kind"] == "preempted" and event["action"] == "resumed" and "got SIGTERM" in event["cause"]
    steps = _steps(run)
    assert set(steps) == set(range(24)) and steps.count(0) == 1  # resumed, not restarted from scratch
    redone = len(steps) - 24
    assert 0 <= redone <= 1 * 2  # the SIGTERM checkpoint: at most the step in flight on each rank's log
    assert list((run / "stops").glob("attempt-0/rank*.json"))  # the attempt's records kept apart
    with pytest.raises(ConflictError, match="only a running job"):
        slurm.preempt(job.id)


def test_a_failure_is_requeued_up_to_max_restarts(slurm: SlurmBackend) -> None:
    ok = slurm.submit(JobSpec(name="flaky", code=FLAKY, nodes=2, steps=8, checkpoint_every=2, max_restarts=1))
    failed = slurm.submit(JobSpec(name="flaky0", code=FLAKY, nodes=2, steps=8, checkpoint_every=2))
    ok = slurm.wait(ok.id, timeout=240)
    assert ok.state is JobState.SUCCEEDED and ok.restarts == 1, ok.reason
    (event,) = json.loads((Path(ok.experiment_dir) / "restarts.json").read_text())["events"]
    assert event["kind"] == "failed" and "flaky hardware" in event["cause"] and event["action"] == "resumed"
    failed = slurm.wait(failed.id, timeout=240)
    assert failed.state is JobState.FAILED and failed.restarts == 0
    reason = failed.reason or ""
    assert "flaky hardware" in reason and "no restarts left (max_restarts=0 used)" in reason
