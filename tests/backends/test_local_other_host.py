"""A second host (pod) sharing the experiments folder: it sees a live job as running, cancels it
through ``cancel.json``, and counts a supervisor dead only once its heartbeat is stale.

"Another host" is this process with another host name, boot id and pid namespace, in which the
job's pids mean nothing (``pid_alive`` says no such process, ``/proc`` shows none of the job).
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_starverse import _procs
from jupyter_starverse._procs import job_processes, pid_alive, stop_pids
from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local import _local
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.experiments import read_status
from jupyter_starverse.jobmodel import JobSpec, JobState

from ._local import (
    TINY,
    _stop_leftover_jobs,  # noqa: F401 - autouse: no job outlives its test
    assert_no_processes_left,
    wait_for,
    wait_for_step,
)

pytestmark = pytest.mark.slow

OTHER_POD = SimpleNamespace(host="pod-b", boot_id="boot-of-pod-b", pid_ns="pid:[4026500001]")


@contextmanager
def other_host() -> Iterator[None]:
    """Read the folder as a second pod would: another host, where the job's pids name nothing."""
    with pytest.MonkeyPatch.context() as mp:
        for module in (_procs, _local):
            mp.setattr(module, "host_identity", lambda: OTHER_POD, raising=False)
            mp.setattr(module, "pid_alive", lambda pid: False, raising=False)
            mp.setattr(module, "job_processes", lambda *args, **kwargs: [], raising=False)
        yield


@pytest.fixture
def fast_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs submitted in this test beat every 0.3 s (the default is seconds)."""
    monkeypatch.setattr(_local, "HEARTBEAT_S", 0.3, raising=False)


def _long_job(name: str) -> JobSpec:
    return JobSpec(name=name, code=TINY, steps=100000, env={"STEP_SLEEP": "0.1"})


def _wait_for_a_heartbeat(run: Path) -> None:
    first = read_status(run)
    assert first is not None and first.heartbeat is not None
    wait_for(lambda: (read_status(run) or first).heartbeat != first.heartbeat, timeout=60, why="a heartbeat")


def test_a_reader_on_another_host_sees_the_live_job_running_and_never_rewrites_it(
    settings: Settings, fast_heartbeat: None
) -> None:
    backend = LocalBackend(settings)
    job = backend.submit(_long_job("shared"))
    wait_for_step(job, 1)
    run = Path(job.experiment_dir)
    with other_host():
        for _ in range(3):
            seen = backend.get(job.id)
            assert seen.state is JobState.RUNNING, seen.reason
            assert [(j.id, j.state) for j in backend.list()] == [(job.id, JobState.RUNNING)]
            _wait_for_a_heartbeat(run)
    after = read_status(run)
    assert after is not None and after.state == "running" and after.reason is None
    assert job_processes(job.id), "the job stopped training"
    assert backend.get(job.id).state is JobState.RUNNING

    # every pid that liveness is judged by comes with its host, boot and start time
    status = read_status(run)
    assert status is not None and status.supervisor is not None and status.heartbeat is not None
    me = _procs.host_identity()
    assert status.supervisor.pid == status.supervisor_pid
    assert (status.supervisor.host, status.supervisor.boot_id) == (socket.gethostname(), me.boot_id)
    assert status.supervisor.start_time == _procs.process_start_time(status.supervisor.pid)
    node = status.nodes[0].process
    assert node is not None and node.pid == status.nodes[0].pid and node.host == me.host
    assert node.start_time == _procs.process_start_time(node.pid)


def test_cancel_from_another_host_stops_the_job(settings: Settings, fast_heartbeat: None) -> None:
    backend = LocalBackend(settings)
    job = backend.submit(_long_job("remote-cancel"))
    wait_for_step(job, 1)
    status = read_status(Path(job.experiment_dir))
    assert status is not None and status.supervisor_pid
    supervisor = status.supervisor_pid

    with other_host():
        cancelled = backend.cancel(job.id, timeout=120)
    assert cancelled.state is JobState.CANCELLED, cancelled.reason
    assert cancelled.reason == "cancelled by user"
    request = json.loads((Path(job.experiment_dir) / "cancel.json").read_text())
    assert request["by"]["host"] == OTHER_POD.host and request["reason"] == "cancelled by user"
    assert_no_processes_left(cancelled)
    wait_for(lambda: not pid_alive(supervisor), timeout=30, why="the supervisor to exit")
    assert backend.get(job.id).state is JobState.CANCELLED


def test_a_killed_supervisor_fails_the_job_here_at_once_and_there_once_its_heartbeat_is_stale(
    settings: Settings, fast_heartbeat: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = LocalBackend(settings, preempt_restarts=0)  # a dead supervisor's job is not taken over
    here = backend.submit(_long_job("dies-here"))
    there = backend.submit(_long_job("dies-there"))
    wait_for_step(here, 1)
    wait_for_step(there, 1)

    def kill_supervisor(job_dir: str) -> int:
        status = read_status(Path(job_dir))
        assert status is not None and status.supervisor_pid
        os.kill(status.supervisor_pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(status.supervisor_pid), timeout=30, why="the supervisor to die")
        return status.supervisor_pid

    # on its own host: pid + start time, at once; the job's processes are stopped
    kill_supervisor(here.experiment_dir)
    failed = backend.get(here.id)
    assert failed.state is JobState.FAILED
    assert failed.reason and "supervisor process died" in failed.reason
    assert_no_processes_left(failed)

    # from another host: running while the heartbeat is fresh, and status.json untouched ...
    kill_supervisor(there.experiment_dir)
    run = Path(there.experiment_dir)
    before = read_status(run)
    assert before is not None and before.state == "running"
    try:
        with other_host():
            assert backend.get(there.id).state is JobState.RUNNING  # 3 beats + 15 s margin not yet over
            assert read_status(run) == before
            # ... and failed once it is stale (3 beats of 0.3 s + 0.5 s)
            monkeypatch.setattr(_local, "STALE_MARGIN_S", 0.5, raising=False)
            wait_for(lambda: backend.get(there.id).state.finished, timeout=60, why="a stale heartbeat")
            gone = backend.get(there.id)
        assert gone.state is JobState.FAILED
        assert gone.reason and "no heartbeat" in gone.reason and gone.reason.startswith("the job's supervisor on ")
        recorded = read_status(run)
        assert recorded is not None and recorded.state == "failed" and recorded.finished == before.heartbeat
    finally:
        stop_pids(job_processes(there.id), grace=5.0)  # the other host could not stop them
    assert_no_processes_left(there)
