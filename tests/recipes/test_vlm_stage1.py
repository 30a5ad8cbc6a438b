"""The vision-language reproductions start with one command: `starverse launch --recipe cogvlm-stage1 --small`
builds a tiny real-architecture LLaVA (CLIP tower + Llama + projector) and a generated image-text dataset,
imports both into the store, and trains stage 1 (tower and LM frozen, projector trained) on the local
backend under the monitor, with checkpoints; the loss falls. The other reproductions render their own stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.recipes import SMALL_VLM_DATA, SMALL_VLM_MODEL


def _param(args: tuple[str, ...], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{name}="))


def test_cogvlm_small_launches_without_model_or_data_and_trains_only_the_projector(
    client: Starverse, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    import torch
    from transformers import LlavaForConditionalGeneration

    assert main(["launch", "--recipe", "cogvlm-stage1", "--small", "--procs", "1", "--json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["id"]
    done = client.backend("local").wait(job_id, timeout=240)
    run = Path(done.experiment_dir)
    logs = run / "logs" / "rank0.log"
    assert done.state.value == "succeeded", (done.reason, logs.read_text()[-3000:] if logs.exists() else "")
    assert set(done.spec.mounts) == {SMALL_VLM_MODEL, SMALL_VLM_DATA}  # real store entries, mounted
    assert "training multi_modal_projector" in logs.read_text()
    losses = [p.values["loss"] for p in read_metrics(run, from_logs=False) if "loss" in p.values]
    # the language model is random and frozen: only what the projector carries lowers the loss (3.39 -> 3.33)
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3]) - 0.1, losses
    assert (run / "checkpoints" / "step-00000011").is_dir()  # checkpointed through the runtime (DCP)
    before = LlavaForConditionalGeneration.from_pretrained(client.catalog.mount(SMALL_VLM_MODEL)).state_dict()
    after = LlavaForConditionalGeneration.from_pretrained(run / "model").state_dict()
    changed = {k.split(".")[1] for k in after if not torch.equal(after[k], before[k])}
    assert changed == {"multi_modal_projector"}  # the vision tower and the language model stayed frozen
    # idempotent: the next --small finds both in the store, and the other stages train their own modules
    entries = len(client.catalog.ls())
    qwen = client.recipes.spec("qwen-vl-stage1", small=True)
    xcomposer = client.recipes.spec("internlm-xcomposer", small=True)
    assert len(client.catalog.ls()) == entries and qwen.mounts == done.spec.mounts
    assert _param(qwen.args, "train") == "vision_tower,multi_modal_projector"
    assert _param(xcomposer.args, "train") == "multi_modal_projector,language_model,lm_head"
    assert qwen.args[qwen.args.index("--objective") + 1] == "vlm" and qwen.steps == 12


def test_reproductions_name_the_full_size_model_and_topology(capsys: pytest.CaptureFixture[str]) -> None:
    expected = {
        "cogvlm-stage1": ("hf:THUDM/cogvlm-chat-hf", 4, 8, "projector"),
        "qwen-vl-stage1": ("hf:Qwen/Qwen-VL", 64, 8, "vision tower and the projector"),
        "internlm-xcomposer": ("hf:internlm/internlm-xcomposer-7b", 64, 8, "projector and the language model"),
    }
    for name, (model, nodes, gpus, trains) in expected.items():
        assert main(["recipes", "show", name, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        repro = shown["reproduction"]
        assert (repro["model_ref"], shown["resources"]["nodes"], shown["resources"]["procs_per_node"]) == (
            model,
            nodes,
            gpus,
        )
        assert trains in repro["trains"] and repro["small_model"] == SMALL_VLM_MODEL
        assert main(["recipes", "show", name]) == 0
        assert f"full size: --model {model}" in capsys.readouterr().out


def test_image_text_data_reads_png_and_jpeg_files_of_any_size_and_npy_arrays(tmp_path: Path) -> None:
    """What a user's store dataset holds (PNG/JPEG files, any size) reaches the tower resized and normalised."""
    import numpy as np
    from PIL import Image

    from jupyter_starverse.errors import BadInputError
    from jupyter_starverse.recipes.train.vlm import image_normalisation, load_image, write_image_text_dataset

    folder = write_image_text_dataset(tmp_path / "png", n=4, image_size=32)
    lines = [json.loads(ln) for ln in (folder / "captions.jsonl").read_text().splitlines()]
    assert [ln["image"] for ln in lines] == [f"images/{i:04d}.png" for i in range(4)]
    assert lines[0]["caption"] == "a red square at the left."
    red = load_image(folder / lines[0]["image"], 32)  # top-left quadrant red, the rest dark: CLIP-normalised
    mean, std = image_normalisation(tmp_path)  # no preprocessor_config.json: CLIP's
    assert red.shape == (3, 32, 32) and red.dtype == np.float32
    assert red[0, :16, :16].mean() == pytest.approx((1 - mean[0]) / std[0], abs=0.1)
    assert red[1, :16, :16].mean() == pytest.approx((0 - mean[1]) / std[1], abs=0.1)
    # a large JPEG is resized to the tower (bicubic); the model's own normalisation is read from its folder
    big = np.zeros((96, 128, 3), dtype="uint8")
    big[:, :64] = (0, 0, 255)
    Image.fromarray(big).save(tmp_path / "big.jpg", quality=95)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.5] * 3, "image_std": [0.5] * 3}))
    mean, std = image_normalisation(tmp_path)
    blue = load_image(tmp_path / "big.jpg", 32, mean=mean, std=std)
    assert blue.shape == (3, 32, 32) and blue[2, :, :12].mean() == pytest.approx(1.0, abs=0.05)  # (1 - .5) / .5
    assert blue[2, :, 20:].mean() == pytest.approx(-1.0, abs=0.05)
    arrays = write_image_text_dataset(tmp_path / "npy", n=2, image_size=32, image_format="npy")
    assert load_image(arrays / "images/0001.npy", 32).shape == (3, 32, 32)  # taken as it is
    with pytest.raises(BadInputError, match=r"the vision tower takes \(3, 16, 16\)") as e:
        load_image(arrays / "images/0001.npy", 16)
    assert "PNG/JPEG" in (e.value.hint or "")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(BadInputError, match="not a readable image"):
        load_image(tmp_path / "broken.png", 32)
