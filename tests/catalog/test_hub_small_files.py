"""The small files of a Hub repo: one tree listing, one staged batch, synced once (issue 33)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from jupyter_starverse.catalog import Catalog, _hubsmall, parse_ref
from jupyter_starverse.errors import PermissionDeniedError
from tests.catalog.conftest import start_workers, worker_env
from tests.catalog.servers import Blob, HubServer

REPO = "datasets/org/many"


def _files(n: int) -> dict[str, Blob]:
    files = {f"data/d{i // 10}/f{i:03d}.bin": Blob(size=2000 + i, seed=500 + i) for i in range(n)}  # LFS
    files.update({f"meta/{i}.txt": Blob(f"row {i}\n".encode()) for i in range(5)})  # regular git files
    files["meta/copy.txt"] = Blob(b"row 0\n")  # the same bytes as meta/0.txt: one blob
    return files


def test_the_tree_listing_is_paged_and_gives_sizes_and_lfs_hashes(hub: HubServer) -> None:
    from huggingface_hub import HfApi

    files = _files(30)
    hub.add_repo("org/many", files, repo_type="dataset")
    hub.tree_page = 7
    api = HfApi(endpoint=hub.url)
    listed = [f for f in api.list_repo_tree("org/many", repo_type="dataset", recursive=True) if hasattr(f, "lfs")]
    assert hub.tree_pages > 5  # followed the Link header, page by page
    assert {f.path: f.size for f in listed} == {p: b.size for p, b in files.items()}
    lfs = {f.path: f.lfs.sha256 for f in listed if f.lfs is not None}
    assert lfs == {p: b.sha256() for p, b in files.items() if b.size >= 1024}
    top = {f.path for f in api.list_repo_tree("org/many", repo_type="dataset")}
    assert top == {"data", "meta"}  # not recursive: one folder's children
    expanded = list(api.list_repo_tree("org/many", "meta", repo_type="dataset", expand=True))
    assert len(expanded) == 6 and all(f.last_commit is not None for f in expanded)


def test_small_files_are_staged_fetched_once_and_synced_once(
    catalog: Catalog, hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(40)
    commit = hub.add_repo("org/many", files, repo_type="dataset")
    hub.tree_page = 16
    storage = catalog.hf_cache_dir / "datasets--org--many"
    visible: list[int] = []

    def fault(key: str, start: int, end: int) -> None:  # while the files come, none is in the cache yet
        blobs = storage / "blobs"
        visible.append(len(os.listdir(blobs)) if blobs.is_dir() else 0)

    hub.fault = fault  # type: ignore[assignment]
    syncs: list[Path] = []
    real_sync = _hubsmall.sync_filesystem
    monkeypatch.setattr(_hubsmall, "sync_filesystem", lambda p: (syncs.append(p), real_sync(p))[1])
    datasyncs: list[int] = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: datasyncs.append(fd))
    (storage / ".staging" / "000000-crashed").mkdir(parents=True)  # left by a pull killed earlier
    (storage / ".staging" / "000000-crashed" / "junk").write_bytes(b"x")

    status = catalog.pull(f"hf:{REPO}", connections=4)
    assert status.state == "cached" and status.files == len(files)
    assert visible and max(visible) == 0
    assert sum(hub.downloads.values()) == len(files) - 1  # the copy's blob came once
    assert len(syncs) == 2 and not datasyncs  # the bytes once, the names once; no fsync per file
    assert not (storage / ".staging").exists()
    snap = storage / "snapshots" / commit
    for path, blob in files.items():
        assert (snap / path).read_bytes() == blob.read(0, blob.size)
        assert not os.readlink(snap / path).startswith("/")  # relative links, as huggingface_hub writes
    assert catalog.verify(f"hf:{REPO}").ok


def test_a_failed_batch_keeps_what_it_verified_and_the_next_pull_fetches_the_rest(
    catalog: Catalog, hub: HubServer
) -> None:
    files = _files(30)
    hub.add_repo("org/many", files, repo_type="dataset")
    broken = "datasets/org/many/data/d2/f025.bin"
    hub.fault = lambda key, start, end: "403" if key == broken else None
    with pytest.raises(PermissionDeniedError, match="f025"):
        catalog.pull(f"hf:{REPO}", connections=1)  # one connection: the files before it all came
    blobs = catalog.hf_cache_dir / "datasets--org--many" / "blobs"
    kept = len(os.listdir(blobs))
    assert kept >= 20 and not (blobs.parent / ".staging").exists()
    assert catalog.status(f"hf:{REPO}").state == "partial"
    hub.fault = None
    hub.reset_counts()
    assert catalog.pull(f"hf:{REPO}", connections=4).state == "cached"
    assert sum(hub.downloads.values()) == len(files) - 1 - kept
    assert catalog.verify(f"hf:{REPO}").ok


def _blob_ok(blob: Path, files: dict[str, Blob]) -> bool:
    """A blob in the cache is whole and right: its name is its LFS sha256 or its git blob id."""
    data = blob.read_bytes()
    return any(blob.name in (b.sha256(), b.git_sha1()) and data == b.read(0, b.size) for b in files.values())


def test_kill_9_mid_batch_leaves_no_half_written_file_and_the_next_pull_completes(
    catalog: Catalog, hub: HubServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    files = {f"data/f{i:03d}.bin": Blob(size=20_000, seed=900 + i) for i in range(60)}
    commit = hub.add_repo("org/many", files, repo_type="dataset")
    hub.link = 300_000  # all responses together: the batch takes about 4 s
    env = worker_env(store_env, HF_ENDPOINT=hub.url)
    (proc,) = start_workers(1, ["pull", f"hf:{REPO}"], env, tmp_path / "go")
    progress = catalog.layout.progress_path(catalog.layout.key(parse_ref(f"hf:{REPO}")))
    deadline = time.monotonic() + 60
    while not (progress.exists() and json.loads(progress.read_text() or "{}").get("bytes_done", 0) > 0):
        assert time.monotonic() < deadline, "the pull never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert catalog.status(f"hf:{REPO}").state in ("missing", "partial")  # not cached: nothing half-published
    storage = catalog.hf_cache_dir / "datasets--org--many"
    for blob in (storage / "blobs").iterdir():  # whatever is in the cache is whole and verified
        assert _blob_ok(blob, files), blob.name
    assert not (storage / "snapshots" / commit).exists() or not any((storage / "snapshots" / commit).rglob("*.bin"))
    hub.link = None
    assert catalog.pull(f"hf:{REPO}").state == "cached"  # the dead owner's staging folder is discarded, redone
    assert not (storage / ".staging").exists()
    snap = storage / "snapshots" / commit
    assert {p: (snap / p).read_bytes() for p in files} == {p: b.read(0, b.size) for p, b in files.items()}
    assert catalog.verify(f"hf:{REPO}").ok


def test_a_long_batch_commits_as_it_goes(catalog: Catalog, hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {f"data/f{i:03d}.bin": Blob(size=20_000, seed=700 + i) for i in range(40)}
    hub.add_repo("org/many", files, repo_type="dataset")
    monkeypatch.setattr(_hubsmall, "COMMIT_SECONDS", 0.05)
    hub.link = 400_000  # about 2 s for the batch
    blobs = catalog.hf_cache_dir / "datasets--org--many" / "blobs"
    seen: list[int] = []

    def fault(key: str, start: int, end: int) -> None:
        if key.endswith("f039.bin"):  # the last file: committed ones are already in the cache, whole
            kept = list(blobs.iterdir())
            assert all(_blob_ok(b, files) for b in kept)
            seen.append(len(kept))

    hub.fault = fault  # type: ignore[assignment]
    assert catalog.pull(f"hf:{REPO}", connections=1).state == "cached"
    assert seen and seen[0] >= 10  # a pull killed now would keep these
    assert catalog.verify(f"hf:{REPO}").ok


def test_staged_links_move_in_with_one_rename_or_merge_into_an_existing_snapshot(tmp_path: Path) -> None:
    """A fresh snapshot is one rename; an existing one (large files linked first) gets the new links beside its own."""
    _move_tree = _hubsmall._move_tree
    staged = tmp_path / "staged"
    (staged / "data" / "a").mkdir(parents=True)
    (staged / "data" / "a" / "x.bin").symlink_to("../../../../blobs/x")
    (staged / "top.json").symlink_to("../../blobs/t")
    fresh = tmp_path / "snapshots" / "c1"
    (tmp_path / "snapshots").mkdir()
    _move_tree(staged, fresh)
    assert not staged.exists() and os.readlink(fresh / "data" / "a" / "x.bin") == "../../../../blobs/x"

    staged.mkdir()
    (staged / "data" / "b").mkdir(parents=True)
    (staged / "data" / "b" / "y.bin").symlink_to("../../../../blobs/y")
    (staged / "top.json").symlink_to("../../blobs/t2")  # replaces what is at its path, as _link does
    _move_tree(staged, fresh)
    assert not staged.exists()
    assert os.readlink(fresh / "data" / "a" / "x.bin") == "../../../../blobs/x"  # kept
    assert os.readlink(fresh / "data" / "b" / "y.bin") == "../../../../blobs/y"
    assert os.readlink(fresh / "top.json") == "../../blobs/t2"
