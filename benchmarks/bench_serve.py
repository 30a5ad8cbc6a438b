"""Serving benchmark: time to first token and tokens/s of an endpoint, PyTorch eager vs ONNX fp32 vs INT4.

Builds the tests' tiny Llama (``tests/_tiny.py``; ``--hidden``/``--layers`` make it larger),
imports it into an isolated store, exports it (``onnx`` and ``onnx-int4``) through the facade,
then serves each version in turn with ``client.serve.start`` (one engine thread) and measures it
with an independent client in this process: plain HTTP streaming (server-sent events) from
``--clients`` threads at once (1 and 8), the same prompts for every engine, greedy. For each
engine and concurrency it prints p50 / p95 time to first token (ms), p50 / p95 per-request decode
tokens/s, and the aggregate tokens/s; then the INT4 / eager ratio of p50 time per output token
(the seed's "280 -> 69 ms" framed as a ratio). Nothing is asserted.

Usage: ``python benchmarks/bench_serve.py [--hidden 64] [--layers 2] [--tokens 32] [--requests 16]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")

PROMPTS = [
    "How many cards do I need?",
    "训练一个大模型需要多少显卡",
    "Explain checkpoints and preemption.",
    "What does INT4 quantization change?",
]


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else float("nan")


def one_request(url: str, token: str, model: str, prompt: str, tokens: int) -> tuple[float, float, int]:
    """(seconds to the first content piece, seconds in all, completion tokens) of one streamed chat."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"{url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    start = time.perf_counter()
    first = None
    count = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            delta = chunk["choices"][0].get("delta", {}) if chunk["choices"] else {}
            if first is None and delta.get("content"):
                first = time.perf_counter() - start
            if chunk.get("usage"):
                count = chunk["usage"]["completion_tokens"]
    total = time.perf_counter() - start
    return (first if first is not None else total), total, count


def measure(url: str, token: str, model: str, *, clients: int, requests: int, tokens: int) -> dict[str, float]:
    jobs = [PROMPTS[i % len(PROMPTS)] for i in range(requests)]
    one_request(url, token, model, PROMPTS[0], 4)  # warm-up
    lock = threading.Lock()
    rows: list[tuple[float, float, int]] = []

    def run(prompt: str) -> None:
        res = one_request(url, token, model, prompt, tokens)
        with lock:
            rows.append(res)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, jobs))
    wall = time.perf_counter() - start
    ttft = [r[0] * 1000 for r in rows]
    rates = [(r[2] - 1) / (r[1] - r[0]) for r in rows if r[2] > 1 and r[1] > r[0]]
    per_token = [(r[1] - r[0]) * 1000 / (r[2] - 1) for r in rows if r[2] > 1]
    return {
        "ttft_p50": _pct(ttft, 0.5),
        "ttft_p95": _pct(ttft, 0.95),
        "tps_p50": _pct(rates, 0.5),
        "tps_p95": _pct(rates, 0.05),  # the slow tail: 95% of requests decode at least this fast
        "ms_per_token_p50": _pct(per_token, 0.5),
        "aggregate_tps": sum(r[2] for r in rows) / wall,
        "tokens": statistics.mean(r[2] for r in rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--requests", type=int, default=16)
    args = ap.parse_args()
    show_load()
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    os.environ.update(
        STARVERSE_HOME=str(tmp / "home"), STARVERSE_STORE=str(tmp / "store"), STARVERSE_EXPERIMENTS=str(tmp / "exp")
    )
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse
    from tests._tiny import build_tiny_llama

    client = Starverse(Settings.from_env())
    folder = build_tiny_llama(tmp / "model", hidden_size=args.hidden, layers=args.layers)
    client.catalog.import_model(folder, repo="bench/tiny@main")
    base = "hf:bench/tiny@main"
    print(f"model: tiny Llama hidden {args.hidden}, {args.layers} layers; exporting onnx and onnx-int4 ...", flush=True)
    versions = {"eager (transformers)": base}
    for fmt, label in (("onnx", "ONNX fp32"), ("onnx-int4", "ONNX INT4")):
        res = client.export.export(base, fmt, force=True, new_tokens=4)
        assert res.target is not None
        versions[label] = res.target
    results: dict[tuple[str, int], dict[str, float]] = {}
    for label, model in versions.items():
        ep = client.serve.start(model)
        token = client.serve.token(ep.id)
        try:
            assert ep.url is not None
            for clients in (1, 8):
                results[(label, clients)] = measure(
                    ep.url, token, model, clients=clients, requests=args.requests, tokens=args.tokens
                )
        finally:
            client.serve.stop(ep.id)
    head = f"{'engine':<22}{'clients':>8}{'TTFT p50':>10}{'TTFT p95':>10}{'tok/s p50':>11}{'tok/s p5':>10}"
    print(f"\n{head}{'ms/tok p50':>12}{'aggr tok/s':>12}")
    for (label, clients), r in results.items():
        print(
            f"{label:<22}{clients:>8}{r['ttft_p50']:>9.1f} {r['ttft_p95']:>9.1f} {r['tps_p50']:>10.1f} "
            f"{r['tps_p95']:>9.1f} {r['ms_per_token_p50']:>11.2f} {r['aggregate_tps']:>11.1f}"
        )
    for clients in (1, 8):
        eager = results[("eager (transformers)", clients)]["ms_per_token_p50"]
        int4 = results[("ONNX INT4", clients)]["ms_per_token_p50"]
        ttft = results[("ONNX INT4", clients)]["ttft_p50"] / results[("eager (transformers)", clients)]["ttft_p50"]
        print(f"{clients} client(s): INT4 / eager latency per output token {int4 / eager:.2f} "
              f"({eager:.2f} -> {int4:.2f} ms), time to first token {ttft:.2f}")  # fmt: skip
    print("(the seed's 280 -> 69 ms is a ratio of 0.25, INT4 vs fp16 on its own model and hardware)")


if __name__ == "__main__":
    main()
