"""A pipeline runs headless as jobs: each step starts only after the steps it waits for succeeded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline

from .conftest import doc, write


@pytest.mark.slow
def test_two_steps_run_in_order_to_success(client: Starverse, folder: Path, dataset: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = write(folder, doc(data=dataset, train={"nodes": 2}))
    assert main(["pipeline", "run", str(path), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["state"] == "succeeded"
    steps = {s["node"]: s for s in run["steps"]}
    assert [steps[n]["state"] for n in ("prep", "train")] == ["succeeded", "succeeded"]
    prep = client.attach(steps["prep"]["job_id"], backend="local")
    train = client.attach(steps["train"]["job_id"], backend="local")
    assert train.spec.nodes == 2 and train.spec.mounts == (dataset,)
    ranks = [json.loads(p.read_text()) for p in sorted(Path(train.experiment_dir).glob("step-*.json"))]
    assert len(ranks) == 2  # both ranks of the 2-node step ran
    assert all(r["files"] == ["train.jsonl"] for r in ranks)  # the dropped dataset, mounted
    first = json.loads(next(Path(prep.experiment_dir).glob("step-*.json")).read_text())
    assert first["data"] is None  # prep was not fed the dataset
    assert prep.finished is not None and min(r["start"] for r in ranks) >= prep.finished  # after it, not beside
    # the run is on record: any process can read every node's state back
    again = client.pipelines.status(run["run_id"])
    assert [s.state for s in again.steps] == ["succeeded", "succeeded"] and again.driver is None


def test_a_failed_step_skips_what_waits_for_it(client: Starverse, folder: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = write(folder, doc(first="steps/fail.py"))
    assert main(["pipeline", "run", str(path)]) == 1
    captured = capsys.readouterr()
    assert "failed" in captured.out and "skipped" in captured.out
    assert "at step prep" in captured.err
    run = client.pipelines.runs()[0]
    assert [s.state for s in run.steps] == ["failed", "skipped"]
    assert run.step("train").job_id is None  # never submitted
    assert run.state == "failed"


def test_a_pipeline_with_an_error_starts_nothing(client: Starverse, folder: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = write(folder, doc(train={"nodes": 2, "data_parallel": 3}))
    assert main(["pipeline", "run", str(path)]) == 2
    assert "data 3 x tensor 1 x pipeline 1 = 3, but the step has 2 card(s)" in capsys.readouterr().err
    assert client.pipelines.runs() == [] and client.jobs(backend="local") == []
    assert main(["pipeline", "validate", str(path)]) == 2
    out = capsys.readouterr().out
    assert "error: train.data_parallel" in out


def test_a_detached_run_is_followed_and_cancelled(client: Starverse, folder: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    (folder / "steps" / "long.py").write_text("import time\nprint('working', flush=True)\ntime.sleep(120)\n")
    path = write(folder, doc(first="steps/long.py"))
    assert main(["pipeline", "run", str(path), "--detach", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]  # answered at once: a driver process goes on

    def prep_running() -> bool:
        return client.pipelines.status(run_id).step("prep").state == "running"

    deadline = time.monotonic() + 120
    while not prep_running():
        assert time.monotonic() < deadline, client.pipelines.status(run_id)
        time.sleep(0.3)
    assert client.pipelines.status(run_id).driver == "running"
    assert main(["pipeline", "cancel", run_id, "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["state"] == "cancelled"
    steps = {s["node"]: s for s in run["steps"]}
    assert steps["prep"]["state"] == "cancelled"
    assert steps["train"]["state"] == "skipped" and steps["train"]["job_id"] is None  # never submitted
    assert client.attach(steps["prep"]["job_id"], backend="local").state.value == "cancelled"
    time.sleep(1.0)  # the driver is gone and submitted nothing more
    assert [j.spec.name for j in client.jobs(backend="local")] == ["demo-prep"]


MASK = {"email": "mask", "person": "placeholder"}  # no salted hash: no secret to set up


def test_data_preparation_feeds_the_step_after_it(client: Starverse, folder: Path, tmp_path: Path) -> None:
    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.jsonl").write_text('{"text": "write to alice@example.com for the data"}\n{"text": "plain text"}\n')
    client.catalog.add_dataset("raw", str(src), version="v1")
    client.catalog.pull("raw@v1")
    data = {
        "version": 1,
        "name": "prepped",
        "nodes": [
            {"id": "raw", "kind": "dataset", "params": {"ref": "raw@v1"}},
            {"id": "clean", "kind": "prep", "params": {"step": "clean", "options": {"actions": MASK}}},
            {"id": "train", "kind": "train", "params": {"script": "steps/train.py"}},
        ],
        "edges": [{"source": "raw", "target": "clean"}, {"source": "clean", "target": "train"}],
    }
    pipeline = Pipeline.from_json(data)
    found = client.pipelines.check(pipeline, base_dir=folder)
    assert found.ok, found.issues
    assert found.info["train"]["produced_by"] == {"raw@v1": "clean"}  # the source stands in until it ran
    run = client.pipelines.run(pipeline, base_dir=folder)
    assert run.state == "succeeded", run
    assert "wrote raw@clean-" in (run.step("clean").reason or "")
    train = client.attach(run.step("train").job_id or "", backend="local")
    (mounted,) = train.spec.mounts
    assert mounted.startswith("raw@clean-")  # the version the prep step wrote, not raw@v1
    seen = json.loads(next(Path(train.experiment_dir).glob("step-*.json")).read_text())
    text = (Path(seen["data"]) / "data.jsonl").read_text()
    assert "alice@example.com" not in text and "plain text" in text
    exported = client.pipelines.export(pipeline, "sbatch", base_dir=folder).files[-1].text  # the same file, exported
    assert "raw@v1" not in exported and "/data/raw/clean-runSUBMITSTAMP-clean" in exported


def test_runs_are_listed_newest_first_whatever_their_names(client: Starverse, folder: Path) -> None:
    """A run of ``zeta`` then one of ``alpha``, in the same second: the list starts with ``alpha``,
    the one made last (the ids alone would sort ``zeta-…`` first, or two runs of one name either way)."""
    for name in ("zeta", "alpha", "alpha"):
        pipeline = Pipeline.from_json({**doc(), "name": name})
        client.pipelines.store.new(pipeline, [], folder)
    runs = client.pipelines.runs()
    assert [r.name for r in runs] == ["alpha", "alpha", "zeta"]
    assert [r.created for r in runs] == sorted((r.created for r in runs), reverse=True)
    assert main(["pipeline", "runs"]) == 0
