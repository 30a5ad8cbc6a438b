"""Checkpoint trust by provenance, not by uid or umask (issue 38 finding 5, issue 34 finding 5).

Every run signs its checkpoint records with a secret of its own (``<run>/.secret``, 0600):
a checkpoint copied from another run or experiment, a record edited after writing, or one
without an HMAC is refused with a reason, even when every file belongs to the same uid. The
modes are the runtime's own, so umask 002 (group work) no longer makes a job distrust the
record it just wrote: a preempted job resumes from its checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse.errors import PermissionDeniedError
from jupyter_starverse.experiments import (
    CHECKPOINT_INDEX,
    ExperimentPaths,
    checkpoint_name,
    latest_checkpoint,
    plan_resume,
    record_checkpoint,
    write_json,
)
from jupyter_starverse.experiments._checkpoints import RUN_SECRET
from jupyter_starverse.runtime import _dist
from jupyter_starverse.runtime._metrics import close_metrics
from tests._users import ALICE, BOB, CAROL, TEAM, as_root, as_user
from tests.runtime._jobenv import as_job

ROOT = Path(__file__).resolve().parents[2]


def _fake(run: Path, step: int, t: float) -> Path:
    """A complete checkpoint folder (no torch needed) recorded by its run."""
    d = run / "checkpoints" / checkpoint_name(step)
    d.mkdir(parents=True)
    (d / ".metadata").write_bytes(b"dcp metadata %d" % step)
    (d / "meta.json").write_text(json.dumps({"step": step, "world_size": 2, "time": t}))
    record_checkpoint(d, step=step, world_size=2, time=t, job_id=run.name)
    return d


def _index(run: Path) -> dict[str, object]:
    return json.loads((run / "checkpoints" / CHECKPOINT_INDEX).read_text())


def _write_index(run: Path, data: dict[str, object]) -> None:
    (run / "checkpoints" / CHECKPOINT_INDEX).write_text(json.dumps(data))


@pytest.fixture
def exp(tmp_path: Path) -> ExperimentPaths:
    """Experiment ``e`` with run ``a`` (checkpoints 4 and 9)."""
    exp = ExperimentPaths.of(tmp_path, "e")
    a = exp.run("a")
    a.make()
    _fake(a.root, 4, 100.0)
    _fake(a.root, 9, 200.0)
    return exp


def test_each_run_has_a_private_secret_and_signs_every_record(exp: ExperimentPaths) -> None:
    run = exp.run("a").root
    secret = run / RUN_SECRET
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_text().strip()) == 64
    entries = _index(run)["checkpoints"]
    assert isinstance(entries, list) and [e["step"] for e in entries] == [4, 9]
    sizes = [{p.name: p.stat().st_size for p in (run / "checkpoints" / checkpoint_name(s)).iterdir()} for s in (4, 9)]
    assert [e["files"] for e in entries] == sizes and all(len(e["hmac"]) == 64 for e in entries)
    assert secret.read_text().strip() not in (run / "checkpoints" / CHECKPOINT_INDEX).read_text()


def test_a_checkpoint_copied_from_another_run_is_refused(exp: ExperimentPaths) -> None:
    b = exp.run("b")
    b.make()
    _fake(b.root, 1, 50.0)  # run b has a secret of its own
    # someone with the same uid copies a's newest checkpoint and its record into b, made newer
    shutil.copytree(exp.run("a").checkpoints / checkpoint_name(9), b.checkpoints / checkpoint_name(9))
    data = _index(b.root)
    copied = next(e for e in _index(exp.run("a").root)["checkpoints"] if e["step"] == 9)
    data["checkpoints"].append(copied)
    _write_index(b.root, data)
    plan = plan_resume(exp, new_world_size=2)
    assert plan.checkpoint is not None and plan.checkpoint.path == exp.run("a").checkpoints / checkpoint_name(9)
    refused = {i.path: i.reason for i in plan.ignored}
    assert "copied from another run" in refused[b.checkpoints / checkpoint_name(9)]
    assert str(b.checkpoints / checkpoint_name(9)) in str(plan)

    # a whole run folder (with its secret) moved into another experiment is refused there too
    other = ExperimentPaths.of(exp.root.parent, "other")
    other.runs.mkdir(parents=True)
    shutil.copytree(exp.run("a").root, other.run("a").root)
    moved = plan_resume(other, new_world_size=2)
    assert moved.checkpoint is None and len(moved.ignored) == 2
    assert all("copied from another run or experiment" in i.reason for i in moved.ignored)


def test_a_record_edited_after_writing_or_without_an_hmac_is_refused(exp: ExperimentPaths) -> None:
    run = exp.run("a").root
    data = _index(run)
    data["checkpoints"][1]["time"] = 9e12  # edited to look newest
    _write_index(run, data)
    plan = plan_resume(exp, new_world_size=2)
    assert plan.checkpoint is not None and plan.checkpoint.step == 4
    assert [i.step for i in plan.ignored] == [9] and "edited after writing" in plan.ignored[0].reason

    for entry in data["checkpoints"]:  # a record of the old format: no HMAC, nothing verifies it
        del entry["hmac"]
    _write_index(run, data)
    plan = plan_resume(exp, new_world_size=2)
    assert plan.checkpoint is None and plan.start_step == 0
    assert [i.reason for i in plan.ignored] == [
        "its entry in index.json has no HMAC (not written by a run of this version)"
    ] * 2


def test_a_file_that_changed_or_was_added_after_writing_is_refused(exp: ExperimentPaths) -> None:
    step9 = exp.run("a").checkpoints / checkpoint_name(9)
    (step9 / "meta.json").write_text("{}")
    (step9 / "__0_0.distcp").write_bytes(b"x")
    plan = plan_resume(exp, new_world_size=2)
    assert plan.checkpoint is not None and plan.checkpoint.step == 4
    assert "does not list (__0_0.distcp)" in plan.ignored[0].reason
    (step9 / "__0_0.distcp").unlink()
    assert "its file meta.json is 2 bytes, the run recorded 4" in plan_resume(exp, new_world_size=2).ignored[0].reason


def test_a_secret_anyone_may_read_vouches_for_nothing(exp: ExperimentPaths) -> None:
    (exp.run("a").root / RUN_SECRET).chmod(0o644)
    plan = plan_resume(exp, new_world_size=2)
    assert plan.checkpoint is None and "secret is open to others (mode 644)" in plan.ignored[0].reason
    _fake(exp.run("a").root, 14, 300.0)  # the run's next save makes it private again, and the records hold
    assert [c.step for c in [plan_resume(exp, new_world_size=2).checkpoint] if c] == [14]
    assert stat.S_IMODE((exp.run("a").root / RUN_SECRET).stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another uid (65534)")
def test_a_secret_another_uid_planted_in_our_run_folder_is_replaced(tmp_path: Path) -> None:
    run = tmp_path / "e" / "runs" / "r"
    run.mkdir(parents=True)
    planted = run / RUN_SECRET
    planted.write_text("ab" * 32 + "\n")  # the planter knows this key
    os.chown(planted, 65534, -1)
    planted.chmod(0o600)
    _fake(run, 1, 1.0)
    assert planted.stat().st_uid == os.geteuid() and planted.read_text().strip() != "ab" * 32
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.step == 1


# ------------------------------------------------------------------------------ umask 002 (issue 34)
PREEMPTED = """
import os, signal, torch
from jupyter_starverse import runtime as sv
model = torch.nn.Linear(2, 1)
for step in sv.steps(1000, model=model, checkpoint_every=2):
    sv.log_metrics(step, loss=float(step))
    if step == STOP:
        os.kill(os.getpid(), signal.SIGTERM)
