"""Issue 38, finding 3: a published entry is tamper-evident without a verify having run.

Every published version's manifest holds each file's size, sha256, mtime and ctime (and a
dataset's folders'). ``mount`` (and so a job's start), ``status`` and ``ls`` compare one stat
per file with it; ``verify`` hashes, exits non-zero and names the files; ``pull`` repairs.
The tests run as root, which file modes do not stop: exactly the finding's writer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog, DatasetRef
from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import ConflictError
from tests._users import ALICE, BOB, TEAM, as_root, cli_as, shared_env


def _source(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.fixture
def catalog(settings: Settings) -> Catalog:
    """The catalog the CLI (``main``) sees too."""
    return Catalog(settings)


@pytest.fixture
def toy(catalog: Catalog, tmp_path: Path) -> Path:
    """A pulled dataset ``toy`` of three files; its mount folder."""
    src = _source(tmp_path / "src", {"a.txt": b"alpha" * 100, "b.txt": b"beta", "sub/c.txt": b"gamma"})
    catalog.add_dataset("toy", str(src))
    catalog.pull("toy")
    return catalog.mount("toy")


def _overwrite_same_size(path: Path) -> None:
    """What root (or a job) can do to a 0444 file: same bytes count, one byte different."""
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0x01
    with open(path, "r+b") as f:  # root ignores the file's 0444
        f.write(bytes(raw))


def _manifest(catalog: Catalog, name: str) -> Path:
    return catalog.layout.manifest_path(catalog.layout.resolve(DatasetRef(name, None)))


def test_the_manifest_records_size_sha256_mtime_and_ctime(catalog: Catalog, toy: Path) -> None:
    data = json.loads(_manifest(catalog, "toy").read_text())
    by_path = {f["path"]: f for f in data["files"]}
    st = (toy / "a.txt").stat()
    assert by_path["a.txt"]["size"] == st.st_size and by_path["a.txt"]["sha256"]
    assert (by_path["a.txt"]["mtime_ns"], by_path["a.txt"]["ctime_ns"]) == (st.st_mtime_ns, st.st_ctime_ns)
    assert {d["path"] for d in data["folders"]} == {"", "sub"}
    assert catalog.check("toy").ok and catalog.status("toy").state == "cached"


def test_a_write_by_root_is_refused_by_mount_and_shown_by_ls_and_status(catalog: Catalog, toy: Path) -> None:
    _overwrite_same_size(toy / "a.txt")
    with pytest.raises(ConflictError) as err:
        catalog.mount("toy")
    assert "corrupt" in err.value.message and "a.txt" in err.value.message
    assert "store verify toy@1" in err.value.hint and "store pull toy@1" in err.value.hint
    status = catalog.status("toy")
    assert status.state == "corrupt" and "a.txt" in (status.problem or "")
    assert [s.state for s in catalog.ls()] == ["corrupt"]
    assert not (catalog.layout.root / ".verify").exists() or not any((catalog.layout.root / ".verify").iterdir())


def test_putting_the_mtime_back_does_not_hide_a_write(catalog: Catalog, toy: Path) -> None:
    target = toy / "b.txt"
    before = target.stat()
    _overwrite_same_size(target)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # `touch -d` back: the ctime moves on
    assert target.stat().st_mtime_ns == before.st_mtime_ns
    with pytest.raises(ConflictError, match=r"b\.txt"):
        catalog.mount("toy")


def test_a_planted_or_removed_file_changes_its_folder(catalog: Catalog, toy: Path) -> None:
    (toy / "sub" / "planted.sh").write_text("echo hi")  # root writes into the 0555 folder
    with pytest.raises(ConflictError, match="sub/"):
        catalog.mount("toy")
    (toy / "sub" / "planted.sh").unlink()  # gone again, but the folder was changed
    assert catalog.status("toy").state == "corrupt"
    (toy / "b.txt").unlink()
    check = catalog.check("toy")
    assert "b.txt" in check.missing and "./" in check.changed and "missing" in check.named()


def test_many_changed_files_are_named_first_few_and_counted(catalog: Catalog, tmp_path: Path) -> None:
    src = _source(tmp_path / "src", {f"f{i:02d}.txt": b"x" for i in range(12)})
    catalog.add_dataset("many", str(src))
    top = catalog.pull("many").path
    assert top is not None
    for i in range(12):
        _overwrite_same_size(Path(top) / f"f{i:02d}.txt")
    with pytest.raises(ConflictError) as err:
        catalog.mount("many")
    assert "12 paths changed" in err.value.message and "and 7 more" in err.value.message


def test_verify_exits_non_zero_names_the_files_and_pull_repairs(
    catalog: Catalog, toy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _overwrite_same_size(toy / "a.txt")
    assert main(["store", "verify", "toy"]) == 4  # a conflict: scripts see the corruption
    out = capsys.readouterr()
    assert "CORRUPT" in out.out and "tampered: a.txt" in out.out and "store pull toy@1" in out.err
    assert main(["store", "verify", "toy", "--json"]) == 4
    assert json.loads(capsys.readouterr().out)["tampered"] == ["a.txt"]
    assert main(["store", "mount", "toy"]) == 4
    assert "a.txt" in capsys.readouterr().err
    assert main(["store", "ls"]) == 0
    listing = capsys.readouterr().out
    assert "corrupt" in listing and "a.txt" in listing
    assert main(["store", "pull", "toy"]) == 0
    capsys.readouterr()
    assert main(["store", "verify", "toy"]) == 0 and catalog.mount("toy") == toy
    assert (toy / "a.txt").read_bytes() == b"alpha" * 100


def test_pull_alone_repairs_a_changed_entry(catalog: Catalog, toy: Path) -> None:
    """No verify needed first: the owner's pull verifies what the stat check flagged."""
    _overwrite_same_size(toy / "a.txt")
    (toy / "sub" / "c.txt").unlink()
    assert catalog.pull("toy").state == "cached"
    assert (toy / "a.txt").read_bytes() == b"alpha" * 100 and (toy / "sub" / "c.txt").read_bytes() == b"gamma"
    assert catalog.verify("toy").ok and catalog.mount("toy") == toy


