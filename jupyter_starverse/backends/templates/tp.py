"""Template ``tp``: tensor parallel over a 2-D DeviceMesh (data x tensor), GPUs with NCCL.

The MLP of every block is split column-wise then row-wise across the ``tp`` dimension
(``STARVERSE_TENSOR_PARALLEL`` ranks); the data-parallel dimension shards the rest with
FSDP2. Launch with ``template="tp", tensor_parallel=N`` and a GPU type.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from jupyter_starverse import runtime as sv
from jupyter_starverse.backends.templates._lm import CharData, TinyLM, load_text


def main() -> None:
    ctx = sv.init()
    env = sv.job_env()
    tp = int(env.tensor_parallel)
    mesh = init_device_mesh(ctx.device.split(":")[0], (ctx.world_size // tp, tp), mesh_dim_names=("dp", "tp"))
    mounts = env.mounts
    text = load_text(sv.mount_path(next(iter(mounts))) if len(mounts) == 1 else None)
    torch.manual_seed(0)
    data = CharData(text, seq_len=64, seed=1000 + mesh["dp"].get_local_rank())
    model = TinyLM(data.vocab, dim=256, heads=8, layers=4).to(ctx.device)
    for block in model.blocks:
        parallelize_module(block.get_submodule("mlp"), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in sv.steps(model=model, optimizer=opt):
        x, y = data.batch(8)
        logits = model(x.to(ctx.device))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(ctx.device).reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        sv.log_metrics(step, loss=loss.detach())


if __name__ == "__main__":
    main()
