"""Template ``ddp``: a small transformer LM trained with DistributedDataParallel.

Runs on CPU (gloo) and GPU (nccl). ``--data NAME`` reads the ``*.txt`` files of a mounted
catalog dataset (default: the only mount, else a built-in text). Steps and checkpoint
interval come from the launch (``--steps``, ``checkpoint_every``).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from jupyter_starverse import runtime as sv
from jupyter_starverse.backends.templates._lm import CharData, TinyLM, load_text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=None, help="catalog dataset mounted with --mount")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="slow each step down (tests)")
    args = parser.parse_args()

    ctx = sv.init()
    mounts = sv.job_env().mounts
    name = args.data or (next(iter(mounts)) if len(mounts) == 1 else None)
    text = load_text(sv.mount_path(name) if name else None)
    torch.manual_seed(0)  # same initial weights on every rank
    data = CharData(text, seq_len=args.seq_len, seed=1000 + ctx.rank)
    model = sv.wrap(TinyLM(data.vocab, seq_len=args.seq_len))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if ctx.is_main:
        params = sum(p.numel() for p in model.parameters())
        print(f"training {params} parameters on {ctx.world_size} ranks ({ctx.device}, {sv.job_env().template})")
    t0 = time.time()
    for step in sv.steps(model=model, optimizer=opt):
        x, y = data.batch(args.batch)
        logits = model(x.to(ctx.device))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(ctx.device).reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        sv.log_metrics(step, loss=loss.detach(), tokens=(step + 1) * args.batch * args.seq_len * ctx.world_size)
        if ctx.is_main and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)


if __name__ == "__main__":
    main()
