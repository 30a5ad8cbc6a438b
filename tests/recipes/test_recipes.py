"""The recipe catalog, the data formats, the batch plan and resolving a recipe into a JobSpec (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.recipes import (
    RECIPES,
    TRAIN_SCRIPT,
    LabeledCompletion,
    PreferencePair,
    batch_plan,
    get_recipe,
    read_records,
    write_jsonl,
)
from tests.recipes.conftest import MODEL


def test_every_recipe_is_data_with_defaults_and_a_cost(client: Starverse) -> None:
    listing = client.recipes.ls()
    assert [i.recipe.name for i in listing.items] == list(RECIPES)
    text = str(listing)
    assert "cogvlm-stage1" in text and "230.40 CNY" in text  # 32 x rtx4090 x 4 h at 1.80
    rows = {row["name"]: row for row in listing.to_json()}
    assert rows["qwen-vl-stage1"]["cost"]["amount"] == "1198080.00"  # 512 x a100-80g x 15 days at 6.50
    assert rows["qwen-vl-stage1"]["reproduction"]["schedule"]["steps"] == 50000
    assert rows["dpo"]["reference_model"] and rows["kto"]["data_format"].startswith("unpaired")
    with pytest.raises(NotFoundError, match="no recipe 'nope'") as e:
        get_recipe("nope")
    assert "cpt" in (e.value.hint or "")


def test_a_recipe_is_a_table_of_the_catalog_file_typed_on_load() -> None:
    from jupyter_starverse.recipes._catalog import _TABLE, load_recipes, tomllib

    text = """
