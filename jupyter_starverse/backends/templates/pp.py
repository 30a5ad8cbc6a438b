"""Template ``pp``: pipeline parallel with ``torch.distributed.pipelining`` (1F1B), CPU or GPUs.

The blocks of the LM are cut into ``STARVERSE_PIPELINE_PARALLEL`` stages; stage 0 also holds
the embeddings, the last stage the head and the loss. The schedule is ``Schedule1F1B`` over the
micro batches of the batch plan (``--batch`` sequences each); with more ranks than stages, the
pipelines are replicated over a data-parallel dimension (gradients averaged, weighted by each
replica's share of the global batch). The same code runs on gloo (CPU) and NCCL (GPUs).
Checkpoints are DCP with the full model's parameter names, so a resume may change the layout
(pp -> ddp, tp, another number of stages); the global batch is kept (see ``ddp.py``).
Launch with ``template="pp", pipeline_parallel=N`` (world size a multiple of N).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from jupyter_starverse import runtime as sv
from jupyter_starverse.backends.templates._common import StepReport, dataset_text, split_mesh
from jupyter_starverse.backends.templates._lm import CharData, TinyLM, lm_loss, template_args


class Stage(nn.Module):
    """Blocks ``lo:hi`` of the LM, with the embeddings on the first and the head on the last stage.

    Blocks keep their index in the full model as their name, so every parameter has one
    name across all stages (and the same as in ddp's model): the DCP checkpoint of the
    pipeline is the full model's.
    """

    def __init__(self, lm: TinyLM, lo: int, hi: int, *, first: bool, last: bool) -> None:
        super().__init__()
        self.embed = lm.embed if first else None
        self.pos = lm.pos if first else None
        self.blocks = nn.ModuleDict({str(i): lm.blocks[i] for i in range(lo, hi)})
        self.ln = lm.ln if last else None
        self.head = lm.head if last else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.embed is not None and self.pos is not None:
            h = self.embed(h) + self.pos[: h.shape[1]]
        t = h.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=h.device), diagonal=1)
        for block in self.blocks.values():
            h = block(h, mask)
        if self.head is not None and self.ln is not None:
            h = self.head(self.ln(h))
        return h


def stage_bounds(layers: int, stages: int, stage: int) -> tuple[int, int]:
    """Blocks ``lo:hi`` of ``stage`` (the first stages take one more when ``layers`` does not divide)."""
    base, extra = divmod(layers, stages)
    lo = stage * base + min(stage, extra)
    return lo, lo + base + (1 if stage < extra else 0)


def main() -> None:
    args = template_args(__doc__)
    ctx = sv.init()
    env = sv.job_env()
    stages = int(env.pipeline_parallel)
    hint = "choose a number of stages that divides nodes x processes per node"
    dp, mesh = split_mesh(ctx, stages, dim="pp", field="pipeline_parallel", hint=hint)
    me, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
    text = dataset_text(args.data, env)
    torch.manual_seed(0)  # the same full model as ddp's, then cut
    data = CharData(text, seq_len=args.seq_len, seed=1000 + dp_rank)  # every stage of a pipeline draws the same
    layers = max(args.layers, stages)
    lm = TinyLM(data.vocab, seq_len=args.seq_len, layers=layers)
    flops = lm.flops_per_token()  # of the full model, before the cut
    lo, hi = stage_bounds(layers, stages, me)
    module = Stage(lm, lo, hi, first=me == 0, last=me == stages - 1).to(ctx.device)
    pp_group = mesh["pp"].get_group()
    stage = PipelineStage(module, me, stages, torch.device(ctx.device), group=pp_group)
    plan = sv.keep_global_batch(micro_batch=args.batch, world_size=dp, global_batch=args.global_batch)
    if len(set(plan.chunks(dp_rank))) > 1:  # the schedule cuts equal micro batches
        print(f"note: micro batches of {plan.chunks(dp_rank)} sequences are cut evenly by the schedule", flush=True)
    # 1F1B keeps at most `stages` micro batches in flight; with fewer micro batches than stages, GPipe
    kind = Schedule1F1B if plan.accumulation >= stages else ScheduleGPipe
    schedule = kind(stage, n_microbatches=plan.accumulation, loss_fn=lm_loss)
    opt = torch.optim.AdamW(module.parameters(), lr=args.lr)
    last_rank = dist.get_global_rank(pp_group, stages - 1)
    if ctx.is_main:
        print(
            f"pipeline {stages} stages x data parallel {dp}, {kind.__name__} over {plan.accumulation} micro batches",
            flush=True,
        )
    report = StepReport(ctx, args, plan, flops=flops)
    for step in sv.steps(model=module, optimizer=opt, batch=plan):
        share = plan.share(dp_rank)
        x, y = data.batch(share)
        opt.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if me == 0:
            schedule.step(x.to(ctx.device))
        elif me == stages - 1:
            schedule.step(target=y.to(ctx.device), losses=losses)
        else:
            schedule.step()
        if dp > 1:  # each replica's gradient is its share's mean: weight by the share, sum
            for p in module.parameters():
                if p.grad is not None:
                    p.grad.mul_(share / plan.global_batch)
                    dist.all_reduce(p.grad, group=mesh["dp"].get_group())
        opt.step()
        loss = torch.stack(losses).mean().detach() if losses else torch.zeros((), device=ctx.device)
        dist.broadcast(loss, src=last_rank, group=pp_group)  # the first stage (rank 0) reports it
        report(step, loss)


if __name__ == "__main__":
    main()
