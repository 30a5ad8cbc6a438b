"""Recipes really train the tiny Llama pulled into the store, on 2 local processes (gloo).

Every job is launched through the facade (``client.recipes.spec`` -> ``client.launch``), loads
the model offline from the store's HF cache on every rank, and its loss must fall.
"""

from __future__ import annotations

import json
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
    assert lineage.record["base_model"] == "hf:tiny/llama@main" and lineage.record["recipe"] == "cpt"
    assert [d["ref"] for d in lineage.record["data"]] == ["corpus@v1"] and lineage.record["job_id"] == done.id
    assert "base model: hf:tiny/llama@main" in str(lineage) and "data: corpus@v1" in str(lineage)
    assert store.recipes.lineage(MODEL).record == {}  # pulled from the Hub: nothing recorded
    again = AutoModelForCausalLM.from_pretrained(store.catalog.mount("hf:tiny/llama-cpt@v1"), local_files_only=True)
    assert all(bool((a == b).all()) for a, b in zip(again.parameters(), tuned.parameters()))


def test_a_resume_on_another_world_size_keeps_the_global_batch_and_the_schedule(store: Starverse) -> None:
    # the first part runs from a %%sv train cell body that adds its own code around the recipe's trainer
    cell = (
        "from jupyter_starverse.recipes.train import main\n"
        "seen = []\n"
        "main(on_step=lambda step, metrics: seen.append(step))\n"
        "print('the cell saw steps', seen, flush=True)\n"
    )
    first = run(store, "cpt", "corpus@v1", steps=3, params={"steps": 6}, experiment="cpt-resume", code=cell)
    assert "the cell saw steps [0, 1, 2]" in Path(first.experiment_dir, "logs", "rank0.log").read_text()
    assert not (Path(first.experiment_dir) / "model").exists()  # 3 of 6 steps: no model folder yet
    spec = store.recipes.spec(
        "cpt",
        model=MODEL,
        data="corpus@v1",
        params={**SMALL, "steps": 6},
        steps=6,
        procs_per_node=1,
        experiment="cpt-resume",
        resume=True,
    )
    plan = store.recipes.plan(spec)
    assert plan is not None and plan.resume_step == 3
    assert (plan.batch.accumulation, plan.resumed_from and plan.resumed_from.accumulation) == (2, 1)
    assert "global batch 4 kept; world size 2 -> 1" in str(plan) and "accumulation 1 -> 2" in str(plan)
    assert "accumulation 1 -> 2" in str(store.preview(spec))  # the launch preview says so too
    done = store.backend("local").wait(store.launch(spec).id, timeout=240)
    assert done.state.value == "succeeded", done.reason
    log = Path(done.experiment_dir, "logs", "rank0.log").read_text()
    assert "(step 2, written by world size 2)" in log
    assert "accumulation 1 -> 2; schedule continues at step 3" in log
    points = {p.step: p.values for p in read_metrics(Path(done.experiment_dir), from_logs=False)}
    assert sorted(points) == [3, 4, 5] and points[3]["accumulation"] == 2
    before = {p.step: p.values for p in read_metrics(Path(first.experiment_dir), from_logs=False)}
    assert before[2]["lr"] > points[3]["lr"] > points[5]["lr"]  # the cosine went on where it stopped
    assert store.recipes.result_folder(done).is_dir()


def test_sft_from_the_published_cpt_model_under_fsdp_learns_the_answers(store: Starverse) -> None:
    cpt = run(store, "cpt", "corpus@v1", steps=4)
    store.recipes.publish(cpt, repo="tiny/llama-cpt@v1")
    done = run(store, "sft", "chat@v1", steps=8, model="hf:tiny/llama-cpt@v1", template="fsdp")
    curve = losses(done)
    assert curve[-1] < curve[0] - 0.5, curve
    lineage = json.loads((store.recipes.result_folder(done) / "starverse-lineage.json").read_text())
    assert lineage["base_model"] == "hf:tiny/llama-cpt@v1" and lineage["objective"] == "sft"


@pytest.mark.parametrize(
    ("recipe", "data", "extra"),
    [("dpo", "pairs@v1", "accuracy"), ("kto", "unpaired@v1", "reward_good"), ("reward", "pairs@v1", "accuracy")],
)
def test_alignment_and_reward_recipes_on_two_processes(store: Starverse, recipe: str, data: str, extra: str) -> None:
    done = run(store, recipe, data, steps=6)
    curve = losses(done)
    assert curve[-1] < curve[0] - 0.1, curve
    assert extra in read_metrics(Path(done.experiment_dir), from_logs=False)[-1].values
    folder = store.recipes.result_folder(done)
    if recipe == "reward":
        from transformers import AutoModelForSequenceClassification

        assert AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True).config.num_labels == 1
