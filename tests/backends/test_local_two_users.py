"""Local jobs of two real users on one experiments root (docs/sharing.md; issue 34, issue 38).

Each user runs as a real non-root uid (``setpriv``; skipped, visibly, when not root). What is
checked is what a user of a shared volume would notice: a folder another member planted never
makes your list run its code; only a job's owner (or an administrator) cancels or preempts it;
a record another uid wrote in your run folder is not believed; run folders are private, or
readable by the group and nobody else in group mode, whatever the umask.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.local import _local
from jupyter_starverse.backends.local._local import LocalBackend
from jupyter_starverse.experiments import ExperimentPaths, RunStatus, read_status, write_json, write_status
from jupyter_starverse.jobmodel import JobSpec
from tests._users import ADMINS, ALICE, BOB, CAROL, TEAM, as_root, as_user, cli_as, shared_env

EVIL_ID = "evil-20250101-000000-beef"


def _env(base: Path, uid: int, **extra: str) -> dict[str, str]:
    """One shared store and experiments root; each user's own home (mode, kernel state)."""
    return shared_env(base, STARVERSE_HOME=str(base / f"home-{uid}"), STARVERSE_MODE="cpu", **extra)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _group_root(base: Path) -> Path:
    """The experiments root as docs/sharing.md says: group TEAM, 2775."""
    root = base / "experiments"
    root.mkdir()
    os.chown(root, 0, TEAM)
    root.chmod(0o2775)
    return root


_PLANT = """
import json, os, time
from pathlib import Path
run = Path("{run}")
run.mkdir(parents=True, mode={mode})
os.chmod(run, {mode})
(run / "logs").mkdir()
marker = "{marker}"
spec = {{"name": "evil", "command": ["sh", "-c", "touch " + marker + ".spec"]}}
(run / "spec.json").write_text(json.dumps(spec))
argv = ["sh", "-c", "touch " + marker + ".plan"]
plan = {{"job_id": run.name, "port": None, "max_node_relaunches": 0,
        "nodes": [{{"index": 0, "argv": argv, "env": {{}}}}]}}
(run / "plan.json").write_text(json.dumps(plan))
node = {{"index": 0, "state": "running", "pid": {pid}, "launches": [[time.time() - 60, None]]}}
status = {{"job_id": run.name, "state": "running", "created": time.time() - 60, "started": time.time() - 60,
          "supervisor_pid": {pid}, "nodes": [node]}}
(run / "status.json").write_text(json.dumps(status))
(run / "supervisor.json").write_text(json.dumps({{"pid": {pid}, "started": time.time() - 60}}))
"""


def _plant_dead_job(base: Path, root: Path, *, mode: int) -> tuple[Path, Path]:
    """As BOB: a run folder whose supervisor is dead and whose spec and plan would write a marker."""
    run = root / "bobexp" / "runs" / EVIL_ID
    marker = base / "MARKER"
    code = _PLANT.format(run=run, mode=oct(mode), marker=marker, pid=_dead_pid())
    made = as_user(BOB, [TEAM], code, _env(base, BOB), base, umask=0o002)
    assert made.returncode == 0, made.stderr
    return run, marker


def _no_marker(marker: Path) -> None:
    time.sleep(1.0)  # a supervisor started by the list would have run its command by now
    found = sorted(p.name for p in marker.parent.glob(marker.name + ".*"))
    assert found == [], f"a planted command ran: {found}"


# -- finding 1: a list never runs what another user's folder says --------------------------------


