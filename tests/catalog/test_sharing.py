"""One store and experiments folder shared by several users: group mode, read-only mounts,
``store verify`` and usage holds (docs/sharing.md).

The multi-user tests run the second (and first) user as real non-root uids with ``setpriv``
(root bypasses permission checks, so every write that must fail is tried as a plain uid);
they are skipped, visibly, when the tests do not run as root.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog, DatasetRef
from jupyter_starverse.cli import main
from jupyter_starverse.errors import ConflictError, PermissionDeniedError
from jupyter_starverse.experiments import RunPaths, write_json
from tests._users import ALICE, BOB, TEAM, as_root, as_user, cli_as
from tests._users import shared_env as _env


def _folder(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _age_usage_stamps(store: Path) -> None:
    for p in (store / ".usage").glob("*"):
        os.utime(p, (time.time() - 600, time.time() - 600))


# -- group mode, two real users ----------------------------------------------------------------


@as_root
def test_group_mode_second_user_adds_pulls_and_mounts(shared_tmp: Path) -> None:
    src = _folder(shared_tmp / "src", {"a.txt": b"alpha", "sub/b.bin": os.urandom(10_000)})
    for d in (src, src / "sub"):
        d.chmod(0o755)
    env = _env(shared_tmp, STARVERSE_SHARED_GROUP=str(TEAM))
    first = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "toy", str(src))
    assert first.returncode == 0, first.stderr
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "toy").returncode == 0
    store = shared_tmp / "store"
    for folder in (store, store / "catalog" / "datasets", store / ".leases", store / ".usage"):
        st = folder.stat()
        assert st.st_gid == TEAM and stat.S_IMODE(st.st_mode) == 0o3775, (folder, oct(st.st_mode))  # sticky
    for folder in (store / "catalog" / "datasets" / "toy", store / "data" / "toy"):  # an entry's: its owner's only
        assert stat.S_IMODE(folder.stat().st_mode) == 0o2750, (folder, oct(folder.stat().st_mode))
    _age_usage_stamps(store)  # Alice's stamp is old: Bob's mount must not try to utime it and crash

    second = cli_as(BOB, [TEAM], env, shared_tmp, "store", "add", "other", str(src))
    assert second.returncode == 0, second.stderr
    pulled = cli_as(BOB, [TEAM], env, shared_tmp, "store", "pull", "other", "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["state"] == "cached"
    mounted = cli_as(BOB, [TEAM], env, shared_tmp, "store", "mount", "toy")
    assert mounted.returncode == 0, mounted.stderr
    assert mounted.stdout.strip() == str(store / "data" / "toy" / "1")
    ls = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "ls", "--json")
    assert {e["ref"]: e["state"] for e in json.loads(ls.stdout)} == {"toy@1": "cached", "other@1": "cached"}


@as_root
def test_without_group_mode_a_second_user_gets_a_hint_not_a_traceback(shared_tmp: Path) -> None:
    src = _folder(shared_tmp / "src", {"a.txt": b"alpha"})
    env = _env(shared_tmp)
    assert cli_as(ALICE, [], env, shared_tmp, "store", "add", "toy", str(src)).returncode == 0
    assert cli_as(ALICE, [], env, shared_tmp, "store", "pull", "toy").returncode == 0
    _age_usage_stamps(shared_tmp / "store")

    add = cli_as(BOB, [], env, shared_tmp, "store", "add", "mine", str(src))
    assert add.returncode != 0
    assert "Traceback" not in add.stderr and "PermissionError" not in add.stderr
    assert "STARVERSE_SHARED_GROUP" in add.stderr and "docs/sharing.md" in add.stderr

    code = """
        from jupyter_starverse._settings import Settings
        from jupyter_starverse.catalog import Catalog, DatasetRef
        from jupyter_starverse.errors import PermissionDeniedError
        c = Catalog(Settings.from_env())
        print(c.mount("toy"))
        try:
            c.add_dataset("mine", "{src}")
        except PermissionDeniedError as e:
            print("denied", e.hint)
    """.replace("{src}", str(src))
    out = as_user(BOB, [], code, env, shared_tmp)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == str(shared_tmp / "store" / "data" / "toy" / "1")  # an old stamp of Alice's: no crash
    assert lines[1].startswith("denied") and "STARVERSE_SHARED_GROUP" in lines[1]


@as_root
def test_second_user_lists_the_first_users_jobs(shared_tmp: Path) -> None:
    """Group mode: a member lists and reads another member's run; otherwise run folders are private."""
    code = """
        import time
        from pathlib import Path
        from jupyter_starverse.experiments import ExperimentPaths, RunStatus, write_json, write_status
        from jupyter_starverse.jobmodel import JobSpec
        run = ExperimentPaths.of(Path("{exp}"), "demo").run("demo-20250101-000000-abcd")
        run.make()
        write_json(run.spec, JobSpec(name="demo", script="train.py").to_json())
        write_status(run, RunStatus(job_id=run.job_id, state="succeeded", created=time.time(), finished=time.time()))
    """
    for group_mode in (True, False):
        base = shared_tmp / ("group" if group_mode else "private")
        base.mkdir(mode=0o777)
        base.chmod(0o777)
        (base / "experiments").mkdir()
        if group_mode:  # the root as docs/sharing.md says: the group's, setgid
            os.chown(base / "experiments", 0, TEAM)
        (base / "experiments").chmod(0o2775 if group_mode else 0o777)
        env = _env(base, STARVERSE_SHARED_GROUP=str(TEAM)) if group_mode else _env(base)
        groups = [TEAM] if group_mode else []
        made = as_user(ALICE, groups, code.replace("{exp}", str(base / "experiments")), env, base)
        assert made.returncode == 0, made.stderr
        run = RunPaths(base / "experiments" / "demo" / "runs" / "demo-20250101-000000-abcd")
        for f in (run.spec, run.status):
            assert stat.S_IMODE(f.stat().st_mode) == (0o640 if group_mode else 0o600), (f, oct(f.stat().st_mode))
        assert stat.S_IMODE(run.root.stat().st_mode) == (0o2770 if group_mode else 0o700)

        listed = cli_as(BOB, groups, env, base, "jobs", "ls", "--json")
        assert listed.returncode == 0, listed.stderr
        jobs = [(j["id"], j["state"]) for j in json.loads(listed.stdout)]
        assert jobs == ([("demo-20250101-000000-abcd", "succeeded")] if group_mode else []), jobs


