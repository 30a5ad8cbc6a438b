"""Training scripts the budget-cap tests run as real jobs."""

from __future__ import annotations

# Runs "forever" (100000 steps) and never checkpoints on a schedule: a checkpoint can only
# come from the SIGTERM the cap sends (or the job's own cap, inside the job).
FOREVER = """
import time
import torch
from jupyter_starverse import runtime as sv

sv.init()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in sv.steps(model=model, optimizer=opt, checkpoint_every=0):
    loss = model(torch.ones(2, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sv.log_metrics(step, loss=loss.item())
    time.sleep(0.1)
"""
