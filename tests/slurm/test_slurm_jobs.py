"""Real jobs on a real Slurm cluster (munged + slurmctld + slurmd n1, n2 started by conftest)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from jupyter_starverse._procs import job_processes
from jupyter_starverse.backends.slurm import RECORD, SCRIPT, SlurmBackend
from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import Job, JobSpec, JobState

from ._cluster import APT_HINT, SlurmCluster, missing_programs
from ._jobs import TINY, last_step, wait_for, wait_for_step

if missing_programs():
    pytest.skip(
        f"Slurm is not installed here (no {', '.join(missing_programs())}): {APT_HINT}", allow_module_level=True
    )


def _text(backend: SlurmBackend, job: Job) -> str:
    return "\n".join(line.render() for line in backend.logs(job.id))


def _squeue(cluster: SlurmCluster, sid: str) -> str:
    return cluster.run("squeue", "-h", "-j", sid, "-o", "%T", check=False).stdout.strip()


def _no_processes_left(job: Job) -> None:
    wait_for(lambda: not job_processes(job.id), timeout=30, why=f"the processes of {job.id} to end")


def test_two_nodes_train_with_logs_per_rank(
    slurm: SlurmBackend, slurm_cluster: SlurmCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = JobSpec(name="train", code=TINY, nodes=2, procs_per_node=1, steps=6, checkpoint_every=3)
    job = slurm.submit(spec)
    assert job.backend == "slurm" and job.state in (JobState.PENDING, JobState.RUNNING)
    job = slurm.wait(job.id, timeout=120)
    assert job.state is JobState.SUCCEEDED, (job.reason, _text(slurm, job))
    run = Path(job.experiment_dir)
    assert run.parent.parent == Path(slurm.settings.experiments) / "train"
    assert (run / SCRIPT).is_file() and (run / RECORD).is_file() and not (run / "spec.json").exists()
    subprocess.run(["bash", "-n", str(run / SCRIPT)], check=True)
    logs = _text(slurm, job)
    assert "[0] step 5" in logs and "[1] step 5" in logs
    assert {ln.rank for ln in slurm.tail(job.id, lines=10) if ln.rank is not None} == {0, 1}
    assert [ln.text for ln in slurm.tail(job.id, lines=3, rank=1)][-1].startswith("step 5")
    points = read_metrics(run, from_logs=False)
    assert points[-1].step == 5 and points[-1].values.get("world") == 2
    assert sorted(n.name for n in job.nodes) == ["n1", "n2"] and job.started and job.finished
    assert (run / "checkpoints" / "step-00000005").is_dir()
    # another backend object (another process) sees the same job, from its record once Slurm is done
    again = SlurmBackend(slurm.settings).get(job.id)
    assert again.state is JobState.SUCCEEDED and again.id in [j.id for j in slurm.list()]
    _followed_without_backend(slurm, job, capsys)
    _no_processes_left(job)


def _followed_without_backend(slurm: SlurmBackend, job: Job, capsys: pytest.CaptureFixture[str]) -> None:
    """A workspace whose default is local (Slurm not configured) lists the job finished and finds it by id."""
    record = json.loads((Path(job.experiment_dir) / RECORD).read_text())
    record["final"] = None  # as left by a submit nobody looked at again until after the job ended
    (Path(job.experiment_dir) / RECORD).write_text(json.dumps(record))
    client = Starverse(slurm.settings)
    assert client.settings.backend == "local" and not client.settings.slurm_partitions
    row = next(r for r in client.job_page().items if r.id == job.id)
    assert (row.backend, row.state) == ("slurm", "succeeded"), row
    capsys.readouterr()
    assert main(["jobs", "show", job.id, "--json"]) == 0  # without --backend
    shown = json.loads(capsys.readouterr().out)
    assert shown["backend"] == "slurm" and shown["state"] == "succeeded", shown


def test_a_second_job_resumes_from_the_experiments_checkpoint(slurm: SlurmBackend) -> None:
    first = slurm.submit(JobSpec(name="res", code=TINY, nodes=2, steps=4, checkpoint_every=2))
    first = slurm.wait(first.id, timeout=120)
    assert first.state is JobState.SUCCEEDED, (first.reason, _text(slurm, first))
    second = slurm.submit(JobSpec(name="res", code=TINY, nodes=2, steps=8, checkpoint_every=2, resume=True))
    assert second.id != first.id
    script = (Path(second.experiment_dir) / SCRIPT).read_text()
    assert f"export STARVERSE_RESUME_FROM={first.experiment_dir}/checkpoints/step-00000003" in script
    second = slurm.wait(second.id, timeout=120)
    assert second.state is JobState.SUCCEEDED, (second.reason, _text(slurm, second))
    assert "resumed from step-00000003" in _text(slurm, second)
    steps = [p.step for p in read_metrics(Path(second.experiment_dir), from_logs=False)]
    assert steps[0] == 4 and steps[-1] == 7


def test_cancel_checkpoints_then_stops_every_process(slurm: SlurmBackend, slurm_cluster: SlurmCluster) -> None:
    spec = JobSpec(name="cancel", code=TINY, nodes=2, steps=10_000, env={"STEP_SLEEP": "0.2"})
    job = slurm.submit(spec)
    wait_for_step(job, 3)
    job = slurm.cancel(job.id)
    assert job.state is JobState.CANCELLED and job.reason == "cancelled by user"
    logs = _text(slurm, job)
    assert "checkpoint saved" in logs, logs  # SIGTERM reached the ranks before scancel
    assert _squeue(slurm_cluster, slurm.slurm_id(job.id) or "") in ("", "CANCELLED", "COMPLETED", "COMPLETING")
    _no_processes_left(job)
    assert "stopped before the time limit" not in (Path(job.experiment_dir) / "logs" / "batch.log").read_text()
    assert slurm.cancel(job.id).state is JobState.CANCELLED  # idempotent
    assert SlurmBackend(slurm.settings).get(job.id).state is JobState.CANCELLED


def test_a_node_set_down_requeues_the_job_which_resumes_when_it_is_back(
    slurm: SlurmBackend, slurm_cluster: SlurmCluster
) -> None:
    spec = JobSpec(name="down", code=TINY, nodes=2, steps=30, checkpoint_every=4, env={"STEP_SLEEP": "0.2"})
    job = slurm.submit(spec)
    wait_for_step(job, 9)
    slurm_cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=test")
    wait_for(lambda: slurm.get(job.id).state is JobState.RESUMING, timeout=60, why="the job to be requeued")
    pending = slurm.get(job.id)
    assert "requeued 1 time" in (pending.reason or "") and pending.restarts == 1, pending.reason
    _no_processes_left(job)  # the first try's ranks are gone from both nodes
    stopped_at = last_step(job)
    slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume")
    job = slurm.wait(job.id, timeout=120)
    assert job.state is JobState.SUCCEEDED, (job.reason, _text(slurm, job))
    logs = _text(slurm, job)
    assert re.search(r"resumed from step-\d{8}", logs), logs
    steps = [p.step for p in read_metrics(Path(job.experiment_dir), from_logs=False)]
    batch = (Path(job.experiment_dir) / "logs" / "batch.log").read_text()
    assert stopped_at >= 9 and steps.count(0) == 1, (steps, batch, logs)  # the second try went on from a checkpoint
    assert set(steps) == set(range(30)) and steps[-1] == 29
    batch = (Path(job.experiment_dir) / "logs" / "batch.log").read_text()
    assert "try 1," in batch and "try 2," in batch
    assert json.loads((Path(job.experiment_dir) / "slurm-exit.json").read_text())["try"] == 2
    (lost,) = json.loads((Path(job.experiment_dir) / "restarts.json").read_text())["events"]
    assert lost["kind"] == "lost" and lost["action"] == "resumed" and job.restarts == 1


def test_an_unknown_partition_is_refused_naming_the_setting(slurm: SlurmBackend) -> None:
    backend = SlurmBackend(slurm.settings.replace(slurm_partitions=(("cpu", "nope"),)))
    with pytest.raises(BadInputError) as err:
        backend.submit(JobSpec(name="badpart", code=TINY, nodes=2, steps=2))
    assert "no partition 'nope'" in err.value.message and "STARVERSE_SLURM_PARTITIONS" in (err.value.hint or "")
    assert backend.list() == [] and not list(Path(slurm.settings.experiments).glob("badpart/runs/*"))


def test_more_nodes_than_the_partition_has_is_refused_before_sbatch(slurm: SlurmBackend) -> None:
    backend = SlurmBackend(slurm.settings.replace(slurm_partitions=(("cpu", "small"),)))
    with pytest.raises(BadInputError) as err:
        backend.submit(JobSpec(name="toobig", code=TINY, nodes=2, steps=2))
    assert err.value.field == "nodes" and "at most 1 node" in err.value.message
    assert "--nodes 1" in (err.value.hint or "")
    with pytest.raises(BadInputError, match="at most 2 node"):
        slurm.submit(JobSpec(name="toobig", code=TINY, nodes=3, steps=2))


def test_an_unknown_job_is_not_found(slurm: SlurmBackend) -> None:
    with pytest.raises(NotFoundError):
        slurm.get("no-such-job")
    with pytest.raises(NotFoundError):
        slurm.get("../etc")
