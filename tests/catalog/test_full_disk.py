"""A full store disk (ENOSPC) is a StoreError with a hint wherever the store writes: a manifest, a lease, a model.

On a real 4 MiB tmpfs (needs root and mount(8); skipped visibly otherwise), as the dataset pull tests do.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog
from jupyter_starverse.catalog._lease import Lease
from jupyter_starverse.catalog._names import DatasetRef
from jupyter_starverse.errors import StoreError
from tests._tmpfs import fill
from tests.catalog.servers import Blob, HubServer


def _assert_full(err: StoreError) -> None:
    assert "no space left" in err.message and "free" in err.message, err
    assert "starverse store evict --max-bytes" in (err.hint or ""), err


def test_a_lease_on_a_full_disk_is_a_store_error_not_a_raw_oserror_nor_a_wait(small_fs: Path) -> None:
    folder = small_fs / ".leases" / f"u{os.getuid()}"
    folder.mkdir(parents=True)
    fill(small_fs)
    lease = Lease(folder / "x.lease", ttl=5)
    with pytest.raises(StoreError) as err:
        lease.try_acquire()
    _assert_full(err.value)
    assert sorted(p.name for p in folder.iterdir()) == []  # no empty temp file left behind


def test_publishing_a_manifest_on_a_full_disk_is_a_store_error(small_fs: Path, tmp_path: Path) -> None:
    catalog = Catalog(Settings.from_env({"STARVERSE_HOME": str(small_fs / "home"), "STARVERSE_LOCK_TTL": "5"}))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    catalog.add_dataset("tiny", str(src))
    catalog.pull("tiny")
    ref = DatasetRef("tiny", "1")
    manifest = catalog.layout.read_manifest(ref)
    assert manifest is not None
    catalog.layout.unpublish(ref, manifest)
    catalog.layout.manifest_path(ref).unlink(missing_ok=True)
    filler = fill(small_fs)
    with pytest.raises(StoreError) as err:
        catalog.layout.publish(ref, manifest)
    _assert_full(err.value)
    filler.unlink()
    catalog.layout.publish(ref, manifest)  # once space is freed it publishes
    assert catalog.layout.read_manifest(ref) is not None


def test_a_model_pull_that_cannot_fit_is_refused_up_front(
    small_fs: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = Catalog(Settings.from_env({"STARVERSE_HOME": str(small_fs / "home")}))
    hub.add_repo("org/big", {"config.json": Blob(b"{}"), "model.safetensors": Blob(size=6 * 1024 * 1024, seed=9)})
    with pytest.raises(StoreError) as err:
        catalog.pull("hf:org/big")
    text = str(err.value)
    assert "MiB free" in text and "more needed" in text and str(small_fs) in text, text
    blobs = list((small_fs / "home").rglob("blobs/*"))
    assert not [b for b in blobs if b.stat().st_size > 0], blobs  # nothing was downloaded
