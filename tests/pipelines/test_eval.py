"""An ``eval`` step scores a model on a labelled dataset: after a training step (its output) or a store model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline
from tests.evals.conftest import labelled_rows, write_dataset
from tests.feedback.conftest import tiny_folder  # noqa: F401  (the session's tiny Llama)


def _dataset(client: Starverse, tmp_path: Path, n: int) -> str:
    """A small labelled set on the store, pulled (a pipeline mounts pulled entries)."""
    ref = write_dataset(client, tmp_path / "reviews", labelled_rows(n))
    client.catalog.pull(ref)
    return ref


def _doc(data: str, *, model: str | None = None, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """data -> train -> eval (the train step's output is scored), or model + data -> eval."""
    nodes: list[dict[str, Any]] = [
        {"id": "data", "kind": "dataset", "params": {"ref": data}},
        {"id": "score", "kind": "eval", "params": {"task": "classification", **(params or {})}},
    ]
    edges = [{"source": "data", "target": "score"}]
    if model is None:
        nodes.insert(1, {"id": "train", "kind": "train", "params": {"script": "steps/train.py"}})
        edges += [{"source": "data", "target": "train"}, {"source": "train", "target": "score"}]
    else:
        nodes.insert(1, {"id": "base", "kind": "model", "params": {"ref": model}})
        edges.append({"source": "base", "target": "score"})
    return {"version": 1, "name": "demo", "backend": "local", "nodes": nodes, "edges": edges}


def test_an_eval_step_after_training_scores_its_output_and_is_checked(client: Starverse, folder: Path,
                                                                      tmp_path: Path) -> None:  # fmt: skip
    data = _dataset(client, tmp_path, 6)
    pipeline = Pipeline.from_json(_doc(data))
    found = client.pipelines.check(pipeline, base_dir=folder)
    assert found.ok, found.issues
    score = found.info["score"]
    assert score["model"] == "exp:demo-train" and score["from_node"] == "train"  # the train step's experiment
    assert score["data"] == data and score["backend"] == "local"
    assert [s.id for s in pipeline.steps] == ["train", "score"]

    # what is wrong is pinned to the node's field: an unknown task, a missing target field, two models
    bad = client.pipelines.check(Pipeline.from_json(_doc(data, params={"task": "poetry"})), base_dir=folder)
    assert [(i.node, i.field) for i in bad.issues if i.level == "error"] == [("score", "task")]
    bad = client.pipelines.check(Pipeline.from_json(_doc(data, params={"target_field": "gold"})), base_dir=folder)
    errors = [i for i in bad.issues if i.level == "error"]
    assert errors and errors[0].node == "score" and "gold" in errors[0].message
    two = _doc(data)
    two["nodes"].append({"id": "other", "kind": "model", "params": {"ref": "hf:team/none@main"}})
    two["edges"].append({"source": "other", "target": "score"})
    issues = client.pipelines.check(Pipeline.from_json(two), base_dir=folder).issues
    assert any(i.node == "score" and i.field == "model" and "one model" in i.message for i in issues)

    # the sbatch export renders it as a job, submitted after the training job (afterok)
    out = client.pipelines.export(pipeline, "sbatch", base_dir=folder)
    assert [f.name for f in out.files] == ["submit.sh", "train.sbatch", "score.sbatch"]
    submit = out.files[0].text
    assert "--dependency=afterok:${sid_0}" in submit.split("# step score")[1]
    job = out.files[2].text
    assert "jupyter_starverse.evals.job" in job and "exp:demo-train" in job


def test_pipeline_run_scores_a_store_model_and_stores_the_report(client: Starverse, folder: Path, tmp_path: Path,
                                                                 tiny_folder: Path) -> None:  # noqa: F811  # fmt: skip
    client.catalog.import_model(tiny_folder, repo="team/tiny@sft")
    data = _dataset(client, tmp_path, 4)
    path = folder / "eval.svpipeline"
    path.write_text(json.dumps(_doc(data, model="hf:team/tiny@sft", params={"limit": 3})))
    pipeline, base = client.pipelines.load(path)
    run = client.pipelines.run(pipeline, base_dir=base)
    assert run.state == "succeeded", run
    step = run.step("score")
    (report,) = client.evals.reports(model="hf:team/tiny@sft")
    assert report.examples == 3 and report.dataset == data and "f1_macro" in report.metrics
    assert step.reason is not None and report.id in step.reason and "f1_macro" in step.reason
