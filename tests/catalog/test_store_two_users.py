"""Issue 34 on the store, with real uids: swapped datasets, symlinks that made alice delete her
own folders, names without owners, and umasks (docs/sharing.md, "Owners").

ALICE and BOB are in TEAM, CAROL is not. Every write that must fail is tried as a plain uid
(``setpriv``); what a weaker file system would allow is simulated as root (the test process),
and the removals that must never leave the store are tried as root too (the danger case).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.errors import PermissionDeniedError
from tests._users import ALICE, BOB, CAROL, TEAM, as_root, as_user, cli_as, shared_env


def _source(base: Path, name: str = "src", text: bytes = b"alice's text") -> Path:
    src = base / name
    src.mkdir()
    (src / "a.txt").write_bytes(text)
    src.chmod(0o755)
    (src / "a.txt").chmod(0o644)
    return src


def _home(base: Path, uid: int, name: str) -> Path:
    home = base / name
    home.mkdir()
    os.chown(home, uid, uid)
    home.chmod(0o755)
    return home


def _group(base: Path) -> dict[str, str]:
    return shared_env(base, STARVERSE_SHARED_GROUP=str(TEAM))


def _ok(proc: object) -> None:
    assert proc.returncode == 0, (proc.stdout, proc.stderr)  # type: ignore[attr-defined]


def _chown_tree(top: Path, uid: int) -> None:
    for dirpath, dirs, files in os.walk(top):
        for n in (*dirs, *files):
            os.lchown(Path(dirpath) / n, uid, TEAM)
    os.lchown(top, uid, TEAM)


def _root_catalog(env: dict[str, str]) -> Catalog:
    return Catalog(Settings.from_env(env))


# -- finding 2: a published dataset swapped silently ----------------------------------------------


@as_root
def test_bob_cannot_swap_alices_published_dataset(shared_tmp: Path) -> None:
    env = _group(shared_tmp)
    src = _source(shared_tmp)
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "adata", str(src)))
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "adata"))
    store = shared_tmp / "store"
    code = f"""
        import os
        tries = {{
            "rename version": lambda: os.rename("{store}/data/adata/1", "{store}/data/adata/1.old"),
            "rename entry": lambda: os.rename("{store}/data/adata", "{store}/data/adata.old"),
            "rename record folder": lambda: os.rename("{store}/catalog/datasets/adata", "{store}/catalog/x"),
            "new version folder": lambda: os.mkdir("{store}/data/adata/2"),
            "new manifest": lambda: open("{store}/catalog/datasets/adata/2.manifest.json", "w"),
            "remove usage": lambda: os.unlink("{store}/.usage/ds.adata@1"),
        }}
        for what, do in tries.items():
            try:
                do()
                print(what, "ALLOWED")
            except PermissionError:
                print(what, "refused")
    """
    out = as_user(BOB, [TEAM], code, env, shared_tmp)
    _ok(out)
    assert "ALLOWED" not in out.stdout, out.stdout
    assert out.stdout.count("refused") == 6
    mounted = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "mount", "adata")
    _ok(mounted)
    assert (Path(mounted.stdout.strip()) / "a.txt").read_bytes() == b"alice's text"


@as_root
def test_files_and_manifest_swapped_as_root_fail_verify_and_mount(shared_tmp: Path) -> None:
    """A weaker file system (or root) swaps the folder, files and manifest for BOB's, hashes matching."""
    env = _group(shared_tmp)
    src = _source(shared_tmp)
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "adata", str(src)))
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "adata"))
    ok = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "verify", "adata")
    _ok(ok)
    store = shared_tmp / "store"
    data = store / "data" / "adata" / "1"
    manifest_path = store / "catalog" / "datasets" / "adata" / "1.manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["owner"]["uid"] == ALICE

    data.rename(data.with_name(".gone"))
    data.mkdir()
    bobs = b"bob's text"
    (data / "a.txt").write_bytes(bobs)
    _chown_tree(data, BOB)
    forged = {**manifest, "files": [{"path": "a.txt", "size": len(bobs), "sha256": hashlib.sha256(bobs).hexdigest()}]}
    manifest_path.unlink()
    manifest_path.write_text(json.dumps(forged))  # it even claims alice as the owner
    os.chown(manifest_path, BOB, TEAM)

    verify = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "verify", "adata", "--json")
    assert verify.returncode != 0 and "Traceback" not in verify.stderr
    report = json.loads(verify.stdout)
    assert not report["ok"] and report["owner_changed"] and report["tampered"] == []
    assert "owner changed" in verify.stderr
    mount = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "mount", "adata")
    assert mount.returncode != 0 and "owner changed" in mount.stderr and bobs.decode() not in mount.stdout
    assert "Traceback" not in mount.stderr


