"""Export benchmark: ONNX fp32 / INT8 / INT4 of a small Llama against PyTorch, on CPU.

Builds the tests' tiny Llama (``tests/_tiny.py``; ``--hidden``/``--layers`` make it larger),
trains it for ``--train-steps`` on the tiny corpus so its greedy answers are not noise, records
a small feedback log from two users and freezes it, then runs ``starverse export`` for each
format through the facade, in one process, one thread (``OMP_NUM_THREADS=1``). Prints, all
measured in this run (nothing asserted):

- file size of each graph and the ratio to fp32;
- max abs logit difference, teacher-forced greedy agreement and identical continuations
  against PyTorch on the fixed prompt set; held-out perplexity and its change;
- CPU ms per generated token (median of the cached decode steps) for PyTorch, fp32 and the
  quantized graph, and the ratios quantized/fp32 and PyTorch/fp32;
- the share of the feedback prompts answered exactly as PyTorch answers them;
- where each export's time went, stage by stage (from its progress lines): the first format
  traces the fp32 graph, the next ones reuse it (same model files, same exporter);
- the fixed cost a fresh process pays before any of that: importing torch, transformers and
  the exporter (``python -c`` in a child process, timed from its start).

Usage: ``python benchmarks/bench_export.py [--hidden 64] [--layers 2] [--train-steps 150]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def train(folder: Path, steps: int) -> float:
    """A few hundred next-token steps on the tiny corpus; returns the last loss."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests._tiny import CORPUS

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = tok(CORPUS, return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(folder)
    return float(loss.detach())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--train-steps", type=int, default=150)
    ap.add_argument("--formats", default="onnx,onnx-int8,onnx-int4")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse
    from tests._tiny import build_tiny_llama

    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        folder = build_tiny_llama(Path(tmp) / "model", hidden_size=args.hidden, layers=args.layers)
        params = sum(
            p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(folder).parameters()
        )
        t = time.perf_counter()
        loss = train(folder, args.train_steps) if args.train_steps else float("nan")
        print(f"model: hidden {args.hidden}, {args.layers} layers, {params:,} parameters; "
              f"trained {args.train_steps} steps in {time.perf_counter() - t:.1f} s (loss {loss:.3f})")  # fmt: skip
        client = Starverse(Settings.from_env({"STARVERSE_HOME": str(Path(tmp) / "home"), "STARVERSE_USER": "bench"}))
        for who, vote in (("ana", "up"), ("bo", "down")):
            for q in (
                "How many cards do I need?",
                "训练一个大模型需要",
                "What is saved every ten steps?",
                "数据清洗会",
            ):
                client.feedback.record("team", model="bench", prompt=q, answer="...", vote=vote, user=who)
        feedback = client.feedback.snapshot("team").ref

        rows = []
        stages: list[tuple[str, float, list[tuple[str, float]]]] = []
        for fmt in args.formats.split(","):
            marks: list[tuple[str, float]] = []
            began = time.perf_counter()
            result = client.export.export(
                str(folder), fmt, target=f"bench/tiny@{fmt}", feedback=feedback, force=True,
                progress=lambda text, marks=marks: marks.append((text, time.perf_counter())),
            )  # fmt: skip
            ended = time.perf_counter()
            spans = [
                (text, (marks[i + 1][1] if i + 1 < len(marks) else ended) - at) for i, (text, at) in enumerate(marks)
            ]
            stages.append((fmt, ended - began, spans))
            rows.append(result)
            print()
            print(result)
        print()
        print("summary (same run, 1 thread):")
        base = rows[0].figures[0]
        for r in rows:
            f, fp32 = r.figures[-1], r.figures[0]  # latencies of one export were timed in turns
            replay = f.replay.share if f.replay else float("nan")
            print(
                f"  {f.graph:10s} size {f.bytes / 1024:8.1f} KiB ({base.bytes / f.bytes:4.2f}x smaller)"
                f"  max|dlogit| {f.max_abs_logit_diff:.2e}  greedy {f.greedy_agreement:6.1%}"
                f"  ppl {f.perplexity_change:+7.2%}  ms/token {f.ms_per_token:6.3f}"
                f" (vs fp32 {f.ms_per_token / fp32.ms_per_token:4.2f}x, torch {f.ms_per_token_torch:6.3f})"
                f"  feedback replay {replay:6.1%}  [{r.state}]"
            )
        print()
        print(f"where the time went (machine load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs):")
        for fmt, total, spans in stages:
            print(f"  {fmt}: {total:.1f} s")
            for text, seconds in spans:
                print(f"    {seconds:7.2f} s  {text}")
        imports = subprocess.run(
            [sys.executable, "-c", _IMPORTS],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        print(f"  a fresh process before any export: {imports.stdout.strip() or imports.stderr[-300:]}")
    return 0


_IMPORTS = """
import time
t = time.perf_counter()
import torch
a = time.perf_counter()
import transformers
transformers.PreTrainedModel, transformers.AutoModelForCausalLM
b = time.perf_counter()
import onnxscript, onnxruntime, torch.onnx
c = time.perf_counter()
from jupyter_starverse.client import Starverse
d = time.perf_counter()
print(f"import torch {a - t:.2f} s, transformers {b - a:.2f} s, onnxscript + onnxruntime {c - b:.2f} s, "
      f"the facade {d - c:.2f} s")
"""


if __name__ == "__main__":
    raise SystemExit(main())
