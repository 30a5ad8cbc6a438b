"""A vision-language stage of the seeds' reproductions (CogVLM, InternLM-XComposer, Qwen-VL) on the runtime.

:func:`run_stage` is what a reproduction recipe's job runs (objective ``vlm``, through ``lm.py`` and
the recipe trainer): the modules named by ``--param train=`` are trained (the projector for stage 1,
as the papers do; the vision tower or the LM too where a stage says so), everything else frozen, with
the recipe's schedule, batch plan and accumulation, checkpoints and metrics. The model is any
``AutoModelForImageTextToText`` checkpoint in the LLaVA layout.

For ``--small``: :func:`build_tiny_llava` saves a ``LlavaForConditionalGeneration`` (a tiny CLIP
vision tower, a tiny Llama, the multi-modal projector) built offline from its transformers config
with random weights; :func:`write_image_text_dataset` writes the image-text layout the store holds
(``captions.jsonl`` lines ``{"image": "images/0000.png", "caption": "..."}`` beside ``images/``;
PNG/JPEG files of any size are resized to the tower and normalised as the model's image processor
says, ``.npy`` float32 ``3 x H x W`` arrays are taken as they are). Captions use a character
vocabulary (:data:`CHARS`) when the model folder has no tokenizer: no tokenizer download.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from jupyter_starverse import runtime as sv
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import BatchPlan

from ._data import Sampler
from ._steps import all_sum as _all_sum
from ._steps import no_sync as _no_sync

__all__ = [
    "CHARS",
    "DATA_FORMAT",
    "IMAGE_SUFFIXES",
    "build_tiny_llava",
    "freeze_for_stage",
    "image_normalisation",
    "load_image",
    "run_stage",
    "write_image_text_dataset",
]

#: The image-text layout a stage reads from each store dataset folder.
DATA_FORMAT = (
    'captions.jsonl lines {"image": "images/0000.png", "caption": "..."} beside images/ '
    "(PNG/JPEG/WebP files of any size, or float32 3 x H x W .npy arrays at the tower's size)"
)
#: Image files read with Pillow (resized to the tower, normalised as the model's image processor says).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")
#: CLIP's normalisation, used when the model folder has no ``preprocessor_config.json``.
_CLIP_MEAN, _CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)

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


def write_image_text_dataset(
    folder: Path, *, n: int = 32, image_size: int = 32, seed: int = 0, image_format: str = "png"
) -> Path:
    """``n`` generated images (a coloured square in one quadrant) with captions that say what they show,
    as image files (``png``, ``jpeg``: what a user's dataset holds) or ``npy`` arrays."""
    import numpy as np

    if image_format not in ("png", "jpeg", "npy"):
        raise BadInputError(f"image format {image_format!r}", field="image_format", hint="png, jpeg or npy")
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
        name = f"images/{i:04d}.{'jpg' if image_format == 'jpeg' else image_format}"
        if image_format == "npy":
            np.save(folder / name, image)
        else:
            from PIL import Image

            pixels = (np.clip(image, 0.0, 1.0).transpose(1, 2, 0) * 255).round().astype("uint8")
            Image.fromarray(pixels, "RGB").save(folder / name)
        lines.append(json.dumps({"image": name, "caption": f"a {colour} square at the {place}."}))
    (folder / "captions.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _records(folder: Path) -> list[tuple[Path, str]]:
    lines = [ln for ln in (folder / "captions.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [(folder / rec["image"], str(rec["caption"])) for rec in map(json.loads, lines)]


def image_normalisation(base: Path) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) per channel from the model's ``preprocessor_config.json``, else CLIP's."""
    try:
        cfg = json.loads((base / "preprocessor_config.json").read_text())
        mean, std = tuple(float(v) for v in cfg["image_mean"]), tuple(float(v) for v in cfg["image_std"])
    except (OSError, ValueError, KeyError, TypeError):
        return _CLIP_MEAN, _CLIP_STD
    return (mean, std) if len(mean) == len(std) == 3 else (_CLIP_MEAN, _CLIP_STD)


def load_image(path: Path, size: int, *, mean: Sequence[float] = _CLIP_MEAN, std: Sequence[float] = _CLIP_STD) -> Any:
    """A float32 ``3 x size x size`` array for the vision tower: an image file (PNG, JPEG, ...) converted to RGB,
    resized (bicubic) and normalised by ``mean``/``std``, or an ``.npy`` array taken as it is (already processed)."""
    import numpy as np

    if path.suffix.lower() == ".npy":
        image = np.load(path)
        if image.shape != (3, size, size):
            raise BadInputError(
                f"{path}: image of shape {image.shape}, the vision tower takes (3, {size}, {size})",
                field="data",
                hint="store the images as PNG/JPEG files (resized here), or .npy arrays at the tower's image_size",
            )
        return image.astype("float32")
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise BadInputError(f"{path.name}: not an image file this stage reads", field="data", hint=DATA_FORMAT)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
    except (OSError, UnidentifiedImageError) as e:
        raise BadInputError(f"{path.name}: not a readable image ({e})", field="data", hint=DATA_FORMAT) from e
    pixels = np.asarray(rgb, dtype="float32").transpose(2, 0, 1) / 255.0
    m = np.asarray(mean, dtype="float32").reshape(3, 1, 1)
    d = np.asarray(std, dtype="float32").reshape(3, 1, 1)
    return (pixels - m) / d


def _caption_ids(base: Path) -> tuple[Any, int]:
    """(caption -> token ids, bos id): the model's tokenizer when its folder has one, else :data:`CHARS`."""
    if (base / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(base)
        return (lambda text: tok(text, add_special_tokens=False).input_ids), int(tok.bos_token_id or 0)
    return (lambda text: [CHARS.index(c) for c in text.lower() if c in CHARS]), _BOS


def freeze_for_stage(model: Any, train: Sequence[str]) -> tuple[int, int]:
    """Freeze every parameter but those under a module named in ``train`` (``multi_modal_projector``,
    ``vision_tower``, ...); returns (trained, frozen) parameter counts."""
    trained = frozen = 0
    for name, param in model.named_parameters():
        keep = any(t in name.split(".") for t in train)
        param.requires_grad_(keep)
        trained += param.numel() if keep else 0
        frozen += 0 if keep else param.numel()
    if trained == 0:
        raise BadInputError(
            f"no module of the model is named {', '.join(train)}",
            field="train",
            hint="--param train=multi_modal_projector (LLaVA layout), or vision_tower,multi_modal_projector",
        )
    return trained, frozen


def run_stage(
    args: Any,
    *,
    base: Path,
    folders: list[Path],
    plan: BatchPlan,
    until: int,
    total: int,
    schedule: Callable[[Any, int], Callable[[int], float]],
    on_step: Callable[[int, dict[str, float]], Any] | None = None,
) -> Any:
    """A vision-language stage on the runtime: the modules named by ``--param train=`` trained, the rest frozen,
    the recipe's schedule and batch plan, checkpoints and metrics; returns the model after its last step
    (``None`` when it stopped early)."""
    from transformers import AutoModelForImageTextToText

    p = args.params
    ctx = sv.init()
    train = [t.strip() for t in str(p.get("train", "multi_modal_projector")).split(",") if t.strip()]
    torch.manual_seed(int(p.get("seed", 0)))
    model: Any = AutoModelForImageTextToText.from_pretrained(base)
    n_trained, n_frozen = freeze_for_stage(model, train)
    vision: Any = model.config.vision_config
    size = int(vision.image_size)
    tokens = (size // int(vision.patch_size)) ** 2
    if getattr(model.config, "vision_feature_select_strategy", "default") == "full":
        tokens += 1  # the CLS token is kept
    encode, bos = _caption_ids(base)
    image_id = int(model.config.image_token_index)
    records = [r for f in folders for r in _records(f)]
    if not records:
        raise BadInputError("the image-text data holds no captions.jsonl lines", field="data", hint=DATA_FORMAT)
    examples: list[Any] = []
    mean, std = image_normalisation(base)
    for path, caption in records:
        examples.append((torch.from_numpy(load_image(path, size, mean=mean, std=std)), encode(caption)))
    sampler: Any = Sampler(examples, seed=int(p.get("seed", 0)))  # image-text pairs, not token examples

    def batch_of(items: list[Any]) -> tuple[dict[str, torch.Tensor], int]:
        width = max(len(c) for _, c in items)
        ids = [[bos, *[image_id] * tokens, *c, *[0] * (width - len(c))] for _, c in items]
        labels = [[-100] * (1 + tokens) + list(c) + [-100] * (width - len(c)) for _, c in items]
        return {
            "input_ids": torch.tensor(ids, device=ctx.device),
            "labels": torch.tensor(labels, device=ctx.device),
            "pixel_values": torch.stack([img for img, _ in items]).to(ctx.device),
        }, sum(len(c) for _, c in items)

    # a trained module's parameter that the forward never reaches (CLIP's post_layernorm when the features
    # come from the last hidden state) would stop DDP ("did not receive grad"): one probe pass finds them
    model.to(ctx.device)
    inputs, _ = batch_of(examples[:1])
    model(**inputs).loss.backward()
    unused = [name for name, q in model.named_parameters() if q.requires_grad and q.grad is None]
    for name, q in model.named_parameters():
        q.grad = None
        if name in unused:
            q.requires_grad_(False)
    wrapped = sv.wrap(model)
    params = [q for q in wrapped.parameters() if q.requires_grad]
    lr0 = float(p.get("lr", 1e-4))
    opt = torch.optim.AdamW(params, lr=lr0, weight_decay=float(p.get("weight_decay", 0.0)))
    lr_at = schedule(opt, total)
    if ctx.is_main:
        print(
            f"stage {args.recipe}: training {'/'.join(train)} ({n_trained} parameters), {n_frozen} frozen; "
            f"{len(examples)} image-text pairs, {tokens} image tokens each; steps to {until} of {total}, {plan}"
            + (f"; not reached by the forward, so not trained: {', '.join(unused)}" if unused else ""),
            flush=True,
        )

    last: int | None = None
    for step in sv.steps(until, model=wrapped, optimizer=opt):
        began = time.perf_counter()
        lr = lr0 * lr_at(step)
        for group in opt.param_groups:
            group["lr"] = lr
        count = max(sum(len(c) for _, c in sampler.step(step, plan)), 1)  # caption tokens of the global batch
        loss_sum, seen = 0.0, 0
        for m in range(plan.accumulation):
            inputs, n = batch_of(sampler.micro(step, m, ctx.rank, plan))
            with _no_sync(wrapped, m == plan.accumulation - 1):
                out = wrapped(**inputs)
                summed = out.loss * n  # the micro batch's mean over its caption tokens, as a sum
                (summed * (ctx.world_size / count)).backward()
            loss_sum += float(summed.detach())
            seen += n
        clip = float(p.get("max_grad_norm", 0.0))
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        sums = _all_sum([loss_sum, float(seen)], ctx.device)
        elapsed = max(time.perf_counter() - began, 1e-9)
        metrics: dict[str, Any] = {
            "loss": sums[0] / count,
            "lr": lr,
            "grad_norm": float(norm),
            "tokens": sums[1],
            "tokens_per_s": sums[1] / elapsed,
            "accumulation": plan.accumulation,
        }
        sv.log_metrics(step, **metrics)
        if ctx.is_main and (step % 10 == 0 or step == total - 1):
            print(f"step {step} loss {metrics['loss']:.4f} lr {lr:.3g}", flush=True)
        if on_step is not None:
            on_step(step, metrics)
        last = step
    if sv.stop_requested() or (last is not None and last + 1 < total):
        return None
    return wrapped
