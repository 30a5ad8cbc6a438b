"""`starverse eval` / `store show` on the CLI, the REST routes, and the job of the local backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse


def test_cli_eval_baseline_errors_store_show_and_compare(
    store: dict[str, str], client: Starverse, capsys: pytest.CaptureFixture[str]
) -> None:
    m, base, data = store["model"], store["base"], store["data"]
    assert main(["eval", m, "--data", data, "--baseline", base, "--limit", "6"]) == 0
    out = capsys.readouterr().out
    assert f"delta vs {m}" in out and "f1_macro" in out and "accuracy" in out
    assert main(["eval", m, "--data", data, "--limit", "6", "--errors", "--json"]) == 0
    wrong = json.loads(capsys.readouterr().out)
    assert wrong["model"] == m and all({"expected", "predicted", "input"} <= set(e) for e in wrong["examples"])
    assert main(["store", "show", m]) == 0
    shown = capsys.readouterr().out
    assert "scores:" in shown and shown.count(data) >= 2  # both runs of m are listed
    assert main(["eval", "compare", "--data", data, base, m]) == 0
    assert f"{base} -> {m}" in capsys.readouterr().out
    assert main(["eval", m]) != 0 and "--data" in capsys.readouterr().err


async def test_rest_eval_run_list_and_errors(jp_fetch: Any, store: dict[str, str]) -> None:
    body = {"model": store["model"], "data": store["data"], "limit": 4, "baselines": [store["base"]]}
    r = await jp_fetch("jupyter-starverse", "evals", method="POST", body=json.dumps(body))
    reports = json.loads(r.body)["reports"]
    assert [x["model"] for x in reports] == [store["model"], store["base"]] and reports[0]["examples"] == 4
    listed = json.loads((await jp_fetch("jupyter-starverse", "evals", params={"model": store["model"]})).body)
    assert [x["id"] for x in listed] == [reports[0]["id"]]
    errors = json.loads((await jp_fetch("jupyter-starverse", "evals", reports[0]["id"], "errors")).body)
    assert errors["total"] == sum(1 for _ in errors["examples"])
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "evals", method="POST", body=json.dumps({"model": store["model"]}))
    assert err.value.code == 400
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-starverse", "evals", "no-such-report")
    assert err.value.code == 404


def test_eval_runs_as_a_local_job_and_renders_for_kubernetes_and_slurm(
    store: dict[str, str], client: Starverse
) -> None:
    spec = client.evals.job_spec(store["model"], store["data"], baselines=[store["base"]], limit=2)
    assert set(spec.mounts) == {store["model"], store["base"], store["data"]} and spec.accelerator == "cpu"
    done = client.backend("local").wait(client.launch(spec, backend="local").id, timeout=240)
    logs = Path(done.experiment_dir, "logs", "rank0.log")
    text = logs.read_text() if logs.exists() else ""
    assert done.state.value == "succeeded", (done.reason, text[-3000:])
    assert f"delta vs {store['model']}" in text  # the side-by-side table is in the job's log
    reports = client.evals.reports(data=store["data"])  # written to the store by the job
    assert [r.model for r in reports] == [store["model"], store["base"]] and reports[0].examples == 2
    for backend in ("kubernetes", "slurm"):  # the same job, rendered for the clusters
        rendered = client.preview(spec, backend=backend)
        assert "jupyter_starverse.evals.job" in json.dumps(rendered.to_json()), backend


async def test_rest_harness_inputs_are_checked_before_anything_runs(
    jp_fetch: Any, jp_root_dir: Path, store: dict[str, str], tmp_path: Path
) -> None:
    """An lm-eval task file over REST is a path under the server's root; a link out of it is refused."""
    outside = tmp_path / "outside.yaml"
    outside.write_text("task: leak\ndataset_path: json\n")
    (jp_root_dir / "linked.yaml").symlink_to(outside)
    cases = [
        ({"model": store["model"], "data": store["data"], "harness": "yes"}, 400, "harness"),
        ({"model": store["model"], "harness_task": "../outside.yaml"}, 403, "outside the server's root"),
        ({"model": store["model"], "harness_task": "linked.yaml"}, 403, "outside the server's root"),
        ({"model": store["model"], "data": store["data"], "harness_task": "linked.yaml"}, 403, "outside"),
    ]
    for body, code, said in cases:
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("jupyter-starverse", "evals", method="POST", body=json.dumps(body))
        assert err.value.code == code, body
        assert said in err.value.response.body.decode(), body
