"""Template ``tp``: tensor parallel with DTensor over a 2-D DeviceMesh (data x tensor), CPU or GPUs.

The MLP of every block is split column-wise then row-wise (``parallelize_module`` with
``ColwiseParallel`` / ``RowwiseParallel``, as Megatron-LM splits it) across the ``tp`` dimension
(``STARVERSE_TENSOR_PARALLEL`` ranks); when the world holds more than one tensor-parallel group
the data-parallel dimension shards every block with FSDP2 (2-D: fsdp x tp). The same code runs
on gloo (CPU) and NCCL (GPUs). Checkpoints are DCP: a resume may change the layout (tp -> ddp,
pp, another tp or dp degree); the global batch is kept (see ``ddp.py``).
Launch with ``template="tp", tensor_parallel=N`` (world size a multiple of N).
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from jupyter_starverse import runtime as sv
from jupyter_starverse.backends.templates._common import StepReport, accumulate, dataset_text, split_mesh
from jupyter_starverse.backends.templates._lm import CharData, TinyLM, template_args


def main() -> None:
    args = template_args(__doc__)
    ctx = sv.init()
    env = sv.job_env()
    tp = int(env.tensor_parallel)
    hint = "choose a tensor-parallel degree that divides nodes x processes per node"
    dp, mesh = split_mesh(ctx, tp, dim="tp", field="tensor_parallel", hint=hint)
    dp_rank = mesh["dp"].get_local_rank()
    text = dataset_text(args.data, env)
    torch.manual_seed(0)  # the same full model as ddp's on every rank, then split
    data = CharData(text, seq_len=args.seq_len, seed=1000 + dp_rank)  # one stream per tensor-parallel group
    model = TinyLM(data.vocab, seq_len=args.seq_len, layers=args.layers).to(ctx.device)
    flops = model.flops_per_token()  # of the full model, before the split
    for block in model.blocks:
        parallelize_module(block.get_submodule("mlp"), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    if dp > 1:  # 2-D: FSDP2 over the data-parallel dimension
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    plan = sv.keep_global_batch(micro_batch=args.batch, world_size=dp, global_batch=args.global_batch)
    if ctx.is_main:
        print(f"tensor parallel {tp} x data parallel {dp} on {ctx.device} ({ctx.backend})", flush=True)
    report = StepReport(ctx, args, plan, flops=flops)
    for step in sv.steps(model=model, optimizer=opt, batch=plan):
        opt.zero_grad(set_to_none=True)
        loss = accumulate(model, data, plan, ctx, dp_rank=dp_rank, dp=dp)
        opt.step()
        report(step, loss)


if __name__ == "__main__":
    main()