def test_a_touch_without_a_change_is_resealed_by_the_owners_verify(catalog: Catalog, toy: Path) -> None:
    os.utime(toy / "a.txt")  # new mtime, same bytes
    with pytest.raises(ConflictError, match=r"a\.txt"):
        catalog.mount("toy")
    report = catalog.verify("toy")
    assert report.ok and report.touched == 1 and report.resealed and "touched" in str(report)
    assert catalog.mount("toy") == toy and catalog.status("toy").state == "cached"


def _as_older_manifest(catalog: Catalog, ref: str) -> None:
    """Rewrite the entry's manifest as an older version wrote it: no folders, no file stamps (sizes only)."""
    path = _manifest(catalog, ref)
    data = json.loads(path.read_text())
    data.pop("folders")
    for f in data["files"]:
        f.pop("mtime_ns"), f.pop("ctime_ns")
    path.write_text(json.dumps(data))


def test_an_older_manifest_is_checked_by_size_only_and_says_so(catalog: Catalog, toy: Path) -> None:
    _as_older_manifest(catalog, "toy")
    status = catalog.status("toy")
    assert status.state == "cached" and "size only" in (status.note or "") and "size only" in str(status)
    _overwrite_same_size(toy / "b.txt")
    assert catalog.mount("toy") == toy  # size only: a same-size write is what only verify sees
    with open(toy / "a.txt", "ab") as f:
        f.write(b"!")  # a size change the size-only check sees
    with pytest.raises(ConflictError, match=r"a\.txt"):
        catalog.mount("toy")
    assert catalog.verify("toy").tampered == ("a.txt", "b.txt")
    catalog.pull("toy")  # repaired; the new manifest carries every stamp
    assert catalog.status("toy").note is None and catalog.check("toy").ok
    assert (toy / "b.txt").read_bytes() == b"beta"


