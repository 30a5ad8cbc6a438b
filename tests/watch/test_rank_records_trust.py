"""The monitor believes only what the run's owner wrote about its ranks (issue 34: records planted by another uid).

In a group-shared run folder (2770) every member can create files in ``pids/``, ``errors/`` and
``ranks/``; the watch reads them with the local backend's trusted reader, so bob's planted pid
(which a later stop or a "process gone" judgement would act on), error or rank speed is not shown.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from jupyter_starverse.experiments import RunPaths
from jupyter_starverse.jobmodel import Job, JobSpec, JobState
from jupyter_starverse.watch import first_rank_error, read_rank_points, read_rank_records
from tests._users import ALICE, BOB, TEAM, as_root, as_user

PLANT = """
import json, pathlib
run = pathlib.Path({run!r})
(run / "pids" / "rank1.json").write_text(json.dumps({{"pid": 1, "node": 0, "local_rank": 1, "attempt": 0}}))
(run / "errors" / "rank1.json").write_text(json.dumps({{"rank": 1, "node": 0, "error": "OOM (forged)", "time": 1}}))
(run / "ranks" / "rank1.jsonl").write_text(json.dumps({{"step": 99, "time": 1, "rank": 1, "loss": 0.0}}) + "\\n")
"""


def _alice_run(base: Path) -> Path:
    run = base / "exp" / "j" / "runs" / "j-1"
    run.mkdir(parents=True)
    for p in (run, run.parent, run.parent.parent, run.parent.parent.parent):
        os.chown(p, ALICE, TEAM)
        p.chmod(0o2770)
    for name in ("pids", "errors", "ranks"):
        (run / name).mkdir()
        os.chown(run / name, ALICE, TEAM)
        (run / name).chmod(0o2770)
    record = run / "pids" / "rank0.json"
    record.write_text(json.dumps({"pid": os.getpid(), "node": 0, "local_rank": 0, "attempt": 0}))
    os.chown(record, ALICE, TEAM)
    return run


@as_root
def test_a_pid_error_or_rank_record_planted_by_another_uid_is_not_shown(shared_tmp: Path) -> None:
    run = _alice_run(shared_tmp)
    out = as_user(BOB, [TEAM], PLANT.format(run=str(run)), {}, shared_tmp)
    assert out.returncode == 0, out.stderr
    assert (run / "pids" / "rank1.json").stat().st_uid == BOB  # bob could write there: the folder is the group's

    job = Job("j-1", "local", JobSpec(name="j", code="x=1", procs_per_node=2), JobState.RUNNING, str(run), 0.0)
    records = read_rank_records(job)
    assert [r.rank for r in records] == [0] and records[0].pid == os.getpid()
    assert first_rank_error(RunPaths(run)) is None
    assert read_rank_points(job) == {}

    # the same records written by alice are shown
    for f in ("pids/rank1.json", "errors/rank1.json", "ranks/rank1.jsonl"):
        os.chown(run / f, ALICE, TEAM)
    assert [r.rank for r in read_rank_records(job)] == [0, 1]
    assert "OOM (forged)" in (first_rank_error(RunPaths(run)) or "")
    assert list(read_rank_points(job)) == [1]
