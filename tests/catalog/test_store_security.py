"""A shared store is untrusted: reserved names, corrupt records, racing adds, symlinks, dead pulls."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse.catalog import Catalog, DatasetRef, Entry, StoreListing, parse_ref
from jupyter_starverse.errors import BadInputError, ConflictError, InvalidNameError, StoreError
from tests.catalog.conftest import start_workers, worker_env
from tests.catalog.servers import Blob, FileServer


def _folder(root: Path, name: str = "a.txt", data: bytes = b"alpha") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)
    return root


# -- 1. reserved names, corrupt or foreign records ------------------------------------------


@pytest.mark.parametrize("version", ["1.manifest", "1.MANIFEST", "v2.manifest"])
def test_a_version_cannot_take_the_name_of_a_manifest(catalog: Catalog, tmp_path: Path, version: str) -> None:
    src = _folder(tmp_path / "src")
    catalog.add_dataset("toy", str(src))
    catalog.pull("toy")
    with pytest.raises(BadInputError) as err:
        catalog.add_dataset("toy", str(src), version=version)
    assert ".manifest" in str(err.value) and err.value.hint
    with pytest.raises(InvalidNameError):
        parse_ref(f"toy@{version}")
    with pytest.raises(InvalidNameError):
        parse_ref(f"hf:org/repo@{version}")
    with pytest.raises(InvalidNameError):
        catalog.add_dataset(f"toy{version}", str(src))
    assert [(s.ref, s.state) for s in catalog.ls()] == [("toy@1", "cached")]


def test_a_corrupt_or_foreign_manifest_breaks_only_its_entry(
    catalog: Catalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = _folder(tmp_path / "src")
    for name in ("good", "bad", "alien", "junk"):
        catalog.add_dataset(name, str(src))
        catalog.pull(name)
    layout = catalog.layout
    # what the old code let `add --version 1.manifest` write: an entry record where the manifest is
    layout.manifest_path(DatasetRef("bad", "1")).write_text(
        json.dumps(Entry("dataset", "bad", "1", "x", "bad@1").to_json())
    )
    good = json.loads(layout.manifest_path(DatasetRef("good", "1")).read_text())
    layout.manifest_path(DatasetRef("alien", "1")).write_text(json.dumps(good))  # another entry's manifest
    layout.manifest_path(DatasetRef("junk", "1")).write_text('["not", "a", "manifest"]')
    with caplog.at_level(logging.WARNING):
        rows = {s.ref: s.state for s in catalog.ls()}
    assert rows["good@1"] == "cached"
    assert rows["bad@1"] != "cached" and rows["alien@1"] != "cached" and rows["junk@1"] != "cached"
    assert "manifest" in caplog.text
    assert catalog.status("bad").state == "partial"
    assert catalog.pull("bad").state == "cached"  # a pull repairs it
    assert catalog.rm("alien") == ["alien@1"]
    assert catalog.evict(max_bytes=0)


def test_a_corrupt_entry_record_is_skipped_by_ls_and_removable(
    catalog: Catalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = _folder(tmp_path / "src")
    catalog.add_dataset("good", str(src))
    catalog.add_dataset("bad", str(src))
    catalog.add_dataset("list", str(src))
    catalog.layout.record_path(DatasetRef("bad", "1")).write_text('{"kind": "dataset"}')
    catalog.layout.record_path(DatasetRef("list", "1")).write_text("[1, 2]")
    models = catalog.root / "catalog" / "models" / "models--org--repo"
    models.mkdir(parents=True)
    (models / "main.json").write_text('{"no": "name"}')
    with caplog.at_level(logging.WARNING):
        assert [s.ref for s in catalog.ls()] == ["good@1"]
    assert "bad" in caplog.text
    assert str(StoreListing(tuple(catalog.ls())))
    with pytest.raises(StoreError) as err:
        catalog.status("bad@1")
    assert err.value.hint and "rm" in err.value.hint
    with pytest.raises(StoreError):
        catalog.status("list")
    assert catalog.rm("bad") == ["bad@1"]
    assert catalog.rm("list") == ["list@1"]


# -- 2. concurrent adds ------------------------------------------------------------------------


def test_racing_adds_of_one_name_have_exactly_one_winner(catalog: Catalog, tmp_path: Path) -> None:
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "b")
    for i in range(20):
        name = f"race{i}"
        barrier = threading.Barrier(2)
        results: dict[str, object] = {}

        def add(source: Path, name: str = name, barrier: threading.Barrier = barrier) -> None:
            mine = Catalog(catalog.settings)  # as if another process
            barrier.wait()
            try:
                results[str(source)] = mine.add_dataset(name, str(source))
            except ConflictError as e:
                results[str(source)] = e

        threads = [threading.Thread(target=add, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [s for s, r in results.items() if isinstance(r, Entry)]
        losers = [r for r in results.values() if isinstance(r, ConflictError)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert str(a) in str(losers[0]) and str(b) in str(losers[0]) and losers[0].hint
        assert catalog.entry(name).source == winners[0]


def test_racing_adds_of_the_same_source_both_succeed(catalog: Catalog, tmp_path: Path) -> None:
    a = _folder(tmp_path / "a")
    for i in range(10):
        barrier = threading.Barrier(2)
        results: list[Entry] = []

        def add(name: str = f"same{i}", barrier: threading.Barrier = barrier) -> None:
            mine = Catalog(catalog.settings)
            barrier.wait()
            results.append(mine.add_dataset(name, str(a)))

        threads = [threading.Thread(target=add) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 2 and results[0] == results[1]


async def test_rest_add_conflict_is_409(jp_fetch: Any, jp_root_dir: Path) -> None:
    a, b = _folder(jp_root_dir / "a"), _folder(jp_root_dir / "b")
    body = {"name": "toy", "source": str(a)}
    assert (await jp_fetch("jupyter-starverse", "store", method="POST", body=json.dumps(body))).code == 201
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "store", method="POST", body=json.dumps({**body, "source": str(b)}))
    assert err.value.code == 409
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "store", method="POST", body=json.dumps({**body, "version": "1.manifest"}))
    assert err.value.code == 400


# -- 3. symlinks in a folder source ------------------------------------------------------------


def test_a_symlink_to_a_file_inside_the_source_pulls(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "src", "real.bin", os.urandom(10_000))
    (src / "sub").mkdir()
    os.utime(src / "real.bin", (1_000_000, 1_000_000))  # the link and its target differ in mtime
    (src / "link.bin").symlink_to("real.bin")
    (src / "sub" / "up.bin").symlink_to("../real.bin")
    catalog.add_dataset("links", str(src))
    status = catalog.pull("links")
    assert status.state == "cached" and status.files == 3
    root = catalog.mount("links")
    for rel in ("link.bin", "sub/up.bin"):
        assert not (root / rel).is_symlink()
        assert (root / rel).read_bytes() == (src / "real.bin").read_bytes()


def test_a_symlink_to_a_folder_inside_the_source_pulls(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "src" / "real", "x.txt", b"x")
    src = src.parent
    (src / "alias").symlink_to("real", target_is_directory=True)
    catalog.add_dataset("dirlink", str(src))
    assert catalog.pull("dirlink").state == "cached"
    assert (catalog.mount("dirlink") / "alias" / "x.txt").read_bytes() == b"x"


def test_a_symlink_leaving_the_source_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    secret = _folder(tmp_path / "home", "id_rsa", b"secret")
    src = _folder(tmp_path / "src")
    (src / "key").symlink_to(secret / "id_rsa")
    catalog.add_dataset("leak", str(src))
    with pytest.raises(BadInputError) as err:
        catalog.pull("leak")
    assert "key" in str(err.value) and "outside" in str(err.value) and err.value.hint
    assert not any(p.name == "key" for p in catalog.layout.data_dir(DatasetRef("leak", "1")).rglob("*"))


def test_a_dangling_symlink_is_a_clear_error(catalog: Catalog, tmp_path: Path) -> None:
    src = _folder(tmp_path / "src")
    (src / "gone.bin").symlink_to(src / "nothing-here")
    catalog.add_dataset("dangling", str(src))
    with pytest.raises(BadInputError) as err:
        catalog.pull("dangling")
    assert "gone.bin" in str(err.value) and err.value.hint


# -- 4. a killed pull is not "downloading" ---------------------------------------------------


def test_status_right_after_kill_9_is_not_downloading(
    catalog: Catalog, files: FileServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    files.add("ds/a.bin", Blob(size=4_000_000, seed=90))
    catalog.add_dataset("dead", files.url + "/ds/")
    files.throttle = 500_000
    (proc,) = start_workers(1, ["pull", "dead"], worker_env(store_env), tmp_path / "go")
    progress = catalog.layout.progress_path(catalog.layout.key(DatasetRef("dead", "1")))
    deadline = time.monotonic() + 60
    while catalog.status("dead").pulling is None:
        assert time.monotonic() < deadline, "the pull never started"
        time.sleep(0.05)
    assert catalog.status("dead").pulling.phase == "downloading"  # type: ignore[union-attr]
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert json.loads(progress.read_text())["phase"] == "downloading"  # what the dead owner left
    status = catalog.status("dead")
    assert status.pulling is None and status.state in ("partial", "missing")
    assert "pulling" not in str(StoreListing(tuple(catalog.ls())))
    assert [(p.ref, p.phase) for p in catalog.pulls()] == [("dead@1", "failed")]
    assert "interrupted" in str(catalog.pulls()[0].error)
