"""The job index: cached run summaries that follow every change, rebuilt when lost, safe for many writers."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import ExperimentPaths, JobIndex, RunStatus, read_status, write_json, write_status
from jupyter_starverse.jobmodel import JobSpec


def _run(root: Path, experiment: str, i: int, *, state: str = "succeeded", created: float | None = None) -> str:
    job_id = f"{experiment}-{i:04d}"
    run = ExperimentPaths.of(root, experiment).run(job_id)
    run.make()
    write_json(run.spec, JobSpec(name=experiment, display_name=f"My Run {i}", code="print(1)\n", nodes=2).to_json())
    t = created if created is not None else 1_000_000.0 + i
    write_status(run, RunStatus(job_id=job_id, state=state, created=t, started=t, finished=t + 1))
    return job_id


def _set_state(root: Path, experiment: str, job_id: str, state: str) -> None:
    run = ExperimentPaths.of(root, experiment).run(job_id)
    status = read_status(run)
    assert status is not None
    write_status(run, RunStatus.from_json({**status.to_json(), "state": state}))


def test_pages_and_filters_newest_first(tmp_path: Path) -> None:
    a = [_run(tmp_path, "a", i) for i in range(12)]
    b = [_run(tmp_path, "b", 100 + i, state="failed") for i in range(3)]
    index = JobIndex(tmp_path)
    page = index.page(limit=5)
    assert page.total == 15 and [s.id for s in page.items] == (b[::-1] + a[::-1])[:5]
    assert page.items[0].title == "My Run 102" and page.items[0].nodes == 2 and page.items[0].backend == "local"
    assert [s.id for s in index.page(offset=13).items] == a[1::-1]
    assert {s.id for s in index.page(state=("failed",)).items} == set(b)
    assert index.page(experiment=("a",), state=("failed",)).total == 0
    assert index.page(since=1_000_000.0 + 100).total == 3
    with pytest.raises(BadInputError):
        index.page(limit=0)


def test_a_status_change_is_seen_at_once_and_a_foreign_write_by_the_sweep(tmp_path: Path) -> None:
    job_id = _run(tmp_path, "a", 1, state="running")
    index = JobIndex(tmp_path, sweep_every=1e9)  # never sweeps on its own after the first
    first = index.refresh()
    assert index.page().items[0].state == "running"
    _set_state(tmp_path, "a", job_id, "failed")  # through write_status: journalled
    assert index.refresh(sweep=False) > first
    assert index.page(sweep=False).items[0].state == "failed"
    generation = index.refresh(sweep=False)
    assert index.refresh(sweep=False) == generation  # nothing changed: same generation (same ETag)

    # a run folder made by anyone shows up without a sweep (its experiment's runs/ changed)
    time.sleep(0.01)
    other = _run(tmp_path, "a", 2)
    assert other in {s.id for s in index.page(sweep=False).items}

    # a writer that bypasses write_json (an old version, a tool) is seen by the sweep
    status = tmp_path / "a" / "runs" / job_id / "status.json"
    data = json.loads(status.read_text())
    tmp = status.with_name("x.tmp")
    tmp.write_text(json.dumps({**data, "state": "cancelled"}))
    tmp.replace(status)
    assert index.page(sweep=True, state=("cancelled",)).total == 1


def test_removed_runs_leave_and_a_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    ids = [_run(tmp_path, "a", i) for i in range(4)]
    assert JobIndex(tmp_path).page().total == 4
    saved = tmp_path / ".jobindex" / f"index-{os.geteuid()}.json"  # one cache per uid
    assert saved.is_file()
    import shutil

    shutil.rmtree(tmp_path / "a" / "runs" / ids[0])
    assert {s.id for s in JobIndex(tmp_path).summaries()} == set(ids[1:])
    saved.write_text("{not json")
    assert {s.id for s in JobIndex(tmp_path).summaries()} == set(ids[1:])
    assert json.loads(saved.read_text())["version"] >= 1  # written whole again
    saved.unlink()
    index = JobIndex(tmp_path)
    assert index.page().total == 3
    assert index.rebuild() >= 0 and index.page(sweep=False).total == 3


def test_many_writers_and_readers_agree_with_the_folders(tmp_path: Path) -> None:
    ids = [_run(tmp_path, f"e{i % 3}", i, state="running") for i in range(60)]
    JobIndex(tmp_path).refresh()  # the index (and its journal) exist: writers journal their changes
    errors: list[BaseException] = []

    def writer(part: int) -> None:
        try:
            index = JobIndex(tmp_path, sweep_every=1e9)
            for i, job_id in enumerate(ids):
                if i % 4 == part:
                    _set_state(tmp_path, f"e{i % 3}", job_id, "succeeded" if i % 2 else "failed")
                    index.refresh(sweep=False)  # each writer also rewrites index.json
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    truth = {job_id: ("succeeded" if i % 2 else "failed") for i, job_id in enumerate(ids)}
    # a new process reads index.json (whole, valid) and sweeps: exactly the folders' truth
    assert {s.id: s.state for s in JobIndex(tmp_path).summaries()} == truth
    # a long-lived reader that only follows the journal sees every change too
    follower = JobIndex(tmp_path, sweep_every=1e9)
    follower.refresh()
    _set_state(tmp_path, "e0", ids[0], "cancelled")
    assert {s.id: s.state for s in follower.summaries(sweep=False)}[ids[0]] == "cancelled"
