"""A tiny real-architecture LLaVA (CLIP tower + Llama + projector) built offline, a generated image-text
dataset, and stage 1 (tower and LM frozen, projector trained) through the runtime: the loss falls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse import runtime as sv
from jupyter_starverse.runtime import _dist
from jupyter_starverse.runtime._metrics import close_metrics


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    run = tmp_path / "run"
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(run))
    monkeypatch.setenv("STARVERSE_JOB_ID", "vlm-1")
    monkeypatch.setenv("STARVERSE_STEPS", "12")
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()
    yield run
    close_metrics()
    sv.job_env.cache_clear()
    _dist._CONTEXT.clear()


def test_stage1_trains_only_the_projector_of_a_tiny_llava_and_its_loss_falls(job: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    import torch

    from jupyter_starverse.recipes.train.vlm import build_tiny_llava, train_stage1, write_image_text_dataset

    model_dir = build_tiny_llava(tmp_path / "llava")
    assert json.loads((model_dir / "config.json").read_text())["architectures"] == ["LlavaForConditionalGeneration"]
    data = write_image_text_dataset(tmp_path / "pairs", n=16)
    first = json.loads((data / "captions.jsonl").read_text().splitlines()[0])
    assert first == {"image": "images/0000.npy", "caption": "a red square at the left."}
    from transformers import LlavaForConditionalGeneration

    before = LlavaForConditionalGeneration.from_pretrained(model_dir).state_dict()
    losses = train_stage1(model_dir, data, batch=8, lr=5e-2)
    # the language model is random and frozen: only what the projector carries lowers the loss (by ~0.04)
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3]) - 0.05, losses
    ckpt = sv.find_resume_checkpoint()
    assert ckpt is not None and ckpt.step == 11  # checkpointed through the runtime (DCP)
    model = LlavaForConditionalGeneration.from_pretrained(model_dir)
    sv.load_latest(model=model)
    after = model.state_dict()
    changed = {k.split(".")[1] for k in after if not torch.equal(after[k], before[k])}
    assert changed == {"multi_modal_projector"}  # the vision tower and the language model stayed frozen
