"""The losses, in plain torch: next-token (CPT, SFT on answers), DPO, KTO, Bradley-Terry reward.

Each returns the *sum* of its per-token (CPT, SFT) or per-sequence (DPO, KTO, reward) losses
over the micro batch and sums of its statistics; the trainer divides by the step's global
count, so the gradient does not depend on how the global batch is split over ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ._data import IGNORE, Example

__all__ = ["UNIT", "micro_loss", "tokens_of"]

#: What a step's loss is averaged over: answer tokens, or sequences.
UNIT = {"cpt": "tokens", "sft": "tokens", "dpo": "pairs", "kto": "answers", "reward": "pairs", "ppo": "rollouts"}


def _pad(rows: Sequence[Sequence[int]], pad: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def _sequences(
    prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], pad: int, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompt + answer rows, their mask, and labels on the answer tokens only."""
    rows = [list(p) + list(a) for p, a in zip(prompts, answers, strict=True)]
    ids, mask = _pad(rows, pad, device)
    labels = torch.full_like(ids, IGNORE)
    for i, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        labels[i, len(p) : len(p) + len(a)] = ids[i, len(p) : len(p) + len(a)]
    return ids, mask, labels


def _token_logps(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of ``labels`` (shifted; 0 where unlabelled) and the labelled mask."""
    full = bool(mask.all())  # packed rows: no padding, so the causal fast path needs no mask
    logits = model(input_ids=ids, attention_mask=None if full else mask).logits[:, :-1]
    target = labels[:, 1:]
    nll = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1), ignore_index=IGNORE, reduction="none"
    )
    return -nll.view_as(target), target != IGNORE


def seq_logps(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of the answer tokens' log-probabilities per row."""
    logp, _ = _token_logps(model, ids, mask, labels)
    return logp.sum(-1)


def tokens_of(objective: str, examples: Sequence[Example]) -> int:
    """The step's loss unit count: labelled tokens (CPT, SFT) or sequences."""
    if objective in ("cpt", "sft"):
        return sum(e.labelled for e in examples)
    return len(examples)


def micro_loss(
    objective: str,
    model: Any,
    examples: Sequence[Example],
    *,
    pad: int,
    device: str,
    params: dict[str, Any],
    reference: Any = None,
    kl: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float], int]:
    """``(sum of losses, sums of statistics, tokens that went through the model)`` of one micro batch."""
    if objective in ("cpt", "sft"):
        ids, mask = _pad([e.parts[0] for e in examples], pad, device)
        labels, _ = _pad([e.labels for e in examples], IGNORE, device)
        logp, _ = _token_logps(model, ids, mask, labels)
        return -logp.sum(), {}, int(mask.sum())
    beta = float(params.get("beta", 0.1))
    if objective in ("dpo", "reward"):
        prompts = [e.parts[0] for e in examples]
        ids, mask, labels = _sequences(
            prompts * 2, [e.parts[1] for e in examples] + [e.parts[2] for e in examples], pad, device
        )
        n = len(examples)
        if objective == "reward":
            last = mask.sum(-1) - 1  # the score is read at each row's last real token
            scores = model(input_ids=ids, attention_mask=mask).logits.float().squeeze(-1)
            if scores.dim() == 2:
                scores = scores.gather(1, last.unsqueeze(-1)).squeeze(-1)
            margin = scores[:n] - scores[n:]
            loss = -F.logsigmoid(margin)
            return (
                loss.sum(),
                {"accuracy": float((margin > 0).sum()), "margin": float(margin.detach().sum())},
                int(mask.sum()),
            )
        policy = seq_logps(model, ids, mask, labels)
        with torch.no_grad():
            ref = seq_logps(reference, ids, mask, labels)
        margin = (policy[:n] - ref[:n]) - (policy[n:] - ref[n:])
        loss = -F.logsigmoid(beta * margin)
        stats = {"accuracy": float((margin > 0).sum()), "margin": float(beta * margin.detach().sum())}
        return loss.sum(), stats, int(mask.sum())
    if objective == "kto":
        ids, mask, labels = _sequences([e.parts[0] for e in examples], [e.parts[1] for e in examples], pad, device)
        policy = seq_logps(model, ids, mask, labels)
        with torch.no_grad():
            ref = seq_logps(reference, ids, mask, labels)
        ratio = policy - ref
        z0 = kl if kl is not None else torch.zeros((), device=ratio.device)
        good = torch.tensor([e.flag for e in examples], device=ratio.device)
        up = float(params.get("desirable_weight", 1.0)) * (1 - torch.sigmoid(beta * (ratio - z0)))
        down = float(params.get("undesirable_weight", 1.0)) * (1 - torch.sigmoid(beta * (z0 - ratio)))
        loss = torch.where(good, up, down)
        stats = {
            "reward_good": float((beta * ratio.detach() * good).sum()),
            "reward_bad": float((beta * ratio.detach() * ~good).sum()),
        }
        return loss.sum(), stats, int(mask.sum())
    raise ValueError(f"unknown objective {objective!r}")


@torch.no_grad()
def kto_kl(model: Any, reference: Any, examples: Sequence[Example], *, pad: int, device: str) -> torch.Tensor:
    """KTO's reference point: mean log-ratio of policy and reference on mismatched prompt/answer pairs
    (prompt ``i`` with answer ``i+1``), clamped at 0 and detached."""
    if len(examples) < 2:
        return torch.zeros((), device=device)
    prompts = [e.parts[0] for e in examples]
    answers = [examples[(i + 1) % len(examples)].parts[1] for i in range(len(examples))]
    ids, mask, labels = _sequences(prompts, answers, pad, device)
    ratio = seq_logps(model, ids, mask, labels) - seq_logps(reference, ids, mask, labels)
    return ratio.mean().clamp(min=0)
