"""CLI, %sv magics, REST and the catalog widget, all over the same store."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse.catalog import Catalog
from jupyter_starverse.cli import main
from jupyter_starverse.cli._store import parse_size
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.widgets.catalog import CatalogBrowser
from tests.catalog.servers import Blob, HubServer


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha")
    (root / "sub" / "b.bin").write_bytes(os.urandom(50_000))
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_store_verbs(capsys: pytest.CaptureFixture[str], src: Path) -> None:
    code, out, _ = run(capsys, "store", "add", "toy", str(src), "--version", "v1", "--license", "MIT")
    assert code == 0 and "toy@v1" in out
    code, out, _ = run(capsys, "store", "ls")
    assert code == 0 and "toy@v1" in out and "missing" in out
    code, out, err = run(capsys, "store", "pull", "toy", "--json")
    assert code == 0 and json.loads(out)["state"] == "cached"
    assert "toy" in err  # tqdm bar on stderr keeps stdout machine readable
    code, out, _ = run(capsys, "store", "mount", "toy")
    path = Path(out.strip())
    assert code == 0 and (path / "a.txt").read_text() == "alpha"
    code, out, _ = run(capsys, "mount", "toy@v1")
    assert Path(out.strip()) == path
    code, out, _ = run(capsys, "store", "ls", "--json")
    (row,) = json.loads(out)
    assert row["state"] == "cached" and row["license"] == "MIT" and row["path"] == str(path)
    code, out, _ = run(capsys, "store", "evict", "--max-bytes", "0", "--json")
    assert code == 0 and json.loads(out)[0]["ref"] == "toy@v1"
    code, out, _ = run(capsys, "store", "status", "toy")
    assert "missing" in out
    code, out, _ = run(capsys, "store", "rm", "toy")
    assert code == 0 and "removed toy@v1" in out


def test_cli_pulls_a_subset_of_a_hub_dataset(capsys: pytest.CaptureFixture[str], hub: HubServer) -> None:
    hub.add_repo(
        "org/corpus",
        {"data/en/a.parquet": Blob(size=3000, seed=1), "data/fr/a.parquet": Blob(size=4000, seed=2)},
        repo_type="dataset",
    )
    argv = ["store", "pull", "hf:datasets/org/corpus", "--allow", "data/en/*", "--connections", "2", "--json"]
    code, out, _ = run(capsys, *argv)
    data = json.loads(out)
    assert code == 0 and data["state"] == "cached" and data["files"] == 1 and data["kind"] == "hf-dataset"
    assert set(hub.sent_by_file) == {"datasets/org/corpus/data/en/a.parquet"}


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["store", "pull", "../etc"], 2, "not allowed"),
        (["store", "pull", "hf:a/b/c"], 2, "hf:ORG/REPO"),
        (["store", "mount", "nothing"], 3, "store ls"),
        (["store", "add", "x", "/definitely/missing/folder"], 3, "does not exist"),
        (["store", "add", "a/b", "."], 2, "not allowed"),
        (["store", "evict", "--max-bytes", "lots"], 2, "not a size"),
        (["store", "nope"], 2, "invalid choice"),
        (["store", "pull", "toy", "--connections", "0"], 2, "connections must be a whole number from 1 to 64"),
        (["store", "pull", "toy", "--allow", "*.txt"], 2, "patterns choose files of Hugging Face repos"),
    ],
)
def test_cli_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], code: int, needle: str) -> None:
    got, _out, err = run(capsys, *argv)
    assert got == code
    assert needle in err


def test_parse_size() -> None:
    assert parse_size("10") == 10
    assert parse_size("2G") == 2 * 1024**3
    assert parse_size("1.5MiB") == int(1.5 * 1024**2)
    with pytest.raises(BadInputError):
        parse_size("-1")


def test_magics_share_the_table(src: Path) -> None:
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import get_ipython

    from jupyter_starverse.magics import StarverseMagics

    shell = get_ipython()
    magics = StarverseMagics(shell)
    magics.sv(f"store add toy {src}")
    status = magics.sv("store pull toy")
    assert status.state == "cached"
    path = magics.sv("mount toy")
    assert isinstance(path, Path) and (path / "a.txt").read_text() == "alpha"
    assert "toy@1" in str(magics.sv("store ls"))
    with pytest.raises(UsageError, match="not allowed"):
        magics.sv("mount ../x")


def test_widget_pulls_with_progress_and_mounts(client: Starverse, src: Path) -> None:
    client.catalog.add_dataset("toy", str(src))
    browser = CatalogBrowser(client)
    assert browser.select.value == "toy@1" and "missing" in browser.select.options[0][0]
    assert browser.mount_button.disabled
    browser.pull(wait=True)
    assert browser.error.value == ""
    assert browser.bar.bar.value == 100.0 and "done" in browser.bar.label.value
    assert "cached" in browser.select.options[0][0]
    browser.mount()
    assert Path(browser.path.value) == client.catalog.mount("toy")


def test_widget_shows_errors(client: Starverse, src: Path) -> None:
    client.catalog.add_dataset("toy", str(src))
    browser = CatalogBrowser(client)
    browser.mount()  # not pulled yet
    assert "not pulled yet" in browser.error.value


async def test_rest_list_pull_mount(jp_fetch: Any, src: Path, jp_root_dir: Path) -> None:
    src = Path(shutil.copytree(src, jp_root_dir / "src"))  # a server reads sources under its root only
    body = json.dumps({"name": "toy", "source": str(src), "description": "toy data"})
    response = await jp_fetch("jupyter-starverse", "store", method="POST", body=body)
    assert response.code == 201 and json.loads(response.body)["ref"] == "toy@1"
    rows = json.loads((await jp_fetch("jupyter-starverse", "store")).body)
    assert [r["state"] for r in rows] == ["missing"]
    response = await jp_fetch("jupyter-starverse", "store", "pull", method="POST", body=json.dumps({"ref": "toy"}))
    assert response.code == 202
    catalog = Catalog(Starverse().settings)
    import asyncio

    for _ in range(200):
        if catalog.status("toy").state == "cached":
            break
        await asyncio.sleep(0.05)
    entry = json.loads((await jp_fetch("jupyter-starverse", "store", "entry", params={"ref": "toy"})).body)
    assert entry["state"] == "cached" and entry["files"] == 2
    mounted = json.loads((await jp_fetch("jupyter-starverse", "store", "mount", params={"ref": "toy"})).body)
    assert mounted == {"ref": "toy", "path": entry["path"]}
    pulls = json.loads((await jp_fetch("jupyter-starverse", "store", "pulls")).body)
    assert [(p["ref"], p["phase"]) for p in pulls] == [("toy@1", "done")]


@pytest.mark.parametrize(
    ("method", "path", "params", "body", "status"),
    [
        ("GET", "entry", {"ref": "nothing"}, None, 404),
        ("GET", "entry", {"ref": "../x"}, None, 400),
        ("GET", "entry", {}, None, 400),
        ("GET", "mount", {"ref": "hf:a/b/c"}, None, 400),
        ("POST", "pull", {}, {"ref": "nothing"}, 404),
        ("POST", "pull", {}, {"ref": "/abs"}, 400),
        ("POST", "pull", {}, {}, 400),
        ("POST", "pull", {}, {"ref": "hf:org/m", "allow": [1]}, 400),
        ("POST", "pull", {}, {"ref": "hf:org/m", "allow": ["x" * 300]}, 400),
        ("POST", "pull", {}, {"ref": "hf:org/m", "ignore": {"*.bin": True}}, 400),
        ("POST", "pull", {}, {"ref": "hf:org/m", "ignore": ["*"] * 65}, 400),
        ("POST", "pull", {}, {"ref": "hf:org/m", "connections": 0}, 400),
        ("POST", "pull", {}, {"ref": "hf:org/m", "connections": "8"}, 400),
        ("POST", "pull", {}, {"ref": "toy", "allow": ["*.txt"]}, 400),
        ("POST", "", {}, {"name": "x", "source": "definitely/missing"}, 404),
        ("POST", "", {}, {"name": "x", "source": "/"}, 400),  # outside the server's root and the store
        ("POST", "", {}, {"name": "x", "source": "./..//.."}, 400),
        ("POST", "", {}, {"name": "x", "source": "zip://a::file:///etc"}, 400),
    ],
)
async def test_rest_bad_input(
    jp_fetch: Any, method: str, path: str, params: dict[str, str], body: Any, status: int
) -> None:
    parts = ["jupyter-starverse", "store"] + ([path] if path else [])
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(*parts, method=method, params=params, body=None if body is None else json.dumps(body))
    assert err.value.code == status
    reply = json.loads(err.value.response.body)  # type: ignore[union-attr]
    assert reply["message"] and reply["error"] != "InternalError"


async def test_rest_pulls_a_subset_of_a_hub_dataset(jp_fetch: Any, hub: HubServer) -> None:
    hub.add_repo(
        "org/corpus",
        {"data/en/a.parquet": Blob(size=3000, seed=1), "data/fr/a.parquet": Blob(size=4000, seed=2)},
        repo_type="dataset",
    )
    body = {"ref": "hf:datasets/org/corpus", "allow": ["data/en/*"], "ignore": ["*.tmp"], "connections": 2}
    response = await jp_fetch("jupyter-starverse", "store", "pull", method="POST", body=json.dumps(body))
    assert response.code == 202
    import asyncio

    entry: dict[str, Any] = {}
    for _ in range(400):
        try:
            got = await jp_fetch("jupyter-starverse", "store", "entry", params={"ref": body["ref"]})
            entry = json.loads(got.body)
        except HTTPClientError as e:
            assert e.code == 404  # the pull has not recorded the repo yet
        if entry.get("state") == "cached":
            break
        await asyncio.sleep(0.05)
    assert entry["state"] == "cached" and entry["files"] == 1 and entry["kind"] == "hf-dataset"
    assert set(hub.sent_by_file) == {"datasets/org/corpus/data/en/a.parquet"}


async def test_rest_needs_auth(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "store", headers={"Authorization": ""})
    assert err.value.code == 403


async def test_rest_add_reads_sources_under_the_servers_root_only(jp_fetch: Any, jp_root_dir: Path) -> None:
    """A server reads files as its own user for whoever holds its token: `POST store` of `/` would
    register the whole file system, and a later pull copy it into the store."""
    (jp_root_dir / "corpus").mkdir()
    (jp_root_dir / "corpus" / "a.txt").write_text("alpha")
    reply = await jp_fetch(
        "jupyter-starverse", "store", method="POST", body=json.dumps({"name": "c", "source": "corpus"})
    )
    assert reply.code == 201 and json.loads(reply.body)["source"] == str((jp_root_dir / "corpus").resolve())
    for source in ("/", "/etc", "~", "../..", "file:///"):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(
                "jupyter-starverse", "store", method="POST", body=json.dumps({"name": "x", "source": source})
            )
        reply = json.loads(err.value.response.body)  # type: ignore[union-attr]
        assert err.value.code == 400 and reply["field"] == "source" and "root" in reply["hint"], (source, reply)
    rows = json.loads((await jp_fetch("jupyter-starverse", "store")).body)
    assert [r["ref"] for r in rows] == ["c@1"]  # nothing outside the root was registered