@as_root
def test_published_folders_are_read_only_even_for_their_owner(shared_tmp: Path) -> None:
    src = _folder(shared_tmp / "src", {"a.txt": b"alpha", "sub/b.txt": b"beta"})
    for d in (src, src / "sub"):
        d.chmod(0o755)
    env = _env(shared_tmp, STARVERSE_SHARED_GROUP=str(TEAM))
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "toy", str(src)).returncode == 0
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "toy").returncode == 0
    data = shared_tmp / "store" / "data" / "toy" / "1"
    for folder in (data, data / "sub"):
        assert stat.S_IMODE(folder.stat().st_mode) & 0o777 == 0o555, oct(folder.stat().st_mode)
    for f in (data / "a.txt", data / "sub" / "b.txt"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o444
    code = f"""
        import os
        for uid_try in ("create", "delete", "rename"):
            try:
                if uid_try == "create":
                    open("{data}/sub/new.txt", "w").write("x")
                elif uid_try == "delete":
                    os.unlink("{data}/a.txt")
                else:
                    os.rename("{data}/sub/b.txt", "{data}/sub/c.txt")
                print(uid_try, "ALLOWED")
            except PermissionError:
                print(uid_try, "refused")
    """
    for uid in (ALICE, BOB):  # the owner's job too: only a chmod (rm/evict) reopens it
        out = as_user(uid, [TEAM], code, env, shared_tmp)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["create", "refused", "delete", "refused", "rename", "refused"]
    st = cli_as(BOB, [TEAM], env, shared_tmp, "store", "status", "toy", "--json")
    assert json.loads(st.stdout)["state"] == "cached"
    rm = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "rm", "toy")
    assert rm.returncode == 0, rm.stderr
    assert not data.exists()


