"""The export report: does the exported graph compute what the PyTorch model computes, how much
smaller and faster is it, and how often does it answer the team's own prompts the same way.

Figures, all measured in one run against the PyTorch fp32 model:

- ``max_abs_logit_diff``: over a fixed prompt set, the prompt's logits (prefill) and those of a
  greedy continuation fed one token at a time through the KV cache (decode);
- ``greedy_agreement``: at each position of PyTorch's greedy continuation, the share where the
  graph's argmax is the same token (teacher-forced, so one early miss does not hide the rest);
  ``exact_continuations``: the share of prompts whose free-running greedy continuation is
  identical;
- ``perplexity`` on a held-out text, and its change relative to PyTorch;
- ``ms_per_token``: median CPU time of one cached decode step (one thread), PyTorch alongside;
  PyTorch and every graph are timed in turns, round after round (:func:`interleaved_latency`),
  so a busy machine slows them alike and the ratios hold;
- ``replay``: the distinct prompts of a feedback version answered greedily by PyTorch and by
  the graph: the share of identical answers.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from jupyter_starverse._format import format_bytes, html_table

from ._onnx import OrtCausalLM

__all__ = [
    "HEADER",
    "HELD_OUT",
    "PROMPTS",
    "GraphFigures",
    "Reference",
    "Replay",
    "Thresholds",
    "figures_html",
    "figures_table",
    "measure",
    "reference",
    "interleaved_latency",
    "torch_greedy",
]

#: The fixed prompt set (English and Chinese, like the team's data).
PROMPTS = (
    "The quick brown fox",
    "Large models are trained on",
    "How many cards do I need?",
    "Checkpoints are saved every",
    "A dataset mounts in",
    "训练一个大模型需要",
    "数据清洗会去掉",
    "模型导出为 ONNX",
)
#: Held-out text for perplexity: not one of the prompts, not a training sentence of the tests' model.
HELD_OUT = (
    "The team exported the model after training and checked every answer on a laptop. "
    "Quantized weights make the file smaller and the answers faster on an edge box. "
    "上海的团队在边缘设备上测试了导出的模型。"
)


@dataclass(frozen=True)
class Thresholds:
    """What a graph must reach to pass (``None``: not checked)."""

    max_abs_logit_diff: float | None = None
    min_greedy_agreement: float | None = None
    max_perplexity_increase: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Replay:
    """Feedback prompts answered by PyTorch and by the graph."""

    ref: str
    prompts: int
    matching: int
    examples: tuple[tuple[str, str, str], ...] = ()  # (prompt, pytorch, graph) of differing answers

    @property
    def share(self) -> float:
        return self.matching / self.prompts if self.prompts else 1.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "share": self.share, "examples": [list(e) for e in self.examples]}


@dataclass(frozen=True)
class GraphFigures:
    """The measured figures of one graph (fp32 or quantized) against PyTorch."""

    graph: str
    bytes: int
    max_abs_logit_diff: float
    greedy_agreement: float
    exact_continuations: float
    perplexity_torch: float
    perplexity: float
    ms_per_token: float
    ms_per_token_torch: float
    thresholds: Thresholds = field(default_factory=Thresholds)
    replay: Replay | None = None

    @property
    def perplexity_change(self) -> float:
        return self.perplexity / self.perplexity_torch - 1.0

    @property
    def failures(self) -> tuple[str, ...]:
        t = self.thresholds
        out = []
        if t.max_abs_logit_diff is not None and not self.max_abs_logit_diff <= t.max_abs_logit_diff:
            out.append(f"{self.graph}: max abs logit diff {self.max_abs_logit_diff:.3g} > {t.max_abs_logit_diff:.3g}")
        if t.min_greedy_agreement is not None and not self.greedy_agreement >= t.min_greedy_agreement:
            out.append(f"{self.graph}: greedy agreement {self.greedy_agreement:.1%} < {t.min_greedy_agreement:.1%}")
        if t.max_perplexity_increase is not None and not self.perplexity_change <= t.max_perplexity_increase:
            out.append(f"{self.graph}: perplexity {self.perplexity_change:+.2%} > +{t.max_perplexity_increase:.1%}")
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["thresholds"] = self.thresholds.to_json()
        out["replay"] = self.replay.to_json() if self.replay else None
        out["perplexity_change"] = self.perplexity_change
        out["failures"] = list(self.failures)
        return out

    def row(self, base_bytes: int) -> list[str]:
        replay = f"{self.replay.matching}/{self.replay.prompts}" if self.replay and self.replay.prompts else "-"
        return [
            self.graph,
            format_bytes(self.bytes),
            f"{base_bytes / self.bytes:.2f}x" if self.bytes else "-",
            f"{self.max_abs_logit_diff:.2e}",
            f"{self.greedy_agreement:.1%}",
            f"{self.exact_continuations:.0%}",
            f"{self.perplexity:.2f} ({self.perplexity_change:+.2%})",
            f"{self.ms_per_token:.3f} (torch {self.ms_per_token_torch:.3f})",
            replay,
        ]


HEADER = ("graph", "size", "smaller", "max |Δlogit|", "greedy agree", "same text", "perplexity", "ms/token", "replay")


def _cache_kw(model: Any) -> str:
    """transformers 5.x renamed ``past_key_values`` to ``cache``; older versions know only the first."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def figures_table(rows: Sequence[GraphFigures], base_bytes: int) -> str:
    lines = [list(HEADER), *[r.row(base_bytes) for r in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def figures_html(rows: Sequence[GraphFigures], base_bytes: int, caption: str) -> str:
    return html_table(HEADER, [r.row(base_bytes) for r in rows], caption=caption)


# -- measuring ---------------------------------------------------------------------------------
def torch_greedy(model: Any, prompt: list[int], n: int, *, stop_at_eos: bool = False) -> tuple[list[int], list[float]]:
    """PyTorch's greedy continuation with its own cache, and each decode step's seconds."""
    import torch

    eos = getattr(model.config, "eos_token_id", None)
    out: list[int] = []
    times: list[float] = []
    with torch.no_grad():
        res = model(input_ids=torch.tensor([prompt]), use_cache=True)
        past = res.past_key_values
        nxt = int(torch.argmax(res.logits[0, -1]))
        for _ in range(n):
            if stop_at_eos and nxt == eos:
                break
            out.append(nxt)
            t = time.perf_counter()
            res = model(input_ids=torch.tensor([[nxt]]), use_cache=True, **{_cache_kw(model): past})
            times.append(time.perf_counter() - t)
            past = res.past_key_values
            nxt = int(torch.argmax(res.logits[0, -1]))
    return out, times


def _torch_logits(model: Any, ids: list[int]) -> Any:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float().numpy()


def _nll(logits: Any, ids: list[int]) -> float:
    import numpy as np

    x = logits[:-1].astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return float(-logp[np.arange(len(ids) - 1), ids[1:]].mean())


@dataclass
class Reference:
    """What PyTorch computed once, reused for every graph of the run."""

    prompts: list[list[int]]
    continuations: list[list[int]]
    logits: list[Any]
    held_out: list[int]
    perplexity: float
    ms_per_token: float
    replay_answers: list[str] = field(default_factory=list)


def reference(model: Any, tok: Any, *, new_tokens: int) -> Reference:
    """PyTorch's continuations, logits, perplexity and decode latency on the fixed sets."""
    prompts = [[int(i) for i in tok(p)["input_ids"]] or [int(tok.bos_token_id or 0)] for p in PROMPTS]
    conts: list[list[int]] = []
    logits = []
    times: list[float] = []
    for ids in prompts:
        cont, t = torch_greedy(model, ids, new_tokens)
        conts.append(cont)
        times += t
        logits.append(_torch_logits(model, ids + cont))
    held = [int(i) for i in tok(HELD_OUT)["input_ids"]]
    ppl = math.exp(_nll(_torch_logits(model, held), held))
    return Reference(prompts, conts, logits, held, ppl, statistics.median(times) * 1000)


def measure(
    name: str,
    graph: OrtCausalLM,
    size: int,
    ref: Reference,
    thresholds: Thresholds,
    *,
    replay: Callable[[OrtCausalLM], Replay] | None = None,
) -> GraphFigures:
    """Every figure of ``graph`` against the PyTorch reference ``ref``."""
    import numpy as np

    worst = 0.0
    agree = total = exact = 0
    times: list[float] = []
    for ids, cont, want in zip(ref.prompts, ref.continuations, ref.logits, strict=True):
        got, past = graph.step(np.array([ids], dtype=np.int64), None)  # prefill
        rows = [got[0]]
        for tok_id in cont:  # decode through the cache, fed PyTorch's tokens
            step, past = graph.step(np.array([[tok_id]], dtype=np.int64), past)
            rows.append(step[0])
        mine = np.concatenate(rows, axis=0)[: len(ids) + len(cont)]
        worst = max(worst, float(np.abs(mine - want).max()))
        span = slice(len(ids) - 1, len(ids) - 1 + len(cont))
        agree += int((mine[span].argmax(-1) == want[span].argmax(-1)).sum())
        total += len(cont)
        free, t = graph.greedy(ids, len(cont))
        exact += int(free == cont)
        times += t
    held_logits, _ = graph.step(np.array([ref.held_out], dtype=np.int64), None)
    ppl = math.exp(_nll(held_logits[0], ref.held_out))
    return GraphFigures(
        graph=name,
        bytes=size,
        max_abs_logit_diff=worst,
        greedy_agreement=agree / total if total else 1.0,
        exact_continuations=exact / len(ref.prompts),
        perplexity_torch=ref.perplexity,
        perplexity=ppl,
        ms_per_token=statistics.median(times) * 1000 if times else 0.0,
        ms_per_token_torch=ref.ms_per_token,
        thresholds=thresholds,
        replay=replay(graph) if replay is not None else None,
    )


def interleaved_latency(
    model: Any, graphs: Sequence[OrtCausalLM], prompts: Sequence[list[int]], *, new_tokens: int, rounds: int = 3
) -> tuple[float, list[float]]:
    """Median ms per cached decode step of PyTorch and of each graph, timed in turns.

    Each round decodes ``new_tokens`` after every prompt with PyTorch, then with each graph, so
    load from other processes falls on all of them alike.
    """
    torch_times: list[float] = []
    graph_times: list[list[float]] = [[] for _ in graphs]
    for _ in range(rounds):
        for ids in prompts:
            torch_times += torch_greedy(model, ids, new_tokens)[1]
            for i, graph in enumerate(graphs):
                graph_times[i] += graph.greedy(ids, new_tokens)[1]
    return statistics.median(torch_times) * 1000, [statistics.median(t) * 1000 for t in graph_times]
