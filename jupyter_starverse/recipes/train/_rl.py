"""PPO on the prompts of a feedback dataset: policy, frozen reference and a reward model from the store.

Each step every rank takes its share of ``global_batch`` prompts, samples ``samples`` answers per
prompt from the policy (``generate``, up to ``max_new_tokens``), scores prompt + answer with the
reward model (a ``reward`` recipe's result: one logit) and measures the KL to the reference on
the answer's tokens. The reward the policy is trained on is ``score - beta x KL``; the advantage of
an answer is its reward minus the mean of the other answers to the same prompt (the leave-one-out
baseline of RLOO: no value head to train), and the loss is PPO's clipped ratio objective over
``ppo_epochs`` passes (the first pass is the plain policy gradient). Metrics per step: ``reward``
(the reward model's mean score), ``kl``, ``reward_shaped``, ``loss``, answer ``tokens``.

The same feedback dataset feeds ``dpo`` (its chosen / rejected answers) and ``ppo`` (its prompts):
``--recipe ppo`` or ``--recipe dpo`` over the same ``--data``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from jupyter_starverse import runtime as sv
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import batch_plan

from ._data import Encoder
from ._formats import iter_jsonl, parse_prompt

__all__ = ["load_prompts", "run_ppo"]


def load_prompts(folders: list[Path], tokenizer: Any, *, seq_len: int) -> list[list[int]]:
    """The token ids (with the chat template's generation prompt) of every record's ``prompt``."""
    enc = Encoder(tokenizer, seq_len)
    out = []
    for folder in folders:
        for where, obj in iter_jsonl(folder):
            if not isinstance(obj, dict) or "prompt" not in obj:
                raise BadInputError(
                    f"{where}: PPO reads the prompts of feedback records",
                    field="data",
                    hint='pairs {"prompt", "chosen", "rejected"} or unpaired {"prompt", "completion", "label"}',
                )
            prompt = parse_prompt(obj["prompt"], where, '{"prompt": "..."}')
            ids = enc.ids(enc.render(enc.messages(prompt), generation=True))
            out.append(ids[-max(seq_len // 2, 1) :])
    if not out:
        raise BadInputError("the feedback data holds no prompt", field="data", hint="add *.jsonl records")
    return out


def _answer_logps(model: Any, seq: torch.Tensor, start: int, mask: torch.Tensor) -> torch.Tensor:
    """Sum of the log-probabilities of the answer tokens ``seq[:, start:]`` (masked), per sequence."""
    logits = model(seq).logits[:, start - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, seq[:, start:].unsqueeze(-1)).squeeze(-1)
    return (logp * mask).sum(-1)


def _all_sum(values: list[float], device: str) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t)
    return [float(x) for x in t.tolist()]


def run_ppo(
    args: argparse.Namespace,
    *,
    tokenizer: Any,
    base: Path,
    folders: list[Path],
    load: Callable[[str, Path], Any],
    schedule: Callable[[Any, int], Callable[[int], float]],
    until: int,
    total: int,
    on_step: Callable[[int, dict[str, float]], Any] | None,
) -> Any:
    """Train the policy; returns the (wrapped) model for ``save_model``, or None when stopped early."""
    p = args.params
    ctx = sv.init()
    ref = str(p.get("reward_model") or "")
    if not ref:
        raise BadInputError(
            "PPO needs a reward model", field="reward_model", hint="--param reward_model=hf:... (a reward recipe's)"
        )
    k = int(p.get("samples", 4))
    if k < 2:
        raise BadInputError("PPO's baseline needs samples >= 2 answers per prompt", field="samples")
    beta, clip, epochs = float(p.get("beta", 0.05)), float(p.get("clip_range", 0.2)), int(p.get("ppo_epochs", 1))
    new_tokens = int(p.get("max_new_tokens", 16))
    plan = batch_plan(
        global_batch=int(p.get("global_batch", 8)), micro_batch=int(p.get("micro_batch", 1)), world_size=ctx.world_size
    )
    prompts = load_prompts(folders, tokenizer, seq_len=int(p.get("seq_len", 512)))
    transformers = __import__("transformers")
    scorer = transformers.AutoModelForSequenceClassification.from_pretrained(sv.mount_path(ref), num_labels=1)
    scorer = scorer.to(ctx.device).eval().requires_grad_(False)
    scorer.config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(int(p.get("seed", 0)))
    policy = load("ppo", base)
    reference = load("ppo", base).to(ctx.device).eval().requires_grad_(False)
    model = sv.wrap(policy)
    inner = getattr(model, "module", model)
    lr0 = float(p.get("lr", 1e-5))
    opt = torch.optim.AdamW(model.parameters(), lr=lr0, weight_decay=float(p.get("weight_decay", 0.0)))
    lr_at = schedule(opt, total)
    eos = tokenizer.eos_token_id
    if ctx.is_main:
        print(
            f"recipe {args.recipe} (ppo) on {args.model} with reward model {ref}: {len(prompts)} prompts, "
            f"{plan.global_batch} prompts x {k} answers per step, beta {beta}, clip {clip}, {epochs} epoch(s)",
            flush=True,
        )
    last = None
    share = plan.share(ctx.rank)
    for step in sv.steps(until, model=model, optimizer=opt):
        began = time.perf_counter()
        lr = lr0 * lr_at(step)
        for group in opt.param_groups:
            group["lr"] = lr
        first = step * plan.global_batch + ctx.rank * share
        torch.manual_seed(int(p.get("seed", 0)) * 100003 + step * 1009 + ctx.rank)  # rollouts: reproducible
        rollouts = []
        scores, kls, shaped_all, lengths = [], [], [], []
        for j in range(share):
            prompt = torch.tensor([prompts[(first + j) % len(prompts)]] * k, device=ctx.device)
            with torch.no_grad():
                seq = inner.generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    do_sample=True,
                    top_k=0,
                    max_new_tokens=new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
                start = prompt.shape[1]
                answer = seq[:, start:]
                ended = (answer == eos).int() if eos is not None else torch.zeros_like(answer)
                mask = ((ended.cumsum(-1) - ended) == 0).float()  # up to and including the first end token
                old = _answer_logps(inner, seq, start, mask)
                kl = old - _answer_logps(reference, seq, start, mask)
                keep = torch.cat([torch.ones_like(prompt), mask.long()], dim=1)
                score = scorer(seq, attention_mask=keep).logits[:, 0].float()
                shaped = score - beta * kl
                advantage = shaped - (shaped.sum() - shaped) / (k - 1)
            rollouts.append((seq, start, mask, old, advantage))
            scores.append(score)
            kls.append(kl)
            shaped_all.append(shaped)
            lengths.append(mask.sum())
        loss_sum = 0.0
        for _ in range(epochs):
            opt.zero_grad(set_to_none=True)
            for seq, start, mask, old, advantage in rollouts:
                ratio = torch.exp(_answer_logps(model, seq, start, mask) - old)
                objective = torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage)
                loss = -objective.sum()
                (loss * (ctx.world_size / (plan.global_batch * k))).backward()
                loss_sum += float(loss.detach())
            max_norm = float(p.get("max_grad_norm", 0.0))
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm if max_norm > 0 else float("inf"))
            opt.step()
        n = plan.global_batch * k
        sums = _all_sum(
            [
                float(torch.cat(scores).sum()),
                float(torch.cat(kls).sum()),
                float(torch.cat(shaped_all).sum()),
                float(torch.stack(lengths).sum()),
                loss_sum,
            ],
            ctx.device,
        )
        elapsed = max(time.perf_counter() - began, 1e-9)
        metrics: dict[str, Any] = {
            "reward": sums[0] / n,
            "kl": sums[1] / n,
            "reward_shaped": sums[2] / n,
            "loss": sums[4] / (n * epochs),
            "lr": lr,
            "tokens": sums[3],
            "tokens_per_s": sums[3] / elapsed,
        }
        sv.log_metrics(step, **metrics)
        if ctx.is_main:
            print(f"step {step} reward {metrics['reward']:.4f} kl {metrics['kl']:.4f} loss {metrics['loss']:.4f}")
        if on_step is not None:
            on_step(step, metrics)
        last = step
    if sv.stop_requested() or (last is not None and last + 1 < total):
        return None
    return model