@as_root
def test_rm_refuses_while_another_users_job_holds_the_entry(shared_tmp: Path) -> None:
    src = _folder(shared_tmp / "src", {"a.txt": b"alpha"})
    env = _env(shared_tmp, STARVERSE_SHARED_GROUP=str(TEAM))
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "toy", str(src)).returncode == 0
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "toy").returncode == 0
    job = subprocess.Popen(["sleep", "60"])  # the job process the hold is tied to
    try:
        code = f"""
            from jupyter_starverse._settings import Settings
            from jupyter_starverse.catalog import Catalog, DatasetRef
            Catalog(Settings.from_env()).hold("toy", "job-bob-1", pid={job.pid})
        """
        held = as_user(BOB, [TEAM], code, env, shared_tmp)
        assert held.returncode == 0, held.stderr
        rm = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "rm", "toy")
        assert rm.returncode != 0 and "job-bob-1" in rm.stderr and "--force" in rm.stderr
        assert "Traceback" not in rm.stderr
        assert (shared_tmp / "store" / "data" / "toy" / "1" / "a.txt").read_bytes() == b"alpha"
        forced = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "rm", "--force", "toy")
        assert forced.returncode == 0, forced.stderr
        assert not (shared_tmp / "store" / "data" / "toy" / "1").exists()
    finally:
        job.kill()
        job.wait()


# -- one user (runs everywhere) ----------------------------------------------------------------


def test_published_entries_are_read_only_folders_and_files(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "src", {"a.txt": b"alpha", "sub/deep/b.txt": b"beta"})
    catalog.add_dataset("toy", str(src))
    catalog.pull("toy")
    data = catalog.mount("toy")
    for folder in (data, data / "sub", data / "sub" / "deep"):
        assert stat.S_IMODE(folder.stat().st_mode) & 0o777 == 0o555
    assert stat.S_IMODE((data / "sub" / "deep" / "b.txt").stat().st_mode) == 0o444
    assert catalog.evict(max_bytes=0)[0].ref == "toy@1"  # eviction reopens the folders to delete
    assert not data.exists()
    assert catalog.pull("toy").state == "cached"
    assert catalog.rm("toy") == ["toy@1"]
    assert not data.exists()


def test_verify_finds_a_tampered_byte_and_pull_repairs_it(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "src", {"a.txt": b"alpha" * 100, "b.txt": b"beta"})
    catalog.add_dataset("toy", str(src))
    catalog.pull("toy")
    assert catalog.verify("toy").ok
    manifest = json.loads(catalog.layout.manifest_path(catalog.layout.resolve(DatasetRef("toy", None))).read_text())
    assert all(f["sha256"] for f in manifest["files"])  # recorded at pull time

    data = catalog.mount("toy")
    target = data / "a.txt"
    target.chmod(0o644)
    raw = bytearray(target.read_bytes())
    raw[42] ^= 0x01  # one bit, same size
    data.chmod(0o755)
    target.write_bytes(bytes(raw))
    (data / "b.txt").unlink()
    (data / "planted.sh").write_text("echo hi")
    report = catalog.verify("toy")
    assert not report.ok and report.state == "corrupt"
    assert (report.tampered, report.missing, report.extra) == (("a.txt",), ("b.txt",), ("planted.sh",))
    assert catalog.status("toy").state == "corrupt"
    assert "CORRUPT" in str(report) and "store pull toy@1" in str(report)
    with pytest.raises(ConflictError, match="corrupt"):
        catalog.mount("toy")

    assert catalog.pull("toy").state == "cached"  # repairs: drops the bad files, fetches again
    assert catalog.verify("toy").ok
    assert target.read_bytes() == b"alpha" * 100 and not (data / "planted.sh").exists()
    assert stat.S_IMODE(data.stat().st_mode) & 0o777 == 0o555


def test_verify_checks_an_imported_model_through_its_links(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "model", {"config.json": b"{}", "weights.bin": os.urandom(4096)})
    catalog.import_model(src, repo="org/tiny")
    assert catalog.verify("hf:org/tiny").ok
    weights = catalog.mount("hf:org/tiny") / "weights.bin"
    blob = weights.resolve()
    blob.chmod(0o644)
    with open(blob, "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01")
    report = catalog.verify("hf:org/tiny")
    assert report.tampered == ("weights.bin",) and catalog.status("hf:org/tiny").state == "corrupt"


