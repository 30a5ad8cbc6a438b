"""`starverse recipes`, `%sv recipes`, `--recipe` on launch and `%%sv train`, and the REST routes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_starverse.cli import main
from jupyter_starverse.client import LaunchPreview, Starverse
from jupyter_starverse.recipes import RecipeInfo
from tests.recipes.conftest import MODEL


def test_cli_lists_and_shows_recipes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "ls"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:6] == ["NAME", "OBJECTIVE", "RUNNER", "RESOURCES", "HOURS", "COST"]
    assert "internlm-xcomposer" in out and "1,198,080.00 CNY" in out
    assert main(["recipes", "show", "kto", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["objective"] == "kto" and {p["name"] for p in shown["params"]} >= {"beta", "desirable_weight"}
    assert main(["recipes", "show", "nope"]) != 0
    assert "no recipe 'nope'" in capsys.readouterr().err


def test_launch_dry_run_with_a_recipe_prints_the_plan(store: Starverse, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "launch",
        "--recipe",
        "sft",
        "--model",
        MODEL,
        "--data",
        "chat",
        "--procs",
        "2",
        "--param",
        "global_batch=8",
        "--param",
        "micro_batch=2",
        "--steps",
        "5",
        "--dry-run",
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "recipe sft (sft) on hf:tiny/llama@main: 5 steps, global batch 8 = micro batch 2 x 2 ranks x 2" in err
    assert "recipes/train/lm.py" in out and "--objective" in out  # the plan itself, on stdout
    assert main(["launch", "--model", MODEL, "--dry-run"]) != 0
    assert "--model is an option of --recipe" in capsys.readouterr().err


def test_magics_list_recipes_and_a_train_cell_takes_a_recipe(store: Starverse, ip: Any) -> None:
    info = ip.run_line_magic("sv", "recipes show dpo")
    assert isinstance(info, RecipeInfo) and info.recipe.reference_model
    preview = ip.run_line_magic("sv", f"train --recipe kto --model {MODEL} --data unpaired --dry-run")
    assert isinstance(preview, LaunchPreview) and preview.recipe is not None
    assert preview.recipe.objective == "kto" and "recipes/train/lm.py" in preview.rendered
    own = ip.run_cell_magic(
        "sv",
        f"train --recipe cpt --model {MODEL} --data corpus --dry-run",
        "from jupyter_starverse.recipes.train import main\nmain()\n",
    )
    assert "train.py" in own.rendered and "--recipe" in own.rendered  # the cell runs with the recipe's arguments


async def test_rest_lists_shows_and_previews_recipes(store: Starverse, jp_fetch: Any) -> None:
    listing = json.loads((await jp_fetch("jupyter-starverse", "recipes")).body)
    assert [r["name"] for r in listing][:5] == ["cpt", "sft", "dpo", "kto", "reward"]
    one = json.loads((await jp_fetch("jupyter-starverse", "recipes", "cogvlm-stage1")).body)
    assert one["cost"]["amount"] == "230.40" and one["reproduction"]["reported"]["loss_end"] == 2.05
    body = {"model": MODEL, "data": ["pairs"], "params": {"beta": 0.3}, "job": {"procs_per_node": 2, "steps": 4}}
    reply = await jp_fetch("jupyter-starverse", "recipes", "dpo", "preview", method="POST", body=json.dumps(body))
    preview = json.loads(reply.body)
    assert preview["recipe"]["batch"]["world_size"] == 2 and preview["recipe"]["params"]["beta"] == "0.3"
    with pytest.raises(HTTPClientError) as e:
        bad = {**body, "job": {"script": "x.py"}}
        await jp_fetch("jupyter-starverse", "recipes", "dpo", "preview", method="POST", body=json.dumps(bad))
    assert e.value.code == 400
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("jupyter-starverse", "recipes", "nope")
    assert e.value.code == 404


async def test_the_panels_one_click_reproduction_previews_on_a_store_without_its_small_assets(jp_fetch: Any) -> None:
    """The panel's Launch form sends what it filled in (the tiny model, the generated data, one CPU process):
    a store that does not hold them yet builds them, as `--small` without --model/--data does."""
    from jupyter_starverse.recipes import SMALL_VLM_DATA, SMALL_VLM_MODEL

    body = {
        "model": SMALL_VLM_MODEL,
        "data": [SMALL_VLM_DATA],
        "small": True,
        "job": {"nodes": 1, "procs_per_node": 1, "accelerator": "cpu"},
    }
    reply = await jp_fetch(
        "jupyter-starverse", "recipes", "cogvlm-stage1", "preview", method="POST", body=json.dumps(body)
    )
    preview = json.loads(reply.body)
    plan = preview["rendered"]
    assert "--nnodes=1" in plan and "--nproc-per-node=1" in plan and "STARVERSE_ACCELERATOR: cpu" in plan
    assert f"- {SMALL_VLM_MODEL}\n" in plan and f"- {SMALL_VLM_DATA}\n" in plan  # both in the store now
    assert "- steps=12\n" in plan and "- train=multi_modal_projector\n" in plan  # the small stage-1 set-up