@as_root
def test_files_alone_swapped_for_bobs_fail_verify_and_then_mount(shared_tmp: Path) -> None:
    env = _group(shared_tmp)
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "adata", str(_source(shared_tmp))))
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "adata"))
    target = shared_tmp / "store" / "data" / "adata" / "1" / "a.txt"
    os.lchown(target, BOB, TEAM)  # same bytes, another owner: only the owner check can tell
    verify = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "verify", "adata")
    assert verify.returncode != 0 and "owner changed" in verify.stdout and "a.txt" in verify.stdout
    status = cli_as(BOB, [TEAM], env, shared_tmp, "store", "status", "adata", "--json")
    assert json.loads(status.stdout)["state"] == "corrupt"  # alice's finding holds for everyone
    mount = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "mount", "adata")
    assert mount.returncode != 0 and "corrupt" in mount.stderr


@as_root
def test_another_users_failed_verify_does_not_mark_the_entry(shared_tmp: Path) -> None:
    env = _group(shared_tmp)
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "adata", str(_source(shared_tmp))))
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "adata"))
    marker = shared_tmp / "store" / ".verify" / "ds.adata@1.json"
    marker.write_text(json.dumps({"ref": "adata@1", "path": "x", "checked": 1, "tampered": ["a.txt"]}))
    os.chown(marker, BOB, TEAM)  # bob's "finding" planted for alice's entry
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "mount", "adata"))


# -- finding 3: symlinks made alice (and root) delete folders outside the store ------------------


def _bob_entry(base: Path, env: dict[str, str], name: str) -> None:
    _ok(cli_as(BOB, [TEAM], env, base, "store", "add", name, str(base / "bobsrc")))
    _ok(cli_as(BOB, [TEAM], env, base, "store", "pull", name))


def _plant(base: Path, env: dict[str, str], code: str) -> None:
    _ok(as_user(BOB, [TEAM], code, env, base))


@pytest.fixture
def links(shared_tmp: Path) -> dict[str, Path]:
    """Bob's entries turned into links to alice's folders; alice's own entry with a linked holds folder."""
    env = _group(shared_tmp)
    alice_home = _home(shared_tmp, ALICE, "alice")
    for d in ("decoy", "decoy2", "jsons"):
        (alice_home / d).mkdir()
        (alice_home / d / "keep.json").write_text("{}")
        _chown_tree(alice_home / d, ALICE)
    (alice_home / "stamp").write_text("x")
    os.utime(alice_home / "stamp", (1_000_000, 1_000_000))
    _chown_tree(alice_home / "stamp", ALICE)
    (alice_home / "record.json").write_text('{"private": true}')
    _chown_tree(alice_home / "record.json", ALICE)
    _source(shared_tmp, "bobsrc", b"bob")
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "aentry", str(_source(shared_tmp))))
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "aentry"))
    for name in ("bobentry", "bobentry2", "bobentry3"):
        _bob_entry(shared_tmp, env, name)
    store = shared_tmp / "store"
    _plant(
        shared_tmp,
        env,
        f"""
        import json, os, shutil, time
        s = "{store}"
        def gone(p):
            for d, dirs, _f in os.walk(p):
                os.chmod(d, 0o755)
            shutil.rmtree(p)
        # data/NAME -> alice's home, with a record for version "decoy"
        gone(s + "/data/bobentry")
        os.symlink("{alice_home}", s + "/data/bobentry")
        rec = json.load(open(s + "/catalog/datasets/bobentry/1.json"))
        rec.update(version="decoy", ref="bobentry@decoy")
        json.dump(rec, open(s + "/catalog/datasets/bobentry/decoy.json", "w"))
        json.dump({{"ref": "bobentry@decoy", "completed_at": time.time(), "files": []}},
                  open(s + "/catalog/datasets/bobentry/decoy.manifest.json", "w"))
        # data/NAME/VERSION -> elsewhere, and a backdated usage stamp that is a link
        gone(s + "/data/bobentry2/1")
        os.symlink("{alice_home}/decoy2", s + "/data/bobentry2/1")
        os.unlink(s + "/.usage/ds.bobentry2@1")
        os.symlink("{alice_home}/stamp", s + "/.usage/ds.bobentry2@1")
        os.utime(s + "/.usage/ds.bobentry2@1", (1, 1), follow_symlinks=False)
        # a catalog record that is a link
        os.unlink(s + "/catalog/datasets/bobentry3/1.json")
        os.symlink("{alice_home}/record.json", s + "/catalog/datasets/bobentry3/1.json")
        # the holds folder of alice's entry, made first by bob, as a link to alice's folder
        os.symlink("{alice_home}/jsons", s + "/.holds/ds.aentry@1")
        """,
    )
    return {"home": alice_home, "store": store}


