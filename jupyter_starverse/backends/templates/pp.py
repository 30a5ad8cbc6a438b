"""Template ``pp``: pipeline parallel with ``torch.distributed.pipelining`` (GPipe), GPUs with NCCL.

The blocks of the LM are cut into ``STARVERSE_PIPELINE_PARALLEL`` stages; stage 0 also
holds the embeddings, the last stage the head and the loss. Launch with
``template="pp", pipeline_parallel=N`` and a GPU type (world size = N here).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from jupyter_starverse import runtime as sv
from jupyter_starverse.backends.templates._lm import CharData, TinyLM, load_text


class Stage(nn.Module):
    """Blocks ``lo:hi`` of the LM, with the embeddings on the first and the head on the last stage.

    Blocks keep their index in the full model as their name, so every parameter has one
    name across all stages and the DCP checkpoint of the pipeline is consistent.
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


def main() -> None:
    ctx = sv.init()
    stages = int(sv.job_env().pipeline_parallel)
    mounts = sv.job_env().mounts
    text = load_text(sv.mount_path(next(iter(mounts))) if len(mounts) == 1 else None)
    torch.manual_seed(0)
    data = CharData(text, seq_len=64, seed=1000)  # every stage draws the same batches
    layers = 2 * stages
    lm = TinyLM(data.vocab, dim=256, heads=8, layers=layers)
    per = layers // stages
    me = ctx.rank % stages
    module = Stage(lm, me * per, (me + 1) * per, first=me == 0, last=me == stages - 1).to(ctx.device)
    stage = PipelineStage(module, me, stages, torch.device(ctx.device))

    def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss_fn)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    for step in sv.steps(model=module, optimizer=opt):
        x, y = data.batch(16)
        opt.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if me == 0:
            schedule.step(x.to(ctx.device))
        elif me == stages - 1:
            schedule.step(target=y.to(ctx.device), losses=losses)
        else:
            schedule.step()
        opt.step()
        if losses:
            sv.log_metrics(step, all_ranks=True, loss=torch.stack(losses).mean())


if __name__ == "__main__":
    main()
