"""Two members of one group build job environments on one shared store (issue 28's leases, issue 34's sticky folders).

The build lease lives in the builder's own ``.leases/u<uid>/`` (as the catalog's): a lease another
member plants in the sticky, group-writable ``.leases`` cannot stop a build. Two users building
the same hash at once both build; the one atomic rename picks the winner, the loser removes its
copy and uses the winner's environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests._users import ALICE, BOB, TEAM, as_root, as_user

LOCK = 'Lock("file", ("svpkg-two==1",), "3.11")'

BUILD = """
import json, os, pathlib, time
from jupyter_starverse.envs import _build
from jupyter_starverse.envs._capture import Lock
from jupyter_starverse.envs._layout import EnvPaths

ready = pathlib.Path({ready!r})
paths = EnvPaths({store!r})
lock = {lock}

def fake_pip(lock, site, cache, *, python_version=None):
    site.mkdir(parents=True)
    (site / "svpkg_two.py").write_text("BY = %d" % os.getuid())
    (ready / str(os.getuid())).touch()
    while len(list(ready.iterdir())) < {builders}:  # both are building now, each under its own lease
        time.sleep(0.02)
    if os.getuid() == {loser}:  # the other one renames first
        while not paths.record(lock.hash).is_file():
            time.sleep(0.02)

_build._pip = fake_pip
r = _build.build_env(lock, paths, ttl=5, wait_s=60)
print(json.dumps({{"built": r.built, "id": r.record.id}}))
"""

PLANT = """
from jupyter_starverse.catalog._lease import Lease
from jupyter_starverse.envs._capture import Lock
from jupyter_starverse.envs._layout import EnvPaths
lock = {lock}
paths = EnvPaths({store!r})
lease = Lease(paths.root / ".leases" / f"env.{{lock.hash}}.lease", ttl=0.5)  # where builds took it before
assert lease.try_acquire()
import os; os._exit(0)  # and never give it back: a stale lease of bob's in the sticky folder
"""


def _store(base: Path) -> Path:
    store = base / "store"
    for folder in (store, store / ".leases", store / "envs"):
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, 0, TEAM)
        folder.chmod(0o3775)  # group-writable, setgid, sticky: as docs/sharing.md sets a shared store
    return store


def _run(uid: int, code: str, base: Path) -> dict:
    out = as_user(uid, [TEAM], code, {"STARVERSE_STORE": str(base / "store")}, base, umask=0o002)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def _leftovers(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "envs").iterdir() if p.name.startswith("."))


@as_root
def test_a_lease_another_member_planted_does_not_stop_a_build(shared_tmp: Path) -> None:
    store = _store(shared_tmp)
    assert _run(BOB, PLANT.format(lock=LOCK, store=str(store)), shared_tmp) == {}
    planted = list((store / ".leases").glob("env.*.lease"))
    assert planted and planted[0].stat().st_uid == BOB
    ready = shared_tmp / "ready"
    ready.mkdir(mode=0o777)
    ready.chmod(0o777)
    got = _run(ALICE, BUILD.format(ready=str(ready), store=str(store), lock=LOCK, builders=1, loser=-1), shared_tmp)
    assert got["built"] is True
    assert (store / ".leases" / f"u{ALICE}").stat().st_uid == ALICE


@as_root
def test_two_users_building_one_hash_at_once_both_succeed_and_the_loser_cleans_up(shared_tmp: Path) -> None:
    import concurrent.futures

    store = _store(shared_tmp)
    ready = shared_tmp / "ready"
    ready.mkdir()
    ready.chmod(0o777)
    code = BUILD.format(ready=str(ready), store=str(store), lock=LOCK, builders=2, loser=BOB)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        alice, bob = pool.map(lambda uid: _run(uid, code, shared_tmp), (ALICE, BOB))
    assert alice["built"] is True and bob["built"] is False, (alice, bob)
    assert alice["id"] == bob["id"]
    envs = [p for p in (store / "envs").iterdir() if not p.name.startswith(".")]
    assert len(envs) == 1 and envs[0].stat().st_uid == ALICE
    site = envs[0] / "site" / "svpkg_two.py"
    assert site.read_text() == f"BY = {ALICE}"  # bob uses alice's environment
    assert _leftovers(store) == []  # bob's copy is gone
    assert sorted(p.name for p in (store / ".leases").iterdir()) == [f"u{ALICE}", f"u{BOB}"]


@as_root
def test_in_group_mode_the_envs_folders_are_the_groups(tmp_path: Path) -> None:
    """The first builder used to make envs/ 0755: no other member could build after it."""
    import stat as _stat

    from jupyter_starverse._settings import Settings
    from jupyter_starverse.envs import JobEnvs

    settings = Settings.from_env(
        {
            "STARVERSE_HOME": str(tmp_path / "h"),
            "STARVERSE_STORE": str(tmp_path / "store"),
            "STARVERSE_EXPERIMENTS": str(tmp_path / "e"),
            "STARVERSE_SHARED_GROUP": str(TEAM),
        }
    )
    paths = JobEnvs(settings).paths
    for folder in (paths.envs, paths.envs / "wheels", tmp_path / "store" / "workdirs"):
        st = folder.stat()
        assert st.st_gid == TEAM and _stat.S_IMODE(st.st_mode) == 0o3775, (folder, oct(st.st_mode))