def _intact(home: Path) -> None:
    for d in ("decoy", "decoy2", "jsons"):
        assert (home / d / "keep.json").exists(), d
    assert (home / "record.json").exists()
    assert os.stat(home / "stamp").st_mtime == 1_000_000


@as_root
def test_alice_rm_and_evict_never_delete_outside_the_store(shared_tmp: Path, links: dict[str, Path]) -> None:
    env = _group(shared_tmp)
    home = links["home"]
    rm = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "rm", "bobentry@decoy")
    assert rm.returncode == 6 and "belongs to" in rm.stderr and "Traceback" not in rm.stderr
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "rm", "bobentry3").returncode == 6
    status = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "status", "bobentry3")
    assert status.returncode != 0 and "private" not in status.stdout + status.stderr
    ls = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "ls", "--json")
    _ok(ls)
    evict = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "evict", "--max-bytes", "1")
    assert evict.returncode != 0 and "bobentry2" in evict.stderr and "Traceback" not in evict.stderr
    _intact(home)
    assert not (links["store"] / "data" / "aentry" / "1").exists()  # her own entry was evicted
    forced = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "rm", "--force", "aentry")  # linked holds folder
    _ok(forced)
    _intact(home)


@as_root
def test_root_rm_and_evict_never_delete_outside_the_store(shared_tmp: Path, links: dict[str, Path]) -> None:
    catalog = _root_catalog(_group(shared_tmp))
    with pytest.raises(PermissionDeniedError, match="link"):
        catalog.rm("bobentry@decoy")
    with pytest.raises(PermissionDeniedError):
        catalog.rm("bobentry")
    with pytest.raises(PermissionDeniedError):
        catalog.evict(max_bytes=0)
    assert catalog.rm("bobentry3") == ["bobentry3@1"]  # the link goes, never its target
    assert catalog.rm("aentry", force=True) == ["aentry@1"]
    assert not os.path.lexists(links["store"] / "catalog" / "datasets" / "bobentry3" / "1.json")
    _intact(links["home"])


# -- finding 4: names have owners -----------------------------------------------------------------


@as_root
def test_a_name_belongs_to_its_creator(shared_tmp: Path) -> None:
    env = _group(shared_tmp)
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "aclean", str(_source(shared_tmp))))
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "aclean"))
    bobsrc = _source(shared_tmp, "bobsrc", b"bob's")
    for extra in (["--version", "2"], []):
        add = cli_as(BOB, [TEAM], env, shared_tmp, "store", "add", "aclean", str(bobsrc), *extra)
        assert add.returncode == 6, add.stderr
        assert "pick another name" in add.stderr and "Traceback" not in add.stderr
    rm = cli_as(BOB, [TEAM], env, shared_tmp, "store", "rm", "aclean")
    assert rm.returncode == 6 and "belongs to" in rm.stderr
    store = shared_tmp / "store"
    assert (store / "catalog" / "datasets" / "aclean" / "1.manifest.json").exists()

    # An older store left the folder group-writable: bob's later version does not change the name.
    (store / "catalog" / "datasets" / "aclean").chmod(0o2775)
    record = json.loads((store / "catalog" / "datasets" / "aclean" / "1.json").read_text())
    record.update(version="2", ref="aclean@2", source=str(bobsrc), added_at=time.time() + 60)
    code = f"""
        import json
        json.dump({record!r}, open("{store}/catalog/datasets/aclean/2.json", "w"))
    """
    _ok(as_user(BOB, [TEAM], code, env, shared_tmp))
    mount = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "mount", "aclean")
    _ok(mount)
    assert mount.stdout.strip() == str(store / "data" / "aclean" / "1")

    ls = cli_as(BOB, [TEAM], env, shared_tmp, "store", "ls", "--json")
    owners = {e["ref"]: e["owner"]["uid"] for e in json.loads(ls.stdout)}
    assert owners["aclean@1"] == ALICE and owners["aclean@2"] == BOB
    table = cli_as(BOB, [TEAM], env, shared_tmp, "store", "ls")
    assert table.stdout.splitlines()[0].split()[:3] == ["REF", "KIND", "OWNER"]
    assert f"uid {ALICE}" in table.stdout
    status = cli_as(BOB, [TEAM], env, shared_tmp, "store", "status", "aclean@1", "--json")
    assert json.loads(status.stdout)["owner"] == {"uid": ALICE, "name": f"uid {ALICE}"}


