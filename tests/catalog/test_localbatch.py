"""A first pull of a local folder is one batch: staged, synced once, renamed into place once."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jupyter_starverse.catalog import Catalog, DatasetRef
from jupyter_starverse.catalog._fetch import LeaseLostError, SourceFile
from jupyter_starverse.catalog._lease import Lease
from jupyter_starverse.catalog._localbatch import copy_batch, staging_dir
from jupyter_starverse.catalog._types import FileRecord


def _source(root: Path, n: int = 300) -> dict[str, bytes]:
    content = {f"part-{i % 3}/f{i:04d}.bin": os.urandom(100 + i) for i in range(n)}
    content["empty"] = b""
    content["sparse.bin"] = bytes(1_000_000) + b"end"  # below the large-file threshold, mostly zeros
    content["big.bin"] = os.urandom(17 * 1024 * 1024)  # large: copy_file_range, block by block
    for rel, data in content.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return content


def test_a_folder_pull_is_one_batch_with_verified_records_and_no_file_leases(catalog: Catalog, tmp_path: Path) -> None:
    content = _source(tmp_path / "src")
    catalog.add_dataset("batch", str(tmp_path / "src"))
    seen: list[tuple[int | None, int | None]] = []
    status = catalog.pull("batch", progress=lambda p: seen.append((p.files_done, p.bytes_done)))
    assert status.state == "cached"
    root = catalog.mount("batch")
    assert {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()} == content
    manifest = catalog.layout.read_manifest(DatasetRef("batch", "1"))
    assert manifest is not None
    assert {f.path: f.sha256 for f in manifest.files} == {k: hashlib.sha256(v).hexdigest() for k, v in content.items()}
    assert all(p.stat().st_mode & 0o222 == 0 for p in root.rglob("*") if p.is_file())  # published read-only
    assert (root / "sparse.bin").stat().st_blocks * 512 < 500_000  # zero blocks stay holes
    entry_lease = catalog.layout.lease_path(catalog.layout.lease_key(DatasetRef("batch", "1")))
    assert [p for p in entry_lease.parent.glob("*.lease") if p != entry_lease] == []  # the entry lease only
    assert not staging_dir(root).exists()
    assert catalog.verify("batch").ok
    assert seen and max(b or 0 for _, b in seen) == sum(len(v) for v in content.values())


def test_a_staging_folder_left_by_a_crash_is_never_trusted(catalog: Catalog, tmp_path: Path) -> None:
    content = _source(tmp_path / "src", n=20)
    catalog.add_dataset("crashed", str(tmp_path / "src"))
    staging = staging_dir(catalog.layout.data_dir(DatasetRef("crashed", "1")))
    (staging / "part-0").mkdir(parents=True)
    (staging / "part-0" / "f0000.bin").write_bytes(b"garbage of a pull killed before its sync")
    (staging / "part-0").chmod(0o555)
    assert catalog.pull("crashed").state == "cached"
    root = catalog.mount("crashed")
    assert (root / "part-0" / "f0000.bin").read_bytes() == content["part-0/f0000.bin"]
    assert not staging.exists() and catalog.verify("crashed").ok


def test_a_lazy_reader_waits_for_a_live_batch_instead_of_copying_the_file_again(
    catalog: Catalog, tmp_path: Path
) -> None:
    content = _source(tmp_path / "src", n=3)
    catalog.add_dataset("busy", str(tmp_path / "src"))
    ref = DatasetRef("busy", "1")
    staging = staging_dir(catalog.layout.data_dir(ref))
    staging.mkdir(parents=True)
    lease = Lease(catalog.layout.lease_path(catalog.layout.lease_key(ref)), ttl=catalog.settings.lock_ttl)
    assert lease.try_acquire()  # a batch pull of this process is staging the files
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(catalog.fs("busy").cat("part-1/f0001.bin")))
    reader.start()
    time.sleep(0.6)
    assert reader.is_alive() and not got  # waiting, not copying
    staging.rmdir()  # the batch ended (here: without publishing anything)
    lease.release()
    reader.join(30)
    assert got == [content["part-1/f0001.bin"]]


def test_rm_removes_a_staging_folder_left_by_a_crash(catalog: Catalog, tmp_path: Path) -> None:
    _source(tmp_path / "src", n=2)
    catalog.add_dataset("gone", str(tmp_path / "src"))
    staging = staging_dir(catalog.layout.data_dir(DatasetRef("gone", "1")))
    (staging / "part-0").mkdir(parents=True)
    (staging / "part-0" / "f0000.bin").write_bytes(b"unsynced")
    staging.chmod(0o555)
    catalog.rm("gone")
    assert not staging.exists()


def test_a_holder_taken_over_mid_batch_stops_and_the_new_holder_publishes(tmp_path: Path) -> None:
    """Issue 34: two processes in one batch (a holder taken over while it still copied) crashed with a
    FileNotFoundError: the new holder removed the staging folder under the old one. Each holder stages
    in its own folder now; the old one ends with a lost lease (it waits for the publication), the new
    one moves a complete batch into place."""
    files = [SourceFile(f"d/f{i:03d}", f"src/f{i:03d}", 10, None) for i in range(60)]
    data_dir = tmp_path / "store" / "data" / "x" / "1"
    started = threading.Event()

    def fetch(slow: bool) -> Callable[[SourceFile, Path], FileRecord]:
        def copy(src: SourceFile, dest: Path) -> FileRecord:
            data = src.rel.encode().ljust(10, b".")
            dest.write_bytes(data)
            started.set()
            if slow:
                time.sleep(0.03)  # the old holder was paused (a stalled node)
            return FileRecord(src.rel, 10, hashlib.sha256(data).hexdigest(), None)

        return copy

    old, new = Lease(tmp_path / "x.lease", ttl=0.4), Lease(tmp_path / "x.lease", ttl=0.4)
    assert old.try_acquire()  # it never renews: taken over after a TTL of the new holder's clock
    outcome: list[BaseException | None] = []

    def old_batch() -> None:
        try:
            copy_batch(files, data_dir, lease=old, copy_small=fetch(slow=True))
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=old_batch)
    thread.start()
    assert started.wait(10)
    deadline = time.monotonic() + 10
    while not new.try_acquire():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    records = copy_batch(files, data_dir, lease=new, copy_small=fetch(slow=False))
    thread.join(30)
    assert len(records) == len(files) and sorted(p.name for p in (data_dir / "d").iterdir()) == [
        f"f{i:03d}" for i in range(60)
    ]
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLostError), outcome
    assert not staging_dir(data_dir).exists()