def test_cli_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _folder(tmp_path / "src", {"a.txt": b"alpha"})
    assert main(["store", "add", "toy", str(src)]) == 0
    assert main(["store", "pull", "toy"]) == 0
    capsys.readouterr()
    assert main(["store", "verify", "toy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["state"] == "cached" and out["checked"] == 1


def test_rm_and_evict_refuse_while_held_and_force_overrides(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "src", {"a.txt": b"alpha"})
    catalog.add_dataset("toy", str(src))
    catalog.pull("toy")
    with catalog.hold("toy", "job-1") as hold:
        assert [h.holder for h in catalog.holders("toy")] == ["job-1"]
        with pytest.raises(ConflictError) as err:
            catalog.rm("toy")
        assert "job-1" in str(err.value) and "--force" in str(err.value.hint)
        with pytest.raises(ConflictError, match="job-1"):
            catalog.evict(max_bytes=0)
        assert catalog.status("toy").state == "cached"
        assert hold.path.exists()
    assert catalog.holders("toy") == []
    with catalog.hold("toy", "job-2"):
        assert catalog.rm("toy", force=True) == ["toy@1"]
    assert catalog.ls() == []


def test_a_hold_of_a_dead_process_does_not_block(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "src", {"a.txt": b"alpha"})
    catalog.add_dataset("toy", str(src))
    catalog.pull("toy")
    proc = subprocess.Popen(["true"])
    proc.wait()
    catalog.hold("toy", "job-gone", pid=proc.pid)
    assert catalog.holders("toy") == []
    assert catalog.rm("toy") == ["toy@1"]


def test_cli_rm_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _folder(tmp_path / "src", {"a.txt": b"alpha"})
    assert main(["store", "add", "toy", str(src)]) == 0
    assert main(["store", "pull", "toy"]) == 0
    c = Catalog(Settings.from_env())
    with c.hold("toy", "job-cli"):
        capsys.readouterr()
        assert main(["store", "rm", "toy"]) != 0
        err = capsys.readouterr().err
        assert "job-cli" in err and "--force" in err
        assert main(["store", "rm", "--force", "toy"]) == 0


def test_an_unreachable_store_folder_is_permission_denied_with_a_hint(catalog: Catalog, tmp_path: Path) -> None:
    from jupyter_starverse.catalog._perms import translate_permissions

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    if os.geteuid() == 0:
        os.chown(theirs, 54321, 54321)  # another user's folder: the group is what would help

    @translate_permissions("add a dataset to the store")
    def boom(where: Path) -> None:
        raise PermissionError(13, "Permission denied", str(where))

    with pytest.raises(PermissionDeniedError) as err:
        boom(theirs if os.geteuid() == 0 else Path("/root"))
    assert "STARVERSE_SHARED_GROUP" in str(err.value.hint) and "docs/sharing.md" in str(err.value.hint)
    with pytest.raises(PermissionDeniedError) as err:
        boom(tmp_path)  # one's own read-only folder: no group would help (issue 27)
    assert "chmod u+w" in str(err.value.hint) and "STARVERSE_SHARED_GROUP" not in str(err.value.hint)


def test_experiment_json_is_private_or_the_groups_whatever_the_umask(tmp_path: Path) -> None:
    """Run folders are 0700/0600 by default, 2770/0640 under a setgid (group-shared) root."""
    for shared in (False, True):
        root = tmp_path / ("group" if shared else "private")
        root.mkdir()
        if shared:
            root.chmod(0o2775)
        run = RunPaths(root / "exp" / "runs" / "job-1")
        old = os.umask(0o002)
        try:
            run.make()
            write_json(run.spec, {"name": "x"})
            write_json(run.status, {"state": "running"})
        finally:
            os.umask(old)
        folder, files = (0o2770, 0o640) if shared else (0o700, 0o600)
        assert stat.S_IMODE(run.root.stat().st_mode) == folder
        for f in (run.spec, run.status):
            assert stat.S_IMODE(f.stat().st_mode) == files, (f, oct(f.stat().st_mode))
