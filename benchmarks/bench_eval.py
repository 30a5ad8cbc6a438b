"""Evaluation benchmark: examples/s of ``client.evals.evaluate`` against a bare transformers loop.

Builds the tests' tiny Llama (``tests/_tiny.py``; ``--hidden``/``--layers`` make it larger),
imports it into an isolated store, writes a labelled set of ``--examples`` generated examples and
times, in one process and in turns (round after round, so a busy machine slows both alike):

- ``eval``: ``client.evals.evaluate(MODEL, DATA, task=...)`` (batched, predictions appended and
  fsynced per batch, the report written), predictions file removed between rounds;
- ``bare``: the same model and examples through ``model.generate`` (generation task) or one
  forward pass per (example, label) (classification) in a plain loop, no batching, no file.

Prints the median examples/s of each and the ratio eval/bare (nothing is asserted).

Usage: ``python benchmarks/bench_eval.py [--examples 64] [--task classification|generation] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")

LABELS = ("negative", "neutral", "positive")


def bare(folder: Path, rows: list[dict[str, str]], task: str, new_tokens: int) -> None:
    """What a user writes by hand: one example at a time, no batching, nothing written."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    model.eval()
    with torch.no_grad():
        for row in rows:
            ids = tok(row["input"], add_special_tokens=False, return_tensors="pt")["input_ids"]
            if task == "generation":
                model.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
                continue
            scores = []
            for label in LABELS:
                cont = tok(" " + label, add_special_tokens=False, return_tensors="pt")["input_ids"]
                full = torch.cat([ids, cont], dim=1)
                logp = torch.log_softmax(model(input_ids=full).logits[0, :-1], dim=-1)
                tgt = full[0, ids.shape[1] :]
                scores.append(float(logp[ids.shape[1] - 1 :].gather(1, tgt.unsqueeze(1)).sum()))
            max(range(len(LABELS)), key=lambda k: scores[k])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=64)
    ap.add_argument("--task", choices=("classification", "generation"), default="classification")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    show_load()

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ.update({"STARVERSE_HOME": str(home / "home"), "STARVERSE_STORE": str(home / "store"),
                           "STARVERSE_EXPERIMENTS": str(home / "exp")})  # fmt: skip
        from jupyter_starverse.client import Starverse
        from jupyter_starverse.evals import TaskOptions
        from tests._tiny import build_tiny_llama

        folder = build_tiny_llama(home / "model", hidden_size=args.hidden, layers=args.layers)
        client = Starverse()
        client.catalog.import_model(folder, repo="bench/tiny@main")
        rng = random.Random(0)
        words = ["fox", "dog", "model", "data", "card", "node", "模型", "数据"]
        rows = [{"input": " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))), "target": rng.choice(LABELS)}
                for _ in range(args.examples)]  # fmt: skip
        data = home / "data"
        data.mkdir()
        (data / "t.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        ref = client.catalog.add_dataset("bench", str(data)).ref
        opts = TaskOptions(batch_size=args.batch_size, max_new_tokens=args.new_tokens)
        timings: dict[str, list[float]] = {"eval": [], "bare": []}
        for _ in range(args.rounds):
            t = time.perf_counter()
            client.evals.evaluate("hf:bench/tiny@main", ref, task=args.task, options=opts)
            timings["eval"].append(args.examples / (time.perf_counter() - t))
            t = time.perf_counter()
            bare(client.catalog.mount("hf:bench/tiny@main"), rows, args.task, args.new_tokens)
            timings["bare"].append(args.examples / (time.perf_counter() - t))
        ev, br = statistics.median(timings["eval"]), statistics.median(timings["bare"])
        print(f"task {args.task}, {args.examples} examples, batch {args.batch_size}, {args.rounds} rounds (medians)")
        print(f"eval (batched, predictions written, report stored): {ev:8.1f} examples/s")
        print(f"bare transformers loop (one example at a time):       {br:8.1f} examples/s")
        print(f"ratio eval/bare: {ev / br:.2f}x")


if __name__ == "__main__":
    main()
