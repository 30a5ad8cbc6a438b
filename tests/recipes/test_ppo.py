"""PPO beside DPO on the same feedback dataset: ``--recipe ppo`` samples answers to its prompts, scores
them with a reward model from the store and reports reward and KL to the reference per step."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import read_metrics
from tests._tiny import publish
from tests.recipes.conftest import MODEL

pytestmark = pytest.mark.slow

SCORER = "hf:tiny/llama-rm"


def _reward_model(store: Starverse, hub: object, tmp_path: Path) -> None:
    """The tiny Llama with a one-logit score head (what the reward recipe saves), pulled into the store."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    base = store.catalog.mount(MODEL)
    rm = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    rm.save_pretrained(tmp_path / "rm")
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp_path / "rm")
    publish(hub, "tiny/llama-rm", tmp_path / "rm")
    store.catalog.pull(SCORER)


def test_ppo_reports_reward_and_kl_per_step_on_the_prompts_dpo_reads(
    store: Starverse, hub: object, tmp_path: Path
) -> None:
    _reward_model(store, hub, tmp_path)
    with pytest.raises(BadInputError, match="reward_model"):
        store.recipes.spec("ppo", model=MODEL, data="pairs@v1")
    small = {"global_batch": 2, "micro_batch": 1, "lr": 3e-3, "warmup_steps": 0, "max_new_tokens": 8}
    spec = store.recipes.spec(
        "ppo", model=MODEL, data="pairs@v1", params={**small, "reward_model": SCORER}, steps=6, procs_per_node=1
    )
    assert SCORER + "@" in " ".join(spec.mounts)  # mounted at the version it is now
    dpo = store.recipes.spec("dpo", model=MODEL, data="pairs@v1", steps=6)  # the switch: the same --data
    assert dpo.mounts[1] == spec.mounts[1]
    done = store.backend("local").wait(store.launch(spec).id, timeout=240)
    log = Path(done.experiment_dir, "logs", "rank0.log")
    assert done.state.value == "succeeded", (done.reason, log.read_text()[-3000:] if log.exists() else "")
    points = read_metrics(Path(done.experiment_dir), from_logs=False)
    assert [p.step for p in points] == list(range(6))
    reward = [p.values["reward"] for p in points]
    kl = [p.values["kl"] for p in points]
    assert kl[0] == pytest.approx(0.0, abs=1e-4)  # the policy starts as the reference
    assert max(abs(x) for x in kl[1:]) > 1e-3  # and moves away from it, visibly per step
    assert sum(reward[3:]) > sum(reward[:3])  # the reward model's score rises
    assert (Path(done.experiment_dir) / "model" / "config.json").is_file()