# -- finding 5: umasks, unreadable records, group mode keeps others out ---------------------------


@as_root
@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_modes_whatever_the_umask_in_group_mode(shared_tmp: Path, umask: int) -> None:
    env = _group(shared_tmp)
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "toy", str(_source(shared_tmp)), umask=umask))
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "toy", umask=umask))
    store = shared_tmp / "store"
    modes = {
        "catalog/datasets": 0o3775,
        "data": 0o3775,
        ".usage": 0o3775,
        ".holds": 0o3775,
        "catalog/datasets/toy": 0o2750,
        "data/toy": 0o2750,
        "catalog/datasets/toy/1.json": 0o640,
        "catalog/datasets/toy/1.manifest.json": 0o640,
        ".usage/ds.toy@1": 0o660,
        "data/toy/1/a.txt": 0o444,
    }
    assert {k: oct(stat.S_IMODE((store / k).stat().st_mode)) for k in modes} == {k: oct(v) for k, v in modes.items()}
    mounted = cli_as(BOB, [TEAM], env, shared_tmp, "store", "mount", "toy", umask=umask)
    _ok(mounted)
    assert (Path(mounted.stdout.strip()) / "a.txt").exists()
    code = f"""
        try:
            print(open("{store}/data/toy/1/a.txt").read())
        except PermissionError:
            print("refused")
    """
    assert as_user(BOB, [TEAM], code, env, shared_tmp).stdout.strip() == "alice's text"
    assert as_user(CAROL, [], code, env, shared_tmp).stdout.strip() == "refused"
    carol = cli_as(CAROL, [], env, shared_tmp, "store", "status", "toy")
    assert carol.returncode == 6 and "corrupt" not in carol.stderr and "STARVERSE_SHARED_GROUP" in carol.stderr


@as_root
@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_without_group_mode_records_are_public_whatever_the_umask(shared_tmp: Path, umask: int) -> None:
    env = shared_env(shared_tmp)
    _ok(cli_as(ALICE, [], env, shared_tmp, "store", "add", "toy", str(_source(shared_tmp)), umask=umask))
    _ok(cli_as(ALICE, [], env, shared_tmp, "store", "pull", "toy", umask=umask))
    store = shared_tmp / "store"
    for rel in ("catalog/datasets/toy/1.json", "catalog/datasets/toy/1.manifest.json", ".usage/ds.toy@1"):
        assert stat.S_IMODE((store / rel).stat().st_mode) == 0o644, rel
    for rel in ("catalog/datasets/toy", "data/toy", ".usage"):
        assert stat.S_IMODE((store / rel).stat().st_mode) == 0o755, rel
    status = cli_as(BOB, [], env, shared_tmp, "store", "status", "toy", "--json")
    _ok(status)
    assert json.loads(status.stdout)["state"] == "cached"


@as_root
def test_an_unreadable_record_is_permission_denied_and_rm_keeps_the_manifest(shared_tmp: Path) -> None:
    """What umask 077 made of records before: 0600. Bob is told about sharing, not "corrupt"."""
    env = shared_env(shared_tmp)
    _ok(cli_as(ALICE, [], env, shared_tmp, "store", "add", "toy", str(_source(shared_tmp))))
    _ok(cli_as(ALICE, [], env, shared_tmp, "store", "pull", "toy"))
    store = shared_tmp / "store"
    record, manifest = (store / "catalog" / "datasets" / "toy" / n for n in ("1.json", "1.manifest.json"))
    record.chmod(0o600)
    manifest.chmod(0o600)
    (store / "catalog" / "datasets" / "toy").chmod(0o777)  # even where bob could delete files
    status = cli_as(BOB, [], env, shared_tmp, "store", "status", "toy")
    assert status.returncode == 6, status.stderr
    assert "corrupt" not in status.stderr and "STARVERSE_SHARED_GROUP" in status.stderr
    rm = cli_as(BOB, [], env, shared_tmp, "store", "rm", "toy")
    assert rm.returncode == 6 and "belongs to" in rm.stderr
    assert manifest.exists() and record.exists()
    assert (store / "data" / "toy" / "1" / "a.txt").exists()


# -- one user: the owner is shown, over REST too ----------------------------------------------------


