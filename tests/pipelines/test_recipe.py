"""A recipe step: the job is what client.recipes makes of the recipe, the model and the data fed to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline


@pytest.fixture
def model(client: Starverse, tmp_path: Path) -> str:
    """A tiny Llama imported into the store as ``hf:tiny/llama``."""
    from tests._tiny import build_tiny_llama

    client.catalog.import_model(build_tiny_llama(tmp_path / "tiny-llama"), repo="tiny/llama")
    return client.catalog.status("hf:tiny/llama").ref


def _doc(dataset: str, model: str | None) -> dict:  # type: ignore[type-arg]
    nodes = [
        {"id": "chat", "kind": "dataset", "params": {"ref": dataset}},
        {"id": "sft", "kind": "recipe", "params": {"recipe": "sft", "nodes": 2, "recipe_params": {"lr": 0.001}}},
    ]
    edges = [{"source": "chat", "target": "sft"}]
    if model is not None:
        nodes.append({"id": "base", "kind": "model", "params": {"ref": model}})
        edges.append({"source": "base", "target": "sft"})
    return {"version": 1, "name": "ft", "nodes": nodes, "edges": edges}


def test_a_recipe_step_is_the_recipe_services_job(client: Starverse, folder: Path, dataset: str, model: str) -> None:
    pipeline = Pipeline.from_json(_doc(dataset, model))
    found = client.pipelines.check(pipeline, base_dir=folder)
    assert found.ok, found.issues
    assert found.info["sft"]["cards"] == 2
    export = client.pipelines.export(pipeline, "sbatch", base_dir=folder)
    script = export.files[1].text
    assert "--recipe sft" in script and "lr=0.001" in script  # the recipe's trainer and its parameter
    assert model in script and dataset in script  # both mounted


def test_a_recipe_step_without_a_model_says_so_on_the_node(client: Starverse, folder: Path, dataset: str) -> None:
    found = client.pipelines.check(Pipeline.from_json(_doc(dataset, None)), base_dir=folder)
    issue = next(i for i in found.issues if i.node == "sft")
    assert issue.field == "model" and "needs a model" in issue.message and "drop a model" in (issue.hint or "")
