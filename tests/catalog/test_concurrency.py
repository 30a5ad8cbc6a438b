"""Many processes at once: one download per file, no torn reads, kill -9 safety."""

from __future__ import annotations

import hashlib
import json
import signal
import time
from pathlib import Path

from jupyter_starverse.catalog import Catalog, DatasetRef, PullProgress
from tests.catalog.conftest import run_workers, start_workers, worker_env
from tests.catalog.servers import Blob, FileServer, HubServer

N = 8


def test_eight_processes_pull_one_model_once(
    catalog: Catalog, hub: HubServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    files = {
        "config.json": Blob(b"{}"),
        "model.safetensors": Blob(size=8_000_000, seed=11),
        "tokenizer.json": Blob(size=50_000, seed=12),
    }
    commit = hub.add_repo("org/shared", files)
    hub.throttle = 8_000_000  # about a second per pull: the others really wait
    answers = run_workers(N, ["pull", "hf:org/shared"], worker_env(store_env, HF_ENDPOINT=hub.url), tmp_path / "go")
    assert {a["state"] for a in answers} == {"cached"}
    assert len({a["path"] for a in answers}) == 1
    assert dict(hub.downloads) == {f"org/shared/{name}": 1 for name in files}
    assert hub.bytes_sent == sum(b.size for b in files.values())
    path = catalog.mount("hf:org/shared")
    assert path.name == commit
    assert hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest() == files["model.safetensors"].sha256()


def test_eight_processes_pull_one_dataset_once(
    catalog: Catalog, files: FileServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    blobs = {f"ds/part-{i}.bin": Blob(size=2_000_000, seed=20 + i) for i in range(3)}
    for path, blob in blobs.items():
        files.add(path, blob)
    catalog.add_dataset("shared", files.url + "/ds/")
    files.throttle = 8_000_000
    answers = run_workers(N, ["pull", "shared"], worker_env(store_env), tmp_path / "go")
    assert {a["state"] for a in answers} == {"cached"}
    assert dict(files.downloads) == {p: 1 for p in blobs}
    assert files.bytes_sent == sum(b.size for b in blobs.values())
    root = catalog.mount("shared")
    for p, blob in blobs.items():
        assert hashlib.sha256((root / p.split("/", 1)[1]).read_bytes()).hexdigest() == blob.sha256()


def test_eight_cold_readers_through_the_object_store_mount(
    catalog: Catalog, files: FileServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    blob = Blob(size=6_000_000, seed=30)
    files.add("bucket/shard-0.bin", blob)
    catalog.add_dataset("objects", files.url + "/bucket/")
    files.throttle = 10_000_000
    answers = run_workers(N, ["read", "objects", "shard-0.bin"], worker_env(store_env), tmp_path / "go")
    wrong = [a for a in answers if a["sha256"] != blob.sha256() or a["size"] != blob.size]
    assert wrong == []
    assert dict(files.downloads) == {"bucket/shard-0.bin": 1}


def _wait_for_bytes(progress: Path, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = json.loads(progress.read_text())
            if data["bytes_done"] > 0:
                return data
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError("the pull never started")


def test_kill_9_mid_dataset_pull_then_pull_again(
    catalog: Catalog, files: FileServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    blobs = {"ds/a.bin": Blob(size=600_000, seed=40), "ds/b.bin": Blob(size=4_000_000, seed=41)}
    for p, b in blobs.items():
        files.add(p, b)
    catalog.add_dataset("killed", files.url + "/ds/")
    files.throttle = 1_500_000
    (proc,) = start_workers(1, ["pull", "killed"], worker_env(store_env), tmp_path / "go")
    key = catalog.layout.key(DatasetRef("killed", "1"))
    _wait_for_bytes(catalog.layout.progress_path(key))
    time.sleep(0.8)  # a.bin done, b.bin half way
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    status = catalog.status("killed")
    assert status.state == "partial"
    data_dir = catalog.layout.data_dir(DatasetRef("killed", "1"))
    visible = [p for p in data_dir.rglob("*") if p.is_file() and not p.name.endswith(".part")]
    for p in visible:  # whatever is visible is complete and correct
        assert hashlib.sha256(p.read_bytes()).hexdigest() == blobs[f"ds/{p.name}"].sha256()
    files.throttle = None
    assert catalog.pull("killed").state == "cached"  # the dead owner's lease is taken over at once
    root = catalog.mount("killed")
    assert sorted(p.name for p in root.iterdir()) == ["a.bin", "b.bin"]
    for p, b in blobs.items():
        assert hashlib.sha256((root / p.split("/")[1]).read_bytes()).hexdigest() == b.sha256()
    assert files.downloads["ds/a.bin"] == 1  # finished files are not fetched again


def test_kill_9_mid_model_pull_then_pull_again(
    catalog: Catalog, hub: HubServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    files = {"config.json": Blob(b"{}"), "model.safetensors": Blob(size=5_000_000, seed=50)}
    hub.add_repo("org/killed", files)
    hub.throttle = 1_500_000
    (proc,) = start_workers(1, ["pull", "hf:org/killed"], worker_env(store_env, HF_ENDPOINT=hub.url), tmp_path / "go")
    _wait_for_bytes(catalog.layout.progress_path("hf.org--killed@main"))
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert catalog.status("hf:org/killed").state == "partial"
    hub.throttle = None
    status = catalog.pull("hf:org/killed")
    assert status.state == "cached"
    path = catalog.mount("hf:org/killed")
    assert hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest() == files["model.safetensors"].sha256()
    assert hub.bytes_sent < 2 * files["model.safetensors"].size  # resumed, not restarted from zero


def test_a_pull_started_elsewhere_is_visible_and_shared(
    catalog: Catalog, files: FileServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    blob = Blob(size=3_000_000, seed=70)
    files.add("ds/a.bin", blob)
    catalog.add_dataset("elsewhere", files.url + "/ds/")
    files.throttle = 1_500_000
    (proc,) = start_workers(1, ["pull", "elsewhere"], worker_env(store_env), tmp_path / "go")
    _wait_for_bytes(catalog.layout.progress_path("ds.elsewhere@1"))
    (running,) = catalog.pulls()
    assert running.ref == "elsewhere@1" and running.phase == "downloading" and running.owner
    assert catalog.status("elsewhere").pulling is not None
    seen: list[PullProgress] = []
    status = catalog.pull("elsewhere", progress=seen.append)  # waits for the other process
    assert status.state == "cached"
    waiting = [p for p in seen if p.phase == "waiting"]
    assert waiting and not any(p.owner for p in waiting) and max(p.bytes_done for p in waiting) > 0
    assert seen[-1].phase == "done"
    assert files.downloads == {"ds/a.bin": 1}
    assert proc.wait(timeout=60) == 0


def test_two_survivors_of_a_killed_batch_holder_do_not_share_the_batch(
    catalog: Catalog, files: FileServer, store_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 34: the holder of a staged batch pull is killed; two pullers started at once after it
    take the batch over one at a time (the other waits for the publication): both end with the entry,
    none with a FileNotFoundError from the other's staging folder. Three rounds (it failed 1 in 5)."""
    blobs = {f"ds/f{i:03d}.bin": Blob(size=8_000, seed=100 + i) for i in range(160)}
    for p, b in blobs.items():
        files.add(p, b)
    for round_no in range(3):
        name = f"batch{round_no}"
        catalog.add_dataset(name, files.url + "/ds/")
        data_dir = catalog.layout.data_dir(DatasetRef(name, "1"))
        staging = data_dir.with_name(f".{data_dir.name}.staging")
        files.link = 400_000  # the batch takes about 3 s: killed in the middle
        (holder,) = start_workers(1, ["pull", name], worker_env(store_env), tmp_path / f"go{round_no}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(1 for _ in staging.rglob("*.bin")) < 20:
            time.sleep(0.02)
        assert not catalog.layout.manifest_path(DatasetRef(name, "1")).exists()  # killed mid-batch
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
        files.link = 2_000_000
        survivors = start_workers(2, ["pull", name], worker_env(store_env), tmp_path / f"again{round_no}")
        for p in survivors:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert json.loads(out.strip().splitlines()[-1])["state"] == "cached"
        root = catalog.mount(name)
        assert len(list(root.iterdir())) == len(blobs)
