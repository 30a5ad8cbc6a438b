"""Datasets from folders, memory:// and http:// sources: pull, verify, mount, lazy reads."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import fsspec
import pytest

from jupyter_starverse.catalog import Catalog, DatasetRef, PullProgress
from jupyter_starverse.errors import (
    BadInputError,
    ConflictError,
    IntegrityError,
    MissingDependencyError,
    NotFoundError,
    StoreError,
)
from tests.catalog.servers import Blob, FileServer


def make_folder(root: Path) -> dict[str, bytes]:
    content = {
        "train/a.bin": os.urandom(300_000),
        "train/b.txt": b"hello\n",
        "README.md": b"# toy\n",
        "zeros": bytes(2_000_000),
    }
    for rel, data in content.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return content


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_folder_dataset_pull_mount_read(catalog: Catalog, tmp_path: Path) -> None:
    src = tmp_path / "src"
    content = make_folder(src)
    entry = catalog.add_dataset("toy", str(src), description="a toy", license="MIT")
    assert entry.ref == "toy@1" and entry.license == "MIT"
    assert catalog.status("toy").state == "missing"
    seen: list[PullProgress] = []
    status = catalog.pull("toy", progress=seen.append)
    assert status.state == "cached" and status.files == 4 and status.size == sum(map(len, content.values()))
    assert seen[0].phase == "downloading" and seen[-1].phase == "done" and seen[-1].percent == 100.0
    path = catalog.mount("toy")
    assert path == catalog.mount("toy@1") == Path(str(status.path))
    assert read_tree(path) == content
    assert all(not os.access(p, os.W_OK) or os.geteuid() == 0 for p in path.rglob("*") if p.is_file())
    assert all(p.stat().st_mode & 0o222 == 0 for p in path.rglob("*") if p.is_file())
    # zeros stay sparse on the store
    assert (path / "zeros").stat().st_blocks * 512 < 2_000_000
    # the record and manifest are on the store: a second catalog (another process) sees them
    again = Catalog(catalog.settings)
    assert again.status("toy").state == "cached" and again.status("toy").last_used is not None


def test_pull_is_idempotent_and_offline_once_cached(catalog: Catalog, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_folder(src)
    catalog.add_dataset("toy", str(src))
    catalog.pull("toy")
    shutil.rmtree(src)  # the source is gone: cached entries still work
    assert catalog.pull("toy").state == "cached"
    assert (catalog.mount("toy") / "README.md").read_bytes() == b"# toy\n"


def test_versions_and_newest_by_default(catalog: Catalog, tmp_path: Path) -> None:
    for v in ("1", "2"):
        (tmp_path / v).mkdir()
        (tmp_path / v / "v.txt").write_text(v)
        catalog.add_dataset("ds", str(tmp_path / v), version=v)
    catalog.pull("ds")
    assert (catalog.mount("ds") / "v.txt").read_text() == "2"
    with pytest.raises(ConflictError, match="not pulled yet"):
        catalog.mount("ds@1")
    assert {s.ref for s in catalog.ls()} == {"ds@1", "ds@2"}
    assert catalog.rm("ds") == ["ds@1", "ds@2"]
    with pytest.raises(NotFoundError):
        catalog.status("ds")


def test_memory_source(catalog: Catalog) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe({"/bucket/ds/x.bin": b"x" * 1000, "/bucket/ds/sub/y.bin": b"y" * 10})
    catalog.add_dataset("mem", "memory://bucket/ds")
    catalog.pull("mem")
    assert read_tree(catalog.mount("mem")) == {"x.bin": b"x" * 1000, "sub/y.bin": b"y" * 10}


def test_http_source_downloads_each_file_once(catalog: Catalog, files: FileServer) -> None:
    a, b = Blob(size=5_000_000, seed=3), Blob(b"small")
    files.add("ds/a.bin", a)
    files.add("ds/sub/b.txt", b)
    catalog.add_dataset("web", files.url + "/ds/")
    status = catalog.pull("web")
    assert status.state == "cached"
    assert files.downloads == {"ds/a.bin": 1, "ds/sub/b.txt": 1}
    assert files.bytes_sent == a.size + b.size
    path = catalog.mount("web")
    assert hashlib.sha256((path / "a.bin").read_bytes()).hexdigest() == a.sha256()
    catalog.pull("web")
    assert files.downloads == {"ds/a.bin": 1, "ds/sub/b.txt": 1}


def test_source_that_changes_size_mid_pull_leaves_nothing(catalog: Catalog, files: FileServer) -> None:
    blob = Blob(size=1_000_000, seed=4)
    files.add("ds/a.bin", blob)
    catalog.add_dataset("moving", files.url + "/ds/")
    blob.declared_size = blob.size + 1000  # HEAD and GET announce more than the body holds
    with pytest.raises(IntegrityError, match="changed size") as err:
        catalog.pull("moving")
    assert "pull again" in str(err.value)
    status = catalog.status("moving")
    assert status.state != "cached"
    data_dir = catalog.layout.data_dir(DatasetRef("moving", "1"))
    assert not [p for p in data_dir.rglob("*") if p.is_file()]  # no half file, no part file
    blob.declared_size = None
    assert catalog.pull("moving").state == "cached"


def test_bad_sources(catalog: Catalog, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="does not exist") as err:
        catalog.add_dataset("nope", str(tmp_path / "missing"))
    assert err.value.hint
    with pytest.raises(BadInputError, match="unknown protocol"):
        catalog.add_dataset("nope", "nosuchproto://x/y")
    with pytest.raises(MissingDependencyError) as dep:
        catalog.add_dataset("nope", "s3://bucket/prefix")
    assert "pip install" in str(dep.value)
    with pytest.raises(NotFoundError):
        catalog.pull("unknown")
    with pytest.raises(NotFoundError):
        catalog.mount("unknown")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_text("1")
    catalog.add_dataset("ds", str(tmp_path / "src"))
    (tmp_path / "other").mkdir()
    with pytest.raises(ConflictError, match="already exists"):
        catalog.add_dataset("ds", str(tmp_path / "other"))
    assert catalog.ls()[0].entry.source == str(tmp_path / "src")


def test_full_store_is_a_clear_error(catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    make_folder(src)
    catalog.add_dataset("big", str(src))
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    with pytest.raises(StoreError, match="full") as err:
        catalog.pull("big")
    assert "evict" in str(err.value)
    monkeypatch.undo()
    assert catalog.status("big").state == "missing"


def test_lazy_reads_fill_the_shared_cache(catalog: Catalog, files: FileServer) -> None:
    a, b = Blob(size=2_000_000, seed=5), Blob(size=1000, seed=6)
    files.add("obj/a.bin", a)
    files.add("obj/b.bin", b)
    catalog.add_dataset("obj", files.url + "/obj/")
    fs = catalog.fs("obj")
    assert sorted(fs.ls("", detail=False)) == ["a.bin", "b.bin"]
    assert hashlib.sha256(fs.cat("a.bin")).hexdigest() == a.sha256()
    assert catalog.status("obj").state == "partial"
    with fs.open("a.bin") as f:
        assert len(f.read()) == a.size
    assert files.downloads == {"obj/a.bin": 1}
    catalog.pull("obj")  # reuses the cached file
    assert files.downloads == {"obj/a.bin": 1, "obj/b.bin": 1}
    with pytest.raises(BadInputError, match="read-only"):
        fs.open("a.bin", "wb")
    with pytest.raises(NotFoundError):
        fs.cat("c.bin")


def test_evict_least_recently_used_first(catalog: Catalog, tmp_path: Path) -> None:
    for name in ("old", "new"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.bin").write_bytes(os.urandom(100_000))
        catalog.add_dataset(name, str(tmp_path / name))
        catalog.pull(name)
    old_use = catalog.status("old").last_used
    assert old_use is not None
    os.utime(catalog.layout.usage_path("ds.old@1"), (old_use - 100, old_use - 100))
    catalog.mount("new")
    evicted = catalog.evict(max_bytes=150_000)
    assert [s.ref for s in evicted] == ["old@1"]
    assert catalog.status("old").state == "missing" and catalog.status("new").state == "cached"
    assert catalog.evict(max_bytes=10**12) == []
    with pytest.raises(BadInputError):
        catalog.evict(max_bytes=-1)
    # an evicted entry pulls again from its source
    assert catalog.pull("old").state == "cached"


@pytest.mark.parametrize("store", ["s3://bucket/store", "memory://store", "gs://b"])
def test_object_store_url_as_store_is_refused_with_a_hint(tmp_path: Path, store: str) -> None:
    from jupyter_starverse._settings import Settings

    settings = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_STORE": store})
    with pytest.raises(BadInputError, match="local or network-mounted folder") as err:
        Catalog(settings)
    assert "dataset sources" in str(err.value)


def test_file_url_store(tmp_path: Path) -> None:
    from jupyter_starverse._settings import Settings

    settings = Settings.from_env({"STARVERSE_HOME": str(tmp_path), "STARVERSE_STORE": f"file://{tmp_path}/shared"})
    assert Catalog(settings).root == tmp_path / "shared"
