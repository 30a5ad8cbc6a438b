"""Judging a recorded process without a real job: host, boot, pid reuse, heartbeat age, old files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from jupyter_starverse import _procs
from jupyter_starverse._procs import HostId, ProcessRecord, alive, process_record, process_start_time
from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local import _local
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.experiments import ExperimentPaths, RunPaths, RunStatus, read_status, write_json, write_status
from jupyter_starverse.jobmodel import JobSpec, JobState

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@needs_proc
def test_a_record_is_alive_only_on_its_host_boot_and_with_its_start_time(monkeypatch: pytest.MonkeyPatch) -> None:
    me = process_record(os.getpid())
    assert me.host and me.boot_id and me.pid_ns and me.start_time == process_start_time(os.getpid())
    assert ProcessRecord.from_json(json.loads(json.dumps(me.to_json()))) == me
    assert alive(me) is True
    assert alive(replace(me, start_time=(me.start_time or 0) + 1)) is False  # a reused pid
    assert alive(replace(me, host="pod-b")) is None  # another host: cannot tell from here
    assert alive(replace(me, boot_id="another-boot")) is None  # same name, other machine or a reboot
    assert alive(replace(me, pid_ns="pid:[1]")) is None  # another pid namespace (unshare --pid)
    monkeypatch.setattr(_procs, "host_identity", lambda: HostId("pod-b", "boot-b", "pid:[2]"))
    assert alive(me) is None
    assert alive(ProcessRecord(os.getpid())) is True  # an old record (no host) is judged by pid, as before
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert alive(ProcessRecord(dead.pid)) is False
    assert ProcessRecord.from_json({"pid": "12"}) is None and ProcessRecord.from_json(None) is None


def test_status_files_without_the_new_fields_read_as_before(tmp_path: Path) -> None:
    old = {"job_id": "j", "state": "running", "supervisor_pid": 12, "nodes": [{"index": 0, "pid": 13}]}
    (tmp_path / "status.json").write_text(json.dumps(old))
    status = read_status(tmp_path)
    assert status is not None and status.supervisor_pid == 12 and status.nodes[0].pid == 13
    assert status.supervisor is None and status.heartbeat is None and status.nodes[0].process is None
    assert _local._supervisor_record(RunPaths(tmp_path), status) == ProcessRecord(12)


@pytest.fixture
def fake_run(settings: Settings) -> Iterator[tuple[LocalBackend, RunPaths, subprocess.Popen[bytes]]]:
    """A run folder whose "supervisor" is a sleeping process carrying the folder on its command line."""
    spec = JobSpec(name="fake", code="print(1)")
    run = ExperimentPaths.of(settings.experiments, spec.experiment_name).run("fake-0001")
    run.make()
    write_json(run.spec, spec.to_json())
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(run.root)])
    try:
        yield LocalBackend(settings), run, proc
    finally:
        proc.kill()
        proc.wait()


@needs_proc
def test_an_old_status_is_judged_by_pid_on_this_host(
    fake_run: tuple[LocalBackend, RunPaths, subprocess.Popen[bytes]],
) -> None:
    backend, run, proc = fake_run
    write_status(run, RunStatus(job_id=run.job_id, state="running", created=time.time(), supervisor_pid=proc.pid))
    assert backend.get(run.job_id).state is JobState.RUNNING
    proc.kill()
    proc.wait()
    failed = backend.get(run.job_id)
    assert failed.state is JobState.FAILED and failed.reason and "supervisor process died" in failed.reason


@needs_proc
def test_another_host_judges_by_the_heartbeat_and_leaves_a_fresh_status_alone(
    fake_run: tuple[LocalBackend, RunPaths, subprocess.Popen[bytes]],
) -> None:
    backend, run, proc = fake_run
    record = process_record(proc.pid)
    now = time.time()
    status = RunStatus(job_id=run.job_id, state="running", created=now - 100, supervisor_pid=proc.pid,
                       supervisor=record, heartbeat=now, heartbeat_every=5.0)  # fmt: skip
    write_status(run, status)
    with pytest.MonkeyPatch.context() as mp:
        for module in (_procs, _local):
            mp.setattr(module, "host_identity", lambda: HostId("pod-b", "boot-b", "pid:[2]"))
        mp.setattr(_procs, "pid_alive", lambda pid: False)  # its pids name nothing here
        before = run.status.read_bytes()
        assert backend.get(run.job_id).state is JobState.RUNNING
        assert run.status.read_bytes() == before

        # a heartbeat older than 3 beats + margin: dead, recorded as failed at the last beat
        last = now - 3 * 5.0 - _local.STALE_MARGIN_S - 1
        write_status(run, replace(status, heartbeat=last))
        failed = backend.get(run.job_id)
        assert failed.state is JobState.FAILED and failed.reason and "no heartbeat" in failed.reason
        assert failed.finished == pytest.approx(last)
        assert proc.poll() is None  # another host never signals a pid it cannot see

    # on its own host the pid and start time decide at once, heartbeat or not
    write_status(run, replace(status, heartbeat=now - 3600))
    assert backend.get(run.job_id).state is JobState.RUNNING
    write_status(run, replace(status, supervisor=replace(record, start_time=(record.start_time or 0) + 1)))
    assert backend.get(run.job_id).state is JobState.FAILED  # the pid was reused by another process


@needs_proc
def test_cancel_from_another_host_asks_the_supervisor_and_waits(
    fake_run: tuple[LocalBackend, RunPaths, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, run, proc = fake_run
    status = RunStatus(job_id=run.job_id, state="running", created=time.time(), supervisor_pid=proc.pid,
                       supervisor=process_record(proc.pid), heartbeat=time.time(), heartbeat_every=5.0)  # fmt: skip
    write_status(run, status)
    for module in (_procs, _local):
        monkeypatch.setattr(module, "host_identity", lambda: HostId("pod-b", "boot-b", "pid:[2]"))
    job = backend.cancel(run.job_id, timeout=0.5)  # nobody acts on the request: bounded wait, job returned
    assert job.state is JobState.RUNNING
    assert proc.poll() is None  # the pid was not signalled from the other host
    request = json.loads(run.cancel.read_text())
    assert request["by"]["host"] == "pod-b" and request["reason"] == "cancelled by user"
    assert read_status(run) == status
