"""Throughput of a training loop: tokens per second and model TFLOPS per card, for ``log_metrics``.

The monitor, the panel and ``jobs show`` read ``tokens_per_s`` and ``tflops_per_card`` from the
metrics a job logs; :class:`Throughput` measures them between two steps so a script that knows its
tokens per step and its model's FLOPs per token gets both without timing code of its own.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Throughput", "train_flops_per_token"]


def train_flops_per_token(params: int, *, layers: int = 0, hidden: int = 0, seq_len: int = 0) -> float:
    """Training FLOPs per token of a decoder: ``6 N`` (non-embedding parameters, forward + backward)
    plus ``12 L d T`` for attention's scores and values (the PaLM / Megatron estimate)."""
    return 6.0 * params + 12.0 * layers * hidden * seq_len


class Throughput:
    """Tokens/s and TFLOPS per card of each step, from the wall time between two :meth:`step` calls.

    ``flops_per_token`` (see :func:`train_flops_per_token`) is what one token costs the whole job;
    ``cards`` the ranks that share it. The first step is timed from construction.
    """

    def __init__(self, *, flops_per_token: float = 0.0, cards: int = 1) -> None:
        self.flops_per_token = float(flops_per_token)
        self.cards = max(int(cards), 1)
        self._last = time.perf_counter()

    def step(self, tokens: float) -> dict[str, Any]:
        """The rates of the step that just ended, having processed ``tokens`` tokens (all ranks)."""
        now = time.perf_counter()
        elapsed = max(now - self._last, 1e-9)
        self._last = now
        rate = float(tokens) / elapsed
        out: dict[str, Any] = {"tokens_per_s": rate}
        if self.flops_per_token > 0:
            out["tflops_per_card"] = self.flops_per_token * rate / self.cards / 1e12
        return out