[recipes.my-sft]
title = "Our SFT"
objective = "sft"
description = "SFT at our defaults"
data_format = "*.jsonl"
params = ["common", "beta", { name = "rank", default = 8, kind = "int", help = "LoRA rank" }]
defaults = { lr = 3e-5, steps = 200 }
templates = ["ddp"]
"""
    table = {**_TABLE, "recipes": tomllib.loads(text)["recipes"]}
    [mine] = load_recipes(table).values()
    params = {p.name: p for p in mine.params}
    assert mine.name == "my-sft" and mine.templates == ("ddp",)
    assert params["lr"].default == 3e-5 and params["steps"].default == 200 and params["seed"].default == 0
    assert params["beta"].default == 0.1 and params["rank"].parse("16") == 16
    assert list(params)[:2] == ["lr", "min_lr_ratio"] and list(params)[-1] == "rank"
    with pytest.raises(ValueError, match="does not have: \\['lora_alpha'\\]"):
        load_recipes({**table, "recipes": {"x": {**table["recipes"]["my-sft"], "defaults": {"lora_alpha": 16}}}})
    with pytest.raises(BadInputError, match="objective 'sft2'"):
        load_recipes({**table, "recipes": {"x": {**table["recipes"]["my-sft"], "objective": "sft2"}}})


def test_parameters_parse_by_type_and_unknown_ones_are_refused() -> None:
    cpt = get_recipe("cpt")
    values = cpt.resolve({"lr": "3e-4", "pack": "false", "global_batch": "64"})
    assert (values["lr"], values["pack"], values["global_batch"], values["seq_len"]) == (3e-4, False, 64, 512)
    with pytest.raises(BadInputError, match="no parameter 'lrr'"):
        cpt.resolve({"lrr": 1})
    with pytest.raises(BadInputError, match="is not a float"):
        cpt.resolve({"lr": "fast"})
    with pytest.raises(BadInputError, match="not one of auto, bf16, fp16, fp32"):
        cpt.resolve({"precision": "int3"})


def test_the_batch_plan_keeps_the_global_batch_and_recomputes_accumulation() -> None:
    eight = batch_plan(global_batch=32, micro_batch=4, world_size=8)
    two = batch_plan(global_batch=32, micro_batch=4, world_size=2)
    assert (eight.accumulation, two.accumulation) == (1, 4)
    assert two.change_from(eight) == (
        "global batch 32 kept; world size 8 -> 2, micro batch 4 -> 4, accumulation 1 -> 4"
    )
    odd = batch_plan(global_batch=12, micro_batch=5, world_size=2)  # 6 per rank: micro 3, 2 steps
    assert (odd.micro_batch, odd.accumulation) == (3, 2) and "lowered from 5" in str(odd)
    with pytest.raises(BadInputError, match="cannot be split over 3 ranks"):
        batch_plan(global_batch=32, micro_batch=4, world_size=3)


def test_pairs_and_unpaired_records_round_trip_and_bad_lines_name_file_and_line(tmp_path: Path) -> None:
    pairs = [PreferencePair("q?", "good", "bad")]
    write_jsonl(tmp_path / "p" / "pairs.jsonl", pairs)
    assert read_records(tmp_path / "p", PreferencePair) == pairs
    chat = {"prompt": [{"role": "user", "content": "q?"}], "completion": "a", "label": False}
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "x.jsonl").write_text(json.dumps(chat) + "\n\n")
    (record,) = read_records(tmp_path / "u", LabeledCompletion)
    assert record.label is False and record.to_json() == chat
    (tmp_path / "u" / "y.jsonl").write_text('{"prompt": "q", "completion": "a", "label": "yes"}\n')
    with pytest.raises(BadInputError, match=r"y.jsonl, line 1: 'label' must be true or false"):
        read_records(tmp_path / "u", LabeledCompletion)
    (tmp_path / "p" / "pairs.jsonl").write_text('{"prompt": "q", "chosen": ""}\n')
    with pytest.raises(BadInputError, match=r"pairs.jsonl, line 1: 'chosen' must be non-empty text"):
        read_records(tmp_path / "p", PreferencePair)


def test_a_recipe_resolves_into_a_jobspec_that_mounts_model_and_data(store: Starverse) -> None:
    spec = store.recipes.align("kto", model=MODEL, data="unpaired", params={"beta": 0.2}, procs_per_node=2)
    assert spec.script == str(TRAIN_SCRIPT) and spec.mounts == ("hf:tiny/llama@main", "unpaired@v1")
    assert ["--objective", "kto"] == list(spec.args[2:4]) and "beta=0.2" in spec.args
    assert spec.steps == 1000 and "steps=1000" in spec.args
    plan = store.recipes.plan(spec)
    assert plan is not None and (plan.batch.world_size, plan.batch.accumulation) == (2, 2)
    preview = store.preview(spec)
    assert preview.recipe == plan and "global batch 16 = micro batch 4 x 2 ranks x 2" in str(preview)
    assert store.recipes.spec("cpt", model=MODEL, data="corpus", steps=20).args.count("steps=20") == 1
    with pytest.raises(BadInputError, match="dpo or kto"):
        store.recipes.align("ppo", model=MODEL, data="pairs")
    with pytest.raises(BadInputError, match="not a store model"):
        store.recipes.spec("sft", model="tiny/llama", data="chat")
    with pytest.raises(NotFoundError):
        store.recipes.spec("sft", model=MODEL, data="no-such-data")
    with pytest.raises(BadInputError, match="longer than the schedule"):
        store.recipes.spec("cpt", model=MODEL, data="corpus", params={"steps": 4}, steps=8)
    with pytest.raises(BadInputError, match="cannot be split over 3 ranks"):
        store.recipes.spec("cpt", model=MODEL, data="corpus", procs_per_node=3)
    small = store.recipes.spec("cogvlm-stage1", model=MODEL, data="chat", small=True)
    assert small.steps == 12 and "global_batch=8" in small.args and "--objective" in small.args
    assert small.env["STARVERSE_REFERENCE_CURVE"] == "cogvlm-stage1"  # drawn beside the article's curve ...
    assert small.env["STARVERSE_REFERENCE_CHECK"] == "draw"  # ... but a toy model is not held against it
    full = store.recipes.spec("cogvlm-stage1", model=MODEL, data="chat")
    assert full.env["STARVERSE_REFERENCE_CURVE"] == "cogvlm-stage1" and "STARVERSE_REFERENCE_CHECK" not in full.env
    assert "STARVERSE_REFERENCE_CURVE" not in store.recipes.spec("cpt", model=MODEL, data="corpus").env
