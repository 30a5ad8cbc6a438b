"""Alignment from feedback: a DPO job on the pairs of a feedback version, whose margin rises."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.experiments import read_metrics

SMALL = {"global_batch": 4, "micro_batch": 2, "seq_len": 32, "lr": 3e-3, "warmup_steps": 1}


def _votes(client: Starverse) -> None:
    for i in range(4):
        prompt = f"question {i}: what do we train?"
        client.feedback.record("team", model="hf:team/tiny@main", prompt=prompt, answer="large models on rented GPUs.",
                               vote="up", answer_id=f"good{i}", user="ana")  # fmt: skip
        client.feedback.record("team", model="hf:team/tiny@main", prompt=prompt, answer="nothing at all, sorry.",
                               vote="down", answer_id=f"bad{i}", user="bo")  # fmt: skip


@pytest.mark.slow
def test_dpo_from_a_feedback_version_raises_the_margin_and_publishes_with_lineage(
    client: Starverse, tiny_ref: str
) -> None:
    _votes(client)
    spec = client.align("team", model=tiny_ref, method="dpo", params=SMALL, steps=8, procs_per_node=1)
    assert "team-pairs@1" in spec.mounts and tiny_ref in spec.mounts
    done = client.backend("local").wait(client.launch(spec).id, timeout=240)
    logs = Path(done.experiment_dir, "logs", "rank0.log")
    assert done.state.value == "succeeded", (done.reason, logs.read_text()[-3000:] if logs.exists() else "")
    margins = [
        p.values["margin"] for p in read_metrics(Path(done.experiment_dir), from_logs=False) if "margin" in p.values
    ]
    assert len(margins) >= 4 and margins[-1] > margins[0], margins
    entry = client.recipes.publish(done, repo="team/tiny@dpo-1")
    lineage = client.recipes.lineage(entry.ref)
    assert "team-pairs@1" in str(lineage.to_json())


def test_align_previews_kto_and_reward_jobs(client: Starverse, tiny_ref: str) -> None:
    _votes(client)
    kto = client.align("team", model=tiny_ref, method="kto", params=SMALL, steps=4)
    assert "team-labels@1" in kto.mounts
    reward = client.align("team@1", model=tiny_ref, method="reward", params=SMALL, steps=4)
    assert "team-pairs@1" in reward.mounts and "reward" in " ".join(reward.args)
    assert "team-pairs@1" in client.preview(reward).rendered