async def test_rest_listing_shows_the_owner(jp_fetch: object, jp_root_dir: Path) -> None:
    src = jp_root_dir / "src"
    src.mkdir()
    (src / "a.txt").write_text("x")
    body = json.dumps({"name": "toy", "source": str(src)})
    await jp_fetch("jupyter-starverse", "store", method="POST", body=body)  # type: ignore[operator]
    reply = await jp_fetch("jupyter-starverse", "store")  # type: ignore[operator]
    (entry,) = json.loads(reply.body)
    assert entry["owner"]["uid"] == os.geteuid()
    reply = await jp_fetch("jupyter-starverse", "store", "entry", params={"ref": "toy"})  # type: ignore[operator]
    assert json.loads(reply.body)["owner"]["uid"] == os.geteuid()


@as_root
def test_only_the_owner_fills_an_entry(shared_tmp: Path) -> None:
    env = _group(shared_tmp)
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "apend", str(_source(shared_tmp))))
    pull = cli_as(BOB, [TEAM], env, shared_tmp, "store", "pull", "apend")
    assert pull.returncode == 6 and "belongs to" in pull.stderr and "Traceback" not in pull.stderr
    code = """
        from jupyter_starverse._settings import Settings
        from jupyter_starverse.catalog import Catalog
        from jupyter_starverse.errors import PermissionDeniedError
        try:
            Catalog(Settings.from_env()).check_pull("apend")  # what REST asks before starting a thread
        except PermissionDeniedError as e:
            print("denied", e.hint)
    """
    assert as_user(BOB, [TEAM], code, env, shared_tmp).stdout.startswith("denied")
    assert not (shared_tmp / "store" / "data" / "apend").exists()
    _ok(cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "apend"))
    _ok(cli_as(BOB, [TEAM], env, shared_tmp, "store", "pull", "apend"))  # cached: a no-op read for bob


def _plant_leases(shared_tmp: Path, env: dict[str, str], *names: str) -> str:
    leases = shared_tmp / "store" / ".leases"
    plant = f"""
        import json
        from pathlib import Path
        leases = Path("{leases}")
        record = {{"token": "bob", "renewals": 0, "ttl": 3600, "fence": 1,
                   "process": {{"host": "elsewhere", "pid": 1}}}}
        for folder in (leases, leases / "u{ALICE}"):
            for name in {list(names)!r}:
                try:
                    folder.mkdir(exist_ok=True)
                    (folder / name).write_text(json.dumps(record))
                    print("planted", folder / name)
                except OSError as e:
                    print("refused", folder / name, e.errno)
    """
    out = as_user(BOB, [TEAM], plant, env, shared_tmp)
    assert out.returncode == 0, out.stderr
    return out.stdout


@as_root
def test_a_lease_bob_plants_for_alices_entry_does_not_block_her_pull(shared_tmp: Path) -> None:
    """``.leases`` is sticky and group-writable: a lease file bob made there could never be
    replaced by alice. Her leases live in her own folder, which bob cannot write."""
    src = shared_tmp / "src"
    src.mkdir()
    (src / "a.txt").write_text("alpha")
    src.chmod(0o755)
    env = shared_env(shared_tmp, STARVERSE_SHARED_GROUP=str(TEAM), STARVERSE_LOCK_TTL="60")
    for name in ("first", "adata"):
        assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", name, str(src)).returncode == 0
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "first").returncode == 0  # her folder exists
    alices = shared_tmp / "store" / ".leases" / f"u{ALICE}"
    out = _plant_leases(shared_tmp, env, "ds.adata@1.lease")
    assert f"refused {alices / 'ds.adata@1.lease'}" in out  # bob cannot write into her lease folder
    pulled = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "adata", "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["state"] == "cached"
    assert alices.stat().st_uid == ALICE and not alices.stat().st_mode & 0o022  # nobody else writes there


@as_root
def test_a_lease_folder_bob_made_for_alice_is_refused_naming_him(shared_tmp: Path) -> None:
    src = shared_tmp / "src"
    src.mkdir()
    (src / "a.txt").write_text("alpha")
    src.chmod(0o755)
    env = shared_env(shared_tmp, STARVERSE_SHARED_GROUP=str(TEAM), STARVERSE_LOCK_TTL="60")
    assert cli_as(ALICE, [TEAM], env, shared_tmp, "store", "add", "adata", str(src)).returncode == 0
    _plant_leases(shared_tmp, env, "ds.adata@1.lease")  # before alice's first pull: he can make her folder
    pulled = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "adata")
    assert pulled.returncode != 0 and "Traceback" not in pulled.stderr
    assert f"uid {BOB}" in pulled.stderr and "not yours" in pulled.stderr  # a clear error that names him
