"""Hugging Face models: the real huggingface_hub client against a loopback Hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_starverse.catalog import Catalog
from jupyter_starverse.errors import BackendUnavailableError, ConflictError, IntegrityError, NotFoundError
from tests.catalog.conftest import ROOT
from tests.catalog.servers import Blob, HubServer

FILES = {
    "config.json": Blob(b'{"model_type": "gpt2"}'),
    "model.safetensors": Blob(size=3_000_000, seed=7),
    "sub/tok.txt": Blob(b"a b c"),
}


def load_offline(env: dict[str, str], code: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_pull_model_then_load_offline_from_a_job(catalog: Catalog, hub: HubServer) -> None:
    commit = hub.add_repo("org/tiny", FILES)
    status = catalog.pull("hf:org/tiny")
    assert status.state == "cached" and status.commit == commit and status.files == 3
    assert hub.downloads == {"org/tiny/config.json": 1, "org/tiny/model.safetensors": 1, "org/tiny/sub/tok.txt": 1}
    path = catalog.mount("hf:org/tiny")
    assert path == catalog.hf_cache_dir / "models--org--tiny" / "snapshots" / commit
    assert (path / "config.json").read_bytes() == FILES["config.json"].data
    env = catalog.job_env()
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == str(catalog.hf_cache_dir)
    hub.stop()  # a job has no Hub
    got = load_offline(env, "import huggingface_hub as h; print(h.snapshot_download('org/tiny'))")
    assert got == str(path)
    got = load_offline(env, "import huggingface_hub as h; print(h.hf_hub_download('org/tiny', 'sub/tok.txt'))")
    assert Path(got).read_text() == "a b c"
    # cached entries pull and mount without the Hub
    assert catalog.pull("hf:org/tiny@main").state == "cached"


def test_revisions(catalog: Catalog, hub: HubServer) -> None:
    commit = hub.add_repo("org/tiny", FILES, revision="v1")
    assert catalog.pull(f"hf:org/tiny@{commit}").commit == commit
    assert catalog.pull("hf:org/tiny@v1").commit == commit
    assert hub.downloads["org/tiny/model.safetensors"] == 1  # blobs shared by revisions
    assert {s.ref for s in catalog.ls()} == {f"hf:org/tiny@{commit}", "hf:org/tiny@v1"}


def test_unknown_revision_and_repo_leave_no_entry(catalog: Catalog, hub: HubServer) -> None:
    hub.add_repo("org/tiny", FILES)
    with pytest.raises(NotFoundError, match="revision 'nope' does not exist") as err:
        catalog.pull("hf:org/tiny@nope")
    assert err.value.hint
    with pytest.raises(NotFoundError, match="not found"):
        catalog.pull("hf:org/missing")
    assert catalog.ls() == []
    with pytest.raises(NotFoundError, match="pull"):
        catalog.mount("hf:org/tiny")


def test_unreachable_hub(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(BackendUnavailableError, match="Hub"):
        catalog.pull("hf:org/tiny")
    assert catalog.status("hf:org/tiny").state == "missing"


def test_corrupt_download_is_rejected(catalog: Catalog, hub: HubServer) -> None:
    commit = hub.add_repo("org/bad", FILES)
    git, _sha = hub._oids[f"{commit}/model.safetensors"]
    hub._oids[f"{commit}/model.safetensors"] = (git, "0" * 64)  # the Hub's listing disagrees with the bytes
    with pytest.raises(IntegrityError, match=r"model\.safetensors"):
        catalog.pull("hf:org/bad")
    assert catalog.status("hf:org/bad").state == "partial"
    with pytest.raises(ConflictError):
        catalog.mount("hf:org/bad")


def test_import_local_model_folder(catalog: Catalog, tmp_path: Path) -> None:
    src = tmp_path / "my-model"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (src / "model.safetensors").write_bytes(os.urandom(100_000))
    (src / "sub" / "x.txt").write_text("x")
    entry = catalog.import_model(src, repo="local/my-model")
    assert entry.ref == "hf:local/my-model@main"
    path = catalog.mount("hf:local/my-model")
    assert (path / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    got = load_offline(catalog.job_env(), "import huggingface_hub as h; print(h.snapshot_download('local/my-model'))")
    assert got == str(path)
    with pytest.raises(ConflictError):
        catalog.import_model(src, repo="local/my-model")
    with pytest.raises(NotFoundError):
        catalog.import_model(tmp_path / "nope", repo="local/other")
    catalog.rm("hf:local/my-model")
    assert catalog.ls() == [] and not path.exists()


def test_blob_follower_hashes_while_writing_and_only_trusts_the_same_file(tmp_path: Path) -> None:
    import hashlib
    import threading
    import time

    from jupyter_starverse.catalog._follow import BlobFollower

    data = os.urandom(3_000_000)
    sha = hashlib.sha256(data).hexdigest()
    other = os.urandom(1000)
    other_sha = hashlib.sha256(other).hexdigest()
    blobs = tmp_path / "blobs"
    blobs.mkdir()

    def writer() -> None:
        with open(blobs / f"{sha}.incomplete", "wb") as f:
            for i in range(0, len(data), 250_000):
                f.write(data[i : i + 250_000])
                f.flush()
                time.sleep(0.01)
        (blobs / f"{sha}.incomplete").rename(blobs / sha)
        (blobs / f"{other_sha}.incomplete").write_bytes(other)  # hashed, then replaced by a new file
        time.sleep(0.2)
        (blobs / f"{other_sha}.incomplete").unlink()
        (blobs / other_sha).write_bytes(other)

    with BlobFollower(blobs, {sha: len(data), other_sha: len(other)}) as follower:
        thread = threading.Thread(target=writer)
        thread.start()
        thread.join()
    assert follower.digest(sha, blobs / sha) == sha
    assert follower.digest(other_sha, blobs / other_sha) is None  # not the file that was hashed
    follower.close()


def test_large_files_are_verified_without_a_second_read(
    catalog: Catalog, hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_starverse.catalog import _models

    reads: list[Path] = []
    real = _models.sha256_file

    def spy(path: Path) -> str:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(_models, "sha256_file", spy)
    hub.throttle = 20_000_000
    hub.add_repo("org/follow", {"config.json": Blob(b"{}"), "model.safetensors": Blob(size=6_000_000, seed=60)})
    status = catalog.pull("hf:org/follow")
    assert status.state == "cached"
    # hashed while huggingface_hub wrote it; only small non-LFS files (config.json) are read to record a sha256
    assert [p for p in reads if p.stat().st_size > 1_000_000] == []
