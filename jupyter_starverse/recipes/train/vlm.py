"""Stage 1 of a LLaVA-style vision-language reproduction: vision tower and LM frozen, projector trained.

What the seeds' reproductions (CogVLM, InternLM-XComposer, Qwen-VL) run first, at toy size and with
the real architecture: :func:`build_tiny_llava` saves a ``LlavaForConditionalGeneration`` (a tiny
CLIP vision tower, a tiny Llama, the multi-modal projector) built offline from its transformers
config; :func:`write_image_text_dataset` writes the image-text layout the store holds
(``captions.jsonl`` lines ``{"image": "images/0000.npy", "caption": "..."}`` beside ``images/``,
each image a float32 ``3 x H x W`` array); :func:`train_stage1` freezes the vision tower and the
language model and trains the projector on the captions through the runtime (process group, DDP,
checkpoints, metrics). Captions use a character vocabulary (:data:`CHARS`): no tokenizer download.

Run as a job script: ``python -m jupyter_starverse.recipes.train.vlm --model DIR --data DIR``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from jupyter_starverse import runtime as sv

__all__ = ["CHARS", "build_tiny_llava", "train_stage1", "write_image_text_dataset"]

CHARS = " abcdefghijklmnopqrstuvwxyz."
_BOS, _IMAGE = len(CHARS), len(CHARS) + 1  # special ids after the characters
_COLOURS = {"red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0), "white": (1.0, 1.0, 1.0)}
_PLACES = {"left": (0, 0), "right": (0, 1), "top": (1, 0), "bottom": (1, 1)}


def build_tiny_llava(folder: Path, *, image_size: int = 32, patch: int = 8, hidden: int = 32, seed: int = 0) -> Path:
    """A LLaVA model with a tiny CLIP tower and a tiny Llama, random weights, saved with ``save_pretrained``."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(
        hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=2,
        image_size=image_size, patch_size=patch, projection_dim=hidden,
    )  # fmt: skip
    text = LlamaConfig(
        vocab_size=len(CHARS) + 2, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128, bos_token_id=_BOS,
    )  # fmt: skip
    config = LlavaConfig(
        vision_config=vision, text_config=text, image_token_index=_IMAGE, vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )  # fmt: skip
    torch.manual_seed(seed)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    return folder


def write_image_text_dataset(folder: Path, *, n: int = 32, image_size: int = 32, seed: int = 0) -> Path:
    """``n`` generated images (a coloured square in one quadrant) with captions that say what they show."""
    import numpy as np

    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    half = image_size // 2
    for i in range(n):
        colour = list(_COLOURS)[i % len(_COLOURS)]
        place = list(_PLACES)[(i // len(_COLOURS)) % len(_PLACES)]
        image = rng.normal(0.0, 0.05, (3, image_size, image_size)).astype("float32")
        row, col = _PLACES[place]
        for c, v in enumerate(_COLOURS[colour]):
            image[c, row * half : (row + 1) * half, col * half : (col + 1) * half] += v
        name = f"images/{i:04d}.npy"
        np.save(folder / name, image)
        lines.append(json.dumps({"image": name, "caption": f"a {colour} square at the {place}."}))
    (folder / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _encode(caption: str) -> list[int]:
    return [CHARS.index(c) for c in caption.lower() if c in CHARS]


def _records(folder: Path) -> list[tuple[Path, list[int]]]:
    out = []
    for line in (folder / "captions.jsonl").read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append((folder / rec["image"], _encode(rec["caption"])))
    return out


def train_stage1(model_dir: Path, data_dir: Path, *, batch: int = 8, lr: float = 3e-3, seed: int = 0) -> list[float]:
    """Train the projector (vision tower and LM frozen) for the job's steps; returns this rank's losses."""
    import numpy as np
    from transformers import LlavaForConditionalGeneration

    ctx = sv.init()
    model = LlavaForConditionalGeneration.from_pretrained(model_dir)
    inner = model.model
    inner.vision_tower.requires_grad_(False)
    inner.language_model.requires_grad_(False)
    model.lm_head.requires_grad_(False)
    vision: Any = model.config.vision_config
    tokens = (int(vision.image_size) // int(vision.patch_size)) ** 2
    records = _records(data_dir)
    images = torch.stack([torch.from_numpy(np.load(p)) for p, _ in records])
    width = max(len(c) for _, c in records)
    ids, labels = [], []
    for _, caption in records:
        pad = width - len(caption)
        seq = [_BOS, *[_IMAGE] * tokens, *caption, *[0] * pad]
        ids.append(seq)
        labels.append([-100] * (1 + tokens) + caption + [-100] * pad)
    input_ids, targets = torch.tensor(ids), torch.tensor(labels)
    wrapped = sv.wrap(model)
    trained = [p for p in wrapped.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=lr)
    if ctx.is_main:
        frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
        print(
            f"stage 1: projector {sum(p.numel() for p in trained)} parameters trained, vision tower and LM "
            f"({frozen}) frozen; {len(records)} image-text pairs, {tokens} image tokens each",
            flush=True,
        )
    gen = torch.Generator().manual_seed(seed + ctx.rank)
    losses = []
    for step in sv.steps(model=wrapped, optimizer=opt):
        pick = torch.randint(0, len(records), (batch,), generator=gen)
        out = wrapped(
            input_ids=input_ids[pick].to(ctx.device), pixel_values=images[pick].to(ctx.device),
            labels=targets[pick].to(ctx.device),
        )  # fmt: skip
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        sv.log_metrics(step, loss=out.loss.detach())
        losses.append(float(out.loss.detach()))
    return losses


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="vlm-stage1")
    p.add_argument("--model", type=Path, required=True, help="a LLaVA model folder (build_tiny_llava)")
    p.add_argument("--data", type=Path, required=True, help="an image-text folder (captions.jsonl + images/)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args(argv)
    train_stage1(args.model, args.data, batch=args.batch, lr=args.lr)


if __name__ == "__main__":
    main()
