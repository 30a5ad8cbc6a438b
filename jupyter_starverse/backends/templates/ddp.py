"""Template ``ddp``: a small transformer LM trained with DistributedDataParallel.

Runs on CPU (gloo) and GPU (nccl). ``--data NAME`` reads the ``*.txt`` files of a mounted
catalog dataset (default: the only mount, else a built-in text). Steps and checkpoint
interval come from the launch (``--steps``, ``checkpoint_every``). The global batch
(``--global-batch``, default ``--batch`` x ranks) is kept when a resume changes the world size:
each rank trains on its share in gradient-accumulation steps of at most ``--batch`` sequences.
"""

from __future__ import annotations

import time

import torch

from jupyter_starverse import runtime as sv
from jupyter_starverse.backends.templates._lm import CharData, TinyLM, lm_loss, load_text, template_args


def main() -> None:
    args = template_args(__doc__)
    ctx = sv.init()
    mounts = sv.job_env().mounts
    name = args.data or (next(iter(mounts)) if len(mounts) == 1 else None)
    text = load_text(sv.mount_path(name) if name else None)
    torch.manual_seed(0)  # same initial weights on every rank
    data = CharData(text, seq_len=args.seq_len, seed=1000 + ctx.rank)
    lm = TinyLM(data.vocab, seq_len=args.seq_len, layers=args.layers)
    flops = lm.flops_per_token()  # of the full model, before FSDP shards it
    model = sv.wrap(lm)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    plan = sv.keep_global_batch(micro_batch=args.batch, world_size=ctx.world_size, global_batch=args.global_batch)
    if ctx.is_main:
        params = sum(p.numel() for p in model.parameters())
        print(f"training {params} parameters on {ctx.world_size} ranks ({ctx.device}, {sv.job_env().template})")
    t0 = time.time()
    meter = sv.Throughput(flops_per_token=flops, cards=ctx.world_size)
    for step in sv.steps(model=model, optimizer=opt, batch=plan):
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=ctx.device)
        for size in plan.chunks(ctx.rank):
            x, y = data.batch(max(size, 1))  # a 0-sample chunk still runs, weighted 0: collectives stay in step
            loss = lm_loss(model(x.to(ctx.device)), y.to(ctx.device))
            # DDP / FSDP average over ranks: weighting by the share makes it the mean of the global batch
            (loss * (size * ctx.world_size / plan.global_batch)).backward()  # type: ignore[no-untyped-call]
            total += loss.detach() * size
        opt.step()
        loss = total / plan.share(ctx.rank)
        rates = meter.step(plan.global_batch * args.seq_len)  # tokens/s and TFLOPS/card for the monitor
        sv.log_metrics(step, loss=loss, tokens=(step + 1) * plan.global_batch * args.seq_len, **rates)
        if ctx.is_main and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)


if __name__ == "__main__":
    main()