def test_the_owners_verify_adds_stamps_to_an_older_manifest(catalog: Catalog, toy: Path) -> None:
    _as_older_manifest(catalog, "toy")
    report = catalog.verify("toy")
    assert report.ok and report.size_only == 3 and report.resealed
    assert catalog.status("toy").note is None
    _overwrite_same_size(toy / "b.txt")
    with pytest.raises(ConflictError, match=r"b\.txt"):
        catalog.mount("toy")


def test_a_model_blob_written_behind_its_link_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    src = _source(tmp_path / "model", {"config.json": b"{}", "weights.bin": os.urandom(4096)})
    catalog.import_model(src, repo="org/tiny")
    snapshot = catalog.mount("hf:org/tiny")
    blob = (snapshot / "weights.bin").resolve()
    assert blob in [p / blob.name for p in catalog.readonly_paths("hf:org/tiny")]
    _overwrite_same_size(blob)
    with pytest.raises(ConflictError, match=r"weights\.bin"):
        catalog.mount("hf:org/tiny")
    assert catalog.status("hf:org/tiny").state == "corrupt"
    assert catalog.verify("hf:org/tiny").tampered == ("weights.bin",)


async def test_rest_mount_of_a_changed_entry_is_a_409_with_the_files(jp_fetch: Any, tmp_path: Path) -> None:
    catalog = Catalog(Starverse().settings)
    catalog.add_dataset("toy", str(_source(tmp_path / "src", {"a.txt": b"alpha"})))
    top = catalog.pull("toy").path
    assert top is not None
    _overwrite_same_size(Path(top) / "a.txt")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "store", "mount", params={"ref": "toy"})
    assert err.value.code == 409
    reply = json.loads(err.value.response.body)  # type: ignore[union-attr]
    assert "a.txt" in reply["message"] and "store verify" in reply["hint"]
    entry = json.loads((await jp_fetch("jupyter-starverse", "store", "entry", params={"ref": "toy"})).body)
    assert entry["state"] == "corrupt" and "a.txt" in entry["problem"]
    rows = json.loads((await jp_fetch("jupyter-starverse", "store")).body)
    assert [r["state"] for r in rows] == ["corrupt"]


@as_root
def test_root_tampering_with_alices_entry_is_seen_by_alice_and_bob(shared_tmp: Path) -> None:
    """The finding as two users see it: root writes into alice's 0444 file; neither mounts it."""
    env = shared_env(shared_tmp, STARVERSE_SHARED_GROUP=str(TEAM))
    src = _source(shared_tmp / "src", {"a.txt": b"alice's text"})
    for p in (src, src / "a.txt"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    for argv in (("store", "add", "adata", str(src)), ("store", "pull", "adata")):
        proc = cli_as(ALICE, [TEAM], env, shared_tmp, *argv)
        assert proc.returncode == 0, proc.stderr
    target = shared_tmp / "store" / "data" / "adata" / "1" / "a.txt"
    _overwrite_same_size(target)
    for uid in (ALICE, BOB):
        mount = cli_as(uid, [TEAM], env, shared_tmp, "store", "mount", "adata")
        assert mount.returncode == 4 and "a.txt" in mount.stderr and "Traceback" not in mount.stderr
        status = cli_as(uid, [TEAM], env, shared_tmp, "store", "status", "adata", "--json")
        assert json.loads(status.stdout)["state"] == "corrupt"
    bob = cli_as(BOB, [TEAM], env, shared_tmp, "store", "pull", "adata")
    assert bob.returncode == 6 and "cannot repair" in bob.stderr  # only alice (or an admin) repairs it
    assert target.read_bytes() != b"alice's text"
    repair = cli_as(ALICE, [TEAM], env, shared_tmp, "store", "pull", "adata")
    assert repair.returncode == 0, repair.stderr
    assert target.read_bytes() == b"alice's text"
    assert cli_as(BOB, [TEAM], env, shared_tmp, "store", "mount", "adata").returncode == 0
