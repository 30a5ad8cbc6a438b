"""Recipes really train the tiny Llama pulled into the store, on 2 local processes (gloo).

Every job is launched through the facade (``client.recipes.spec`` -> ``client.launch``), loads
the model offline from the store's HF cache on every rank, and its loss must fall.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import Job
from tests.recipes.conftest import MODEL

pytestmark = pytest.mark.slow

SMALL = {"global_batch": 4, "micro_batch": 2, "seq_len": 32, "lr": 3e-3, "warmup_steps": 1}


def run(
    client: Starverse,
    recipe: str,
    data: str,
    *,
    steps: int = 6,
    procs: int = 2,
    model: str = MODEL,
    params: dict[str, Any] | None = None,
    **job: Any,
) -> Job:
    spec = client.recipes.spec(
        recipe, model=model, data=data, params={**SMALL, **(params or {})}, steps=steps, procs_per_node=procs, **job
    )
    done = client.backend("local").wait(client.launch(spec).id, timeout=240)
    logs = Path(done.experiment_dir, "logs", "rank0.log")
    assert done.state.value == "succeeded", (done.reason, logs.read_text()[-3000:] if logs.exists() else "")
    return done


def losses(job: Job, key: str = "loss") -> list[float]:
    return [p.values[key] for p in read_metrics(Path(job.experiment_dir), from_logs=False) if key in p.values]


def test_cpt_on_two_processes_saves_a_model_the_store_imports_with_its_lineage(store: Starverse) -> None:
    done = run(store, "cpt", "corpus@v1", steps=8)
    curve = losses(done)
    assert len(curve) == 8 and curve[-1] < curve[0] - 0.3, curve
    points = read_metrics(Path(done.experiment_dir), from_logs=False)
    assert all(p.values["tokens_per_s"] > 0 and p.values["tflops_per_card"] > 0 for p in points)
    assert {p.values["accumulation"] for p in points} == {1.0}  # 4 = 2 micro x 2 ranks x 1
    folder = store.recipes.result_folder(done)
    assert {"config.json", "tokenizer.json", "starverse-lineage.json"} <= {p.name for p in folder.iterdir()}

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tuned = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    assert AutoTokenizer.from_pretrained(folder, local_files_only=True).chat_template
    base = AutoModelForCausalLM.from_pretrained(store.catalog.mount(MODEL), local_files_only=True)
    assert any((a - b).abs().max() > 0 for a, b in zip(tuned.parameters(), base.parameters()))

    entry = store.recipes.publish(done, repo="tiny/llama-cpt@v1")
    assert entry.ref == "hf:tiny/llama-cpt@v1"
    lineage = store.recipes.lineage("hf:tiny/llama-cpt@v1")
    assert lineage["base_model"] == "hf:tiny/llama@main" and lineage["recipe"] == "cpt"
    assert [d["ref"] for d in lineage["data"]] == ["corpus@v1"] and lineage["job_id"] == done.id
    again = AutoModelForCausalLM.from_pretrained(store.catalog.mount("hf:tiny/llama-cpt@v1"), local_files_only=True)
    assert all(bool((a == b).all()) for a, b in zip(again.parameters(), tuned.parameters()))
