"""Template ``ddp``: a small transformer LM trained with DistributedDataParallel.

Runs on CPU (gloo) and GPU (nccl). ``--data NAME`` reads the ``*.txt`` files of a mounted
catalog dataset (default: the only mount, else a built-in text). Steps and checkpoint
interval come from the launch (``--steps``, ``checkpoint_every``). The global batch
(``--global-batch``, default ``--batch`` x ranks) is kept when a resume changes the world size:
each rank trains on its share in gradient-accumulation steps of at most ``--batch`` sequences.
"""

from __future__ import annotations

import torch

from jupyter_starverse import runtime as sv
from jupyter_starverse.backends.templates._common import StepReport, accumulate, dataset_text
from jupyter_starverse.backends.templates._lm import CharData, TinyLM, template_args


def main() -> None:
    args = template_args(__doc__)
    ctx = sv.init()
    env = sv.job_env()
    text = dataset_text(args.data, env)
    torch.manual_seed(0)  # same initial weights on every rank
    data = CharData(text, seq_len=args.seq_len, seed=1000 + ctx.rank)
    lm = TinyLM(data.vocab, seq_len=args.seq_len, layers=args.layers)
    flops = lm.flops_per_token()  # of the full model, before FSDP shards it
    model = sv.wrap(lm)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    plan = sv.keep_global_batch(micro_batch=args.batch, world_size=ctx.world_size, global_batch=args.global_batch)
    if ctx.is_main:
        params = sum(p.numel() for p in model.parameters())
        print(f"training {params} parameters on {ctx.world_size} ranks ({ctx.device}, {env.template})")
    report = StepReport(ctx, args, plan, flops=flops)
    for step in sv.steps(model=model, optimizer=opt, batch=plan):
        opt.zero_grad(set_to_none=True)
        loss = accumulate(model, data, plan, ctx, dp_rank=ctx.rank, dp=ctx.world_size)
        opt.step()
        report(step, loss)


if __name__ == "__main__":
    main()