"""


def _preempt_then_resume(run: Path, umask: int) -> tuple[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "STARVERSE_EXPERIMENT_DIR": str(run),
    }
    outs = []
    for stop in (5, 7):
        code = f"import os; os.umask({umask:#o})\n" + PREEMPTED.replace("STOP", str(stop))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        outs.append(out.stdout)
    return outs[0], outs[1]


@pytest.mark.parametrize("umask", [0o002, 0o077])
def test_under_any_umask_a_preempted_job_resumes_from_its_checkpoint(tmp_path: Path, umask: int) -> None:
    run = tmp_path / "e" / "runs" / "j"
    first, second = _preempt_then_resume(run, umask)
    assert "stopping after step 5: checkpoint saved" in first
    assert "resumed from step-00000005" in second, second  # before: index.json 0664, distrusted: step 0
    index = run / "checkpoints" / CHECKPOINT_INDEX
    assert not index.stat().st_mode & 0o022 and not (run / RUN_SECRET).stat().st_mode & 0o077
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.step == 7


@as_root
def test_alice_under_umask_002_resumes_her_preempted_job(shared_tmp: Path) -> None:
    run = shared_tmp / "experiments" / "e" / "runs" / "j"
    env = {"STARVERSE_EXPERIMENT_DIR": str(run), "OMP_NUM_THREADS": "1"}
    outs = [as_user(ALICE, [TEAM], PREEMPTED.replace("STOP", str(s)), env, shared_tmp, umask=0o002) for s in (5, 7)]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    assert "resumed from step-00000005" in outs[1].stdout, outs[1].stdout
    index = run / "checkpoints" / CHECKPOINT_INDEX
    assert index.stat().st_uid == ALICE and not index.stat().st_mode & 0o022


# --------------------------------------------------------------------------- two real uids (issue 38)
def _sign_as(uid: int, groups: list[int], run: Path, base: Path, step: int, umask: int = 0o022) -> None:
    code = f"""
        import json
        from pathlib import Path
        from jupyter_starverse.experiments import checkpoint_name, record_checkpoint
        d = Path({str(run)!r}) / "checkpoints" / checkpoint_name({step})
        d.mkdir(parents=True)
        (d / ".metadata").write_bytes(b"dcp metadata")
        (d / "meta.json").write_text("{{}}")
        record_checkpoint(d, step={step}, world_size=1, time=1e12, job_id="x")
    """
    out = as_user(uid, groups, code, {}, base, umask=umask)
    assert out.returncode == 0, out.stderr


def _plan_as(uid: int, groups: list[int], exp: Path, base: Path) -> dict[str, object]:
    code = f"""
        import json
        from jupyter_starverse.experiments import plan_resume
        print(json.dumps(plan_resume({str(exp)!r}, new_world_size=1).to_json()))
    """
    out = as_user(uid, groups, code, {}, base)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@as_root
def test_another_users_run_is_refused_even_with_a_valid_hmac(shared_tmp: Path) -> None:
    exp = shared_tmp / "experiments" / "e"
    (exp / "runs").mkdir(parents=True)
    (exp / "runs").chmod(0o1777)  # anyone may add a run folder (sticky: nobody removes another's)
    _sign_as(ALICE, [], exp / "runs" / "alice-run", shared_tmp, 3)
    _sign_as(BOB, [], exp / "runs" / "bob-run", shared_tmp, 99)  # newer, signed with bob's own secret

    plan = _plan_as(ALICE, [], exp, shared_tmp)
    assert plan["checkpoint_step"] == 3
    assert [(i["step"], i["reason"]) for i in plan["ignored"]] == [
        (99, "its run's secret cannot be read by this user (another user's run)")
    ]
    # root reads every file, yet a secret root did not write vouches for nothing
    as_root_sees = {i.step: i.reason for i in plan_resume(exp, new_world_size=1).ignored}
    assert f"its run's secret belongs to uid {BOB}, not to this user (uid 0)" in as_root_sees[99]


@as_root
def test_in_a_group_shared_run_folder_members_resume_each_other_and_outsiders_do_not(shared_tmp: Path) -> None:
    exp = shared_tmp / "experiments" / "e"
    (exp / "runs").mkdir(parents=True)
    os.chown(exp / "runs", 0, TEAM)
    (exp / "runs").chmod(0o3775)  # setgid + sticky: the group-shared layout of docs/sharing.md
    run = exp / "runs" / "bob-run"
    code = f"import os; os.mkdir({str(run)!r}); os.chmod({str(run)!r}, 0o2750)"
    assert as_user(BOB, [TEAM], code, {}, shared_tmp).returncode == 0
    _sign_as(BOB, [TEAM], run, shared_tmp, 7, umask=0o002)
    secret = run / RUN_SECRET
    assert stat.S_IMODE(secret.stat().st_mode) == 0o640 and secret.stat().st_gid == TEAM

    assert _plan_as(ALICE, [TEAM], exp, shared_tmp)["checkpoint_step"] == 7  # a member of the group
    outsider = _plan_as(CAROL, [], exp, shared_tmp)  # outside the group: the run folder is closed to her
    assert outsider["checkpoint_step"] is None and outsider["start_step"] == 0


# ---------------------------------------------------------------------------- resume through the runtime
@pytest.fixture
def torch_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ExperimentPaths]:
    pytest.importorskip("torch")
    yield ExperimentPaths.of(tmp_path, "e")
    close_metrics()
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()


def test_a_new_run_resumes_an_older_run_and_refuses_its_edited_record(
    torch_job: ExperimentPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    old = torch_job.run("old")
    old.make()
    write_json(old.spec, {"name": "e"})
    as_job(monkeypatch, old.root)
    model = torch.nn.Linear(3, 2)
    sv.save_checkpoint(4, model=model)
    plan = plan_resume(torch_job, new_world_size=1)
    assert plan.checkpoint is not None

    new = torch_job.run("new")
    as_job(monkeypatch, new.root, resume_from=plan.checkpoint.path)
    assert sv.load_latest(model=torch.nn.Linear(3, 2)) == 5  # the old run's secret vouches for it

    data = _index(old.root)
    data["checkpoints"][0]["world_size"] = 8
    _write_index(old.root, data)
    with pytest.raises(PermissionDeniedError, match="edited after writing") as err:
        sv.load_latest(model=torch.nn.Linear(3, 2))
    assert str(plan.checkpoint.path) in str(err.value) and err.value.hint


def test_nothing_is_unpickled_but_by_torch_distributed_checkpoint() -> None:
    """No ``torch.load`` without ``weights_only=True`` and no ``pickle.load`` in code that loads checkpoints."""
    offenders = []
    for folder in ("runtime", "experiments", "backends", "recipes"):
        for path in (ROOT / "jupyter_starverse" / folder).rglob("*.py"):
            text = path.read_text()
            for i, line in enumerate(text.splitlines(), 1):
                if ("torch.load(" in line and "weights_only=True" not in line) or "pickle.load" in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert offenders == [], textwrap.indent("\n".join(offenders), "  ")
