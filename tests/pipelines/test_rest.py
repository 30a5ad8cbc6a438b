"""REST: validate and price the editor's document, export beside it, run it detached, follow its nodes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from .conftest import FAIL, STEP, doc


async def _post(jp_fetch: Any, route: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await jp_fetch("jupyter-starverse", "pipelines", route, method="POST", body=json.dumps(body))
    return json.loads(r.body)  # type: ignore[no-any-return]


@pytest.fixture
def project(jp_root_dir: Path) -> Path:
    folder = jp_root_dir / "work"
    (folder / "steps").mkdir(parents=True)
    for name, text in (("prep.py", STEP), ("train.py", STEP), ("fail.py", FAIL)):
        (folder / "steps" / name).write_text(text)
    return folder


async def test_validate_pins_issues_to_nodes_and_prices_the_pipeline(jp_fetch: Any, project: Path) -> None:
    body = {"pipeline": doc(train={"nodes": 2, "data_parallel": 3}), "path": "work/demo.svpipeline"}
    found = await _post(jp_fetch, "validate", body)
    assert not found["ok"]
    assert [(i["node"], i["field"]) for i in found["issues"] if i["level"] == "error"] == [("train", "data_parallel")]
    body["pipeline"]["nodes"][1]["params"]["data_parallel"] = 2
    found = await _post(jp_fetch, "cost", body)
    assert found["ok"] and found["total"] == "0.30 CNY"  # prep 1 node + train 2 nodes, one hour each
    assert found["info"]["train"]["cards"] == 2


async def test_export_writes_beside_the_document(jp_fetch: Any, project: Path) -> None:
    body = {"pipeline": doc(), "path": "work/demo.svpipeline", "format": "sbatch", "write": True}
    out = await _post(jp_fetch, "export", body)
    assert out["written"][0] == "work/demo-sbatch/submit.sh"
    assert (project / "demo-sbatch" / "train.sbatch").read_text().startswith("#!/bin/bash")


async def test_a_path_outside_the_root_is_refused(jp_fetch: Any, project: Path) -> None:
    with pytest.raises(HTTPClientError) as info:
        await _post(jp_fetch, "validate", {"pipeline": doc(), "path": "../../etc/demo.svpipeline"})
    assert info.value.code == 403


async def test_bad_documents_are_400(jp_fetch: Any, project: Path) -> None:
    for body in ({"pipeline": []}, {"pipeline": {"nodes": "x"}}, {"pipeline": doc(), "format": "zip"}):
        with pytest.raises(HTTPClientError) as info:
            await _post(jp_fetch, "export", body)
        assert info.value.code == 400


@pytest.mark.slow
async def test_run_is_detached_and_its_nodes_are_followed(jp_fetch: Any, project: Path) -> None:
    run = await _post(jp_fetch, "run", {"pipeline": doc(first="steps/fail.py"), "path": "work/demo.svpipeline"})
    assert run["state"] == "running"  # answered at once; a driver process submits the steps
    for _ in range(240):
        r = await jp_fetch("jupyter-starverse", "pipelines", "runs", run["run_id"])
        status = json.loads(r.body)
        if status["state"] != "running":
            break
        await asyncio.sleep(0.25)
    nodes = {s["node"]: s for s in status["steps"]}
    assert status["state"] == "failed", status
    assert nodes["prep"]["state"] == "failed" and nodes["prep"]["job_id"]
    assert nodes["train"]["state"] == "skipped" and "after prep" in nodes["train"]["reason"]
    listed = json.loads((await jp_fetch("jupyter-starverse", "pipelines", "runs")).body)
    assert [r["run_id"] for r in listed] == [run["run_id"]]
