"""Recipes: what the recipe trainer's step costs over a bare Hugging Face training step.

Run from the repository root (CPU, one process; ``OMP_NUM_THREADS=1`` is set here)::

    python benchmarks/bench_recipes.py [--repeat 5] [--steps 12] [--hidden 128] [--layers 4]

Builds a small Llama (random weights, a BPE tokenizer trained on a few lines) into a temporary
store, then measures in the same run, each ``--repeat`` times, the median tokens/s of:

- ``baseline``: a bare loop (``model(input_ids, labels=...)``, ``backward``, AdamW, fp32) on the
  same packed batches, no accumulation, no metrics;
- ``recipe ...``: the CPT recipe's trainer (``recipes.train.main``: batch plan, per-token loss
  over the global batch, cosine schedule, clipping, metrics) in fp32 with the whole batch in one
  micro batch (accum 1) and in two (accum 2), and with ``bf16`` autocast (accum 2),

and prints each median with its ratio to the baseline, plus the trainer's own TFLOPS per card.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402

TEXT = [
    "Large models are trained on rented GPUs from a notebook.",
    "Checkpoints are saved every ten steps and the job resumes after a preemption.",
    "A cached dataset mounts in well under a second on every node.",
    "训练一个大模型需要很多显卡和数据。",
    "数据清洗会去掉重复的段落和敏感信息。",
]


def build(home: Path, hidden: int, layers: int) -> None:
    """A small Llama + tokenizer imported into the store at ``home``, and a corpus dataset."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from jupyter_starverse._settings import Settings
    from jupyter_starverse.catalog import Catalog

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(TEXT * 4, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    folder = home / "model"
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    catalog = Catalog(Settings.from_env())
    catalog.import_model(folder, repo="bench/llama")
    corpus = home / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(TEXT * 200))
    catalog.add_dataset("corpus", str(corpus))
    catalog.pull("corpus")


def baseline(steps: int, batch: int, seq: int) -> float:
    """Median tokens/s per step of a bare loop on the same packed windows."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from jupyter_starverse.runtime import mount_path

    path = mount_path("hf:bench/llama")
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("\n".join(TEXT * 200), add_special_tokens=False)["input_ids"]
    windows = torch.tensor(ids[: (len(ids) // seq) * seq]).view(-1, seq)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rates = []
    for step in range(steps):
        start = time.perf_counter()
        x = windows[(step * batch) % len(windows) :][:batch]
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        rates.append(batch * seq / (time.perf_counter() - start))
    return statistics.median(rates[1:])  # like the trainer's figures: the first step left out


def recipe(steps: int, batch: int, seq: int, precision: str, *, micro: int) -> tuple[float, float]:
    """Median tokens/s and TFLOPS per card the trainer logged (the first step, with warm-up costs, left out)."""
    from jupyter_starverse.recipes.train import main

    seen: list[dict[str, float]] = []
    params = {
        "steps": steps,
        "global_batch": batch,
        "micro_batch": micro,
        "seq_len": seq,
        "lr": 1e-3,
        "warmup_steps": 1,
        "precision": precision,
    }
    # a fresh checkpoint folder per run: outside a job the runtime would use ./checkpoints and resume from it
    os.environ["STARVERSE_CHECKPOINT_DIR"] = tempfile.mkdtemp(prefix="bench-recipes-ckpt-")
    argv = ["--recipe", "cpt", "--objective", "cpt", "--model", "hf:bench/llama", "--data", "corpus"]
    for key, value in params.items():
        argv += ["--param", f"{key}={value}"]
    main(argv, on_step=lambda step, metrics: seen.append(metrics))  # prints each step: redirected below
    rates = [m["tokens_per_s"] for m in seen[1:]]
    return statistics.median(rates), statistics.median(m["tflops_per_card"] for m in seen[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    show_load()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["STARVERSE_HOME"] = str(home / "home")
        for key in [k for k in os.environ if k.startswith("STARVERSE_") and k != "STARVERSE_HOME"]:
            del os.environ[key]
        build(home, args.hidden, args.layers)
        variants = {
            "recipe fp32 accum 1": ("fp32", args.batch),
            "recipe fp32 accum 2": ("fp32", args.batch // 2),
            "recipe bf16 accum 2": ("bf16", args.batch // 2),
        }
        results: dict[str, list[float]] = {"baseline": [], **{name: [] for name in variants}}
        tflops: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeat):
            results["baseline"].append(baseline(args.steps, args.batch, args.seq))
            for name, (precision, micro) in variants.items():
                rate, tf = recipe(args.steps, args.batch, args.seq, precision, micro=micro)
                results[name].append(rate)
                tflops[name].append(tf)
        base = statistics.median(results["baseline"])
        print(
            f"model: Llama hidden {args.hidden}, {args.layers} layers; batch {args.batch} x {args.seq} tokens; "
            f"{args.steps} steps x {args.repeat} repeats, 1 process, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
        )
        report = {}
        for name, values in results.items():
            med = statistics.median(values)
            tf = f", {statistics.median(tflops[name]):.4f} TFLOPS/card" if name in tflops else ""
            print(f"{name:<20} median {med:10.0f} tokens/s  ratio {med / base:5.2f}{tf}")
            report[name] = {"median_tokens_per_s": med, "ratio": med / base}
        print(json.dumps(report))


if __name__ == "__main__":
    main()