@as_root
def test_listing_a_planted_dead_job_runs_nothing_and_shows_it(shared_tmp: Path) -> None:
    root = _group_root(shared_tmp)
    run, marker = _plant_dead_job(shared_tmp, root, mode=0o2775)
    env = _env(shared_tmp, ALICE)

    listed = cli_as(ALICE, [TEAM], env, shared_tmp, "jobs", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert EVIL_ID in [j["id"] for j in json.loads(listed.stdout)]
    facade = as_user(
        ALICE, [TEAM], "from jupyter_starverse.client import Starverse\nprint([j.id for j in Starverse().jobs()])", env,
        shared_tmp,
    )  # fmt: skip
    assert facade.returncode == 0, facade.stderr
    assert EVIL_ID in facade.stdout
    shown = cli_as(ALICE, [TEAM], env, shared_tmp, "jobs", "show", EVIL_ID, "--json")
    assert shown.returncode == 0, shown.stderr
    assert "owner" in json.loads(shown.stdout)["reason"]  # its dead supervisor is named, left to its owner
    _no_marker(marker)
    assert not (run / "supervisor.log").exists()  # no supervisor was started for it
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # nor its status rewritten


@as_root
def test_a_private_planted_folder_is_skipped_with_a_warning_not_a_traceback(shared_tmp: Path) -> None:
    root = _group_root(shared_tmp)
    _run, marker = _plant_dead_job(shared_tmp, root, mode=0o700)
    listed = cli_as(ALICE, [TEAM], _env(shared_tmp, ALICE), shared_tmp, "jobs", "ls")
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr + listed.stdout
    assert "1 run folder skipped" in listed.stdout and "not readable" in listed.stdout
    _no_marker(marker)


@as_root
def test_root_listing_another_users_folder_starts_nothing(shared_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root (a server run by root): ``client.jobs()`` and ``jobs ls`` leave bob's folder alone."""
    root = _group_root(shared_tmp)
    run, marker = _plant_dead_job(shared_tmp, root, mode=0o2775)
    monkeypatch.setenv("STARVERSE_EXPERIMENTS", str(root))
    backend = LocalBackend(Settings.from_env())
    assert EVIL_ID in [j.id for j in backend.list()]
    _no_marker(marker)
    assert not (run / "supervisor.log").exists()


def test_a_take_over_runs_the_spec_not_the_plan_file(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Own folder, dead supervisor, a plan.json rewritten to run a shell command: the new supervisor
    gets the plan rebuilt from the validated spec on its stdin, never the file's."""
    spec = JobSpec(name="mine", command=("python", "-c", "print('trained')"))
    run = ExperimentPaths.of(settings.experiments, spec.experiment_name).run("mine-20250101-000000-abcd")
    run.make()
    write_json(run.spec, spec.to_json())
    evil = {"job_id": run.job_id, "port": None, "nodes": [{"index": 0, "argv": ["sh", "-c", "touch /tmp/x"]}]}
    write_json(run.plan, evil)
    now = time.time()
    node = {"index": 0, "state": "running", "launches": [[now - 30, None]]}
    status = RunStatus.from_json({"job_id": run.job_id, "state": "running", "created": now - 30,
                                  "supervisor_pid": _dead_pid(), "nodes": [node]})  # fmt: skip
    write_status(run, status)
    started: dict[str, Any] = {}

    def fake_start(run_: Any, settings_: Any, sock: Any, **kw: Any) -> int:
        started.update(kw)
        return _dead_pid()

    monkeypatch.setattr(_local, "start_supervisor", fake_start)
    job = LocalBackend(settings).get(run.job_id)
    assert job.state.value == "preempted", job.reason
    argv = [a for n in started["plan"].nodes for a in n.argv]
    assert "touch /tmp/x" not in argv and "print('trained')" in argv
    assert started["spec"] == spec and started["resume"] is True


def test_the_supervisor_refuses_to_start_without_a_plan_from_its_parent(settings: Settings) -> None:
    run = ExperimentPaths.of(settings.experiments, "x").run("x-20250101-000000-abcd")
    run.make()
    write_json(run.spec, JobSpec(name="x", command=("true",)).to_json())
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_starverse.backends.local._supervisor", str(run.root)],
        input=b"", capture_output=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and b"refusing to start" in out.stderr
    assert read_status(run) is None  # nothing recorded, nothing run


# -- finding 2: only the owner (or an administrator) cancels or preempts --------------------------


# A stand-in for alice's supervisor (a real launch as another uid cannot exec this checkout's
# interpreter here): it records itself as the run's live supervisor and honours cancel.json
# and preempt.json exactly as the supervisor does, through read_record.
_SUPERVISE = """
import os, sys, time
from pathlib import Path
from jupyter_starverse._procs import process_record
from jupyter_starverse.experiments import (ExperimentPaths, NodeRecord, RunStatus, read_record, run_modes,
                                           write_json, write_status)
from jupyter_starverse.jobmodel import JobSpec
run = ExperimentPaths.of(Path(sys.argv[1]), "shared").run(sys.argv[2])
run.make()
write_json(run.spec, JobSpec(name="long", command=("sleep", "300")).to_json())
write_json(run.plan, {"job_id": run.job_id, "port": None, "nodes": []})
now = time.time()
status = RunStatus(job_id=run.job_id, state="running", created=now, started=now, supervisor_pid=os.getpid(),
                   supervisor=process_record(os.getpid()), heartbeat=now, heartbeat_every=0.5,
                   nodes=(NodeRecord(0, state="running", launches=((now, None),)),))
write_status(run, status)
print("ready", flush=True)
admin = int(sys.argv[3])
for _ in range(1200):
    if isinstance(read_record(run.preempt, admin_gid=admin), dict):
        run.preempt.unlink()
        print("drill", flush=True)
    cancel = read_record(run.cancel, admin_gid=admin)
    if isinstance(cancel, dict):
        write_status(run, RunStatus(job_id=run.job_id, state="cancelled", created=now, started=now,
                                    finished=time.time(), reason=cancel.get("reason")))
        print("cancelled", flush=True)
        break
    time.sleep(0.1)
"""


def _supervised(base: Path, job_id: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARVERSE_")}
    env.update(_env(base, ALICE), PYTHONPATH=str(Path(__file__).resolve().parents[2]), HOME=str(base))
    proc = subprocess.Popen(
        ["setpriv", f"--reuid={ALICE}", f"--regid={ALICE}", f"--groups={TEAM}", sys.executable, "-c", _SUPERVISE,
         str(base / "experiments"), job_id, str(ADMINS)],
        env=env, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + (proc.stderr.read() if proc.stderr else "")
    return proc


@as_root
def test_only_the_owner_or_an_admin_cancels_or_preempts(shared_tmp: Path) -> None:
    _group_root(shared_tmp)
    env = _env(shared_tmp, ALICE, STARVERSE_ADMIN_GROUP=str(ADMINS))
    bob = _env(shared_tmp, BOB, STARVERSE_ADMIN_GROUP=str(ADMINS))
    first, second = "long-20250101-000000-0001", "long-20250101-000000-0002"
    procs = [_supervised(shared_tmp, first), _supervised(shared_tmp, second)]
    try:
        for action in ("cancel", "preempt"):
            denied = cli_as(BOB, [TEAM], bob, shared_tmp, "jobs", action, first)
            assert denied.returncode == 6, denied.stdout + denied.stderr  # forbidden, with a hint
            assert "belongs to" in denied.stderr and "STARVERSE_ADMIN_GROUP" in denied.stderr
        shown = cli_as(BOB, [TEAM], bob, shared_tmp, "jobs", "show", first, "--json")
        assert json.loads(shown.stdout)["state"] == "running", shown.stdout + shown.stderr
        run = shared_tmp / "experiments" / "shared" / "runs" / first
        assert not (run / "cancel.json").exists() and not (run / "preempt.json").exists()

        drill = cli_as(ALICE, [TEAM], env, shared_tmp, "jobs", "preempt", first, "--json")
        assert drill.returncode == 0, drill.stderr  # the owner may
        mine = cli_as(ALICE, [TEAM], env, shared_tmp, "jobs", "cancel", first, "--json")
        assert mine.returncode == 0, mine.stderr
        assert json.loads(mine.stdout)["state"] == "cancelled"

        admin = cli_as(BOB, [TEAM, ADMINS], bob, shared_tmp, "jobs", "cancel", second, "--json")
        assert admin.returncode == 0, admin.stderr  # a member of the admin group may
        assert json.loads(admin.stdout)["state"] == "cancelled"
        outs = [p.communicate(timeout=30)[0] for p in procs]
        assert outs[0].split() == ["drill", "cancelled"] and outs[1].split() == ["cancelled"]
    finally:
        for p in procs:
            p.kill()


@as_root
def test_a_forged_cancel_does_not_stop_the_job(shared_tmp: Path) -> None:
    _group_root(shared_tmp)
    job = "long-20250101-000000-0003"
    proc = _supervised(shared_tmp, job)
    try:
        run = shared_tmp / "experiments" / "shared" / "runs" / job
        forge = f"open('{run}/cancel.json', 'w').write('{{\"reason\": \"cancelled by user\"}}')"
        assert as_user(BOB, [TEAM], forge, _env(shared_tmp, BOB), shared_tmp).returncode == 0
        time.sleep(1.0)
        assert proc.poll() is None  # still supervising: the request was not believed
        assert read_status(run).state == "running"
    finally:
        proc.kill()


# -- finding 3: forged records are not believed; modes; logs never followed -----------------------


def _own_finished_run(settings: Settings, *, state: str = "succeeded") -> Any:
    spec = JobSpec(name="mine", command=("true",))
    run = ExperimentPaths.of(settings.experiments, "mine").run("mine-20250101-000000-0001")
    run.make()
    write_json(run.spec, spec.to_json())
    now = time.time()
    write_status(run, RunStatus(job_id=run.job_id, state=state, created=now, started=now, finished=now))
    return run


@as_root
def test_records_bob_writes_in_alices_run_folder_are_ignored(shared_tmp: Path) -> None:
    root = _group_root(shared_tmp)
    env, bob = _env(shared_tmp, ALICE), _env(shared_tmp, BOB)
    code = f"""
        import time
        from pathlib import Path
        from jupyter_starverse.experiments import ExperimentPaths, RunStatus, write_json, write_status
        from jupyter_starverse.jobmodel import JobSpec
        run = ExperimentPaths.of(Path("{root}"), "shared").run("alice-20250101-000000-abcd")
        run.make()
        write_json(run.spec, JobSpec(name="alice", command=("true",)).to_json())
        now = time.time()
        write_status(run, RunStatus(job_id=run.job_id, state="succeeded", created=now, started=now, finished=now))
        print(run.root)
    """
    made = as_user(ALICE, [TEAM], code, env, shared_tmp)
    assert made.returncode == 0, made.stderr
    run = Path(made.stdout.strip())
    forge = f"""
        import json, os
        from pathlib import Path
        run = Path("{run}")
        for name, data in {{"status.json": {{"job_id": run.name, "state": "failed", "reason": "OOM"}},
                            "cost.json": {{"amount": "999", "currency": "CNY", "user": "u{ALICE}"}}}}.items():
            tmp = run / (name + ".bob")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, run / name)
    """
    forged = as_user(BOB, [TEAM], forge, bob, shared_tmp)
    assert forged.returncode == 0, forged.stderr  # the group may write there: it is what it writes that counts
    listed = cli_as(ALICE, [TEAM], env, shared_tmp, "jobs", "ls")
    assert listed.returncode == 0, listed.stderr
    assert "OOM" not in listed.stdout and "failed" not in listed.stdout.split("skipped")[0]
    assert "written by uid" in listed.stdout  # the footer names the forged record
    cost = as_user(
        ALICE, [TEAM], "from jupyter_starverse.costs import read_cost\n"
        f"try:\n    read_cost('{run}'); print('BELIEVED')\nexcept Exception as e:\n    print('refused', e)",
        env, shared_tmp,
    )  # fmt: skip
    assert cost.stdout.startswith("refused"), cost.stdout + cost.stderr


@as_root
def test_a_cancel_request_by_another_uid_is_not_believed(settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    from jupyter_starverse.experiments import read_record, trusted_record

    run = _own_finished_run(settings)
    write_json(run.cancel, {"reason": "mine"})
    assert trusted_record(run.cancel) and read_record(run.cancel) == {"reason": "mine"}
    os.chown(run.cancel, BOB, BOB)
    with caplog.at_level(logging.WARNING, logger="jupyter_starverse"):
        assert read_record(run.cancel) is None
    assert "not by the run's owner" in caplog.text
    os.chown(run.cancel, BOB, ADMINS)
    assert read_record(run.cancel, admin_gid=ADMINS) == {"reason": "mine"}  # an administrator's request


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_run_folders_get_their_modes_whatever_the_umask(settings: Settings, umask: int) -> None:
    old = os.umask(umask)
    try:
        run = _own_finished_run(settings)
    finally:
        os.umask(old)
    assert stat.S_IMODE(run.root.stat().st_mode) == 0o700
    for f in (run.spec, run.status):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600


@as_root
@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_group_mode_other_member_reads_carol_does_not(shared_tmp: Path, umask: int) -> None:
    root = _group_root(shared_tmp)
    env, bob, carol = (_env(shared_tmp, uid) for uid in (ALICE, BOB, CAROL))
    job_id = "quick-20250101-000000-0001"
    code = f"""
        import time
        from pathlib import Path
        from jupyter_starverse.experiments import ExperimentPaths, RunStatus, write_json, write_status
        from jupyter_starverse.jobmodel import JobSpec
        run = ExperimentPaths.of(Path("{root}"), "quick").run("{job_id}")
        run.make()  # what submit does: run_modes of the root, then spec, plan and status
        write_json(run.spec, JobSpec(name="quick", command=("true",)).to_json())
        write_json(run.plan, {{"job_id": run.job_id, "port": None, "nodes": []}})
        now = time.time()
        write_status(run, RunStatus(job_id=run.job_id, state="succeeded", created=now, started=now, finished=now))
    """
    made = as_user(ALICE, [TEAM], code, env, shared_tmp, umask=umask)
    assert made.returncode == 0, made.stderr
    run = next(root.glob(f"*/runs/{job_id}"))
    assert stat.S_IMODE(run.stat().st_mode) == 0o2770 and run.stat().st_gid == TEAM
    assert stat.S_IMODE(run.parent.stat().st_mode) == 0o3770  # runs/: sticky, nobody renames another's run
    for f in (run / "spec.json", run / "status.json", run / "plan.json"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o640, (f, oct(f.stat().st_mode))
    listed = cli_as(BOB, [TEAM], bob, shared_tmp, "jobs", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert job_id in [j["id"] for j in json.loads(listed.stdout)]
    read = as_user(BOB, [TEAM], f"print(open('{run}/spec.json').read()[:1])", bob, shared_tmp)
    assert read.stdout.strip() == "{", read.stderr
    denied = as_user(CAROL, [], f"open('{run}/spec.json').read()", carol, shared_tmp)
    assert denied.returncode != 0 and "PermissionError" in denied.stderr
    carol_ls = cli_as(CAROL, [], carol, shared_tmp, "jobs", "ls", "--json")
    assert carol_ls.returncode == 0, carol_ls.stderr
    assert job_id not in carol_ls.stdout


def test_a_link_in_logs_is_refused_not_written_through(settings: Settings, tmp_path: Path) -> None:
    from jupyter_starverse.backends.local._attempts import banner
    from jupyter_starverse.backends.local._supstate import open_log
    from jupyter_starverse.errors import PermissionDeniedError

    run = _own_finished_run(settings)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (run.logs / "node0.log").symlink_to(victim)
    (run.logs / "rank0.log").symlink_to(victim)
    with pytest.raises(PermissionDeniedError):
        open_log(run, run.node_log(0))
    banner(run, 1, "--- restart ---")
    worker = subprocess.run(
        [sys.executable, "-m", "jupyter_starverse.backends._worker", "-c"],
        env={**os.environ, "STARVERSE_EXPERIMENT_DIR": str(run.root), "RANK": "0"}, capture_output=True, timeout=60,
    )  # fmt: skip
    assert worker.returncode != 0 and b"Too many levels of symbolic links" in worker.stderr
    assert victim.read_text() == "mine\n"


@as_root
async def test_rest_cancel_of_another_users_job_is_403(
    jp_fetch: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tornado.httpclient import HTTPClientError

    run = ExperimentPaths.of(settings.experiments, "shared").run("alice-20250101-000000-0001")
    run.make()
    write_json(run.spec, JobSpec(name="alice", command=("true",)).to_json())
    now = time.time()
    write_status(run, RunStatus(job_id=run.job_id, state="running", created=now, started=now, heartbeat=now))
    for path in (run.root, run.spec, run.status):
        os.chown(path, ALICE, ALICE)
    monkeypatch.setattr(os, "geteuid", lambda: BOB)  # the server's user is bob (root only sets the files up)
    for method, path in (("DELETE", ()), ("POST", ("cancel",)), ("POST", ("preempt",))):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("jupyter-starverse", "jobs", run.job_id, *path, method=method,
                           **({"body": "{}"} if method == "POST" else {}))  # fmt: skip
        assert err.value.code == 403
        assert "belongs to" in json.loads(err.value.response.body)["message"]
    assert not run.cancel.exists() and not run.preempt.exists()
