"""``log_metrics``: metrics.jsonl in the run folder, plus TensorBoard and W&B when installed."""

from __future__ import annotations

import importlib.util
import json
import time
from typing import Any

from ._env import job_env

__all__ = ["close_metrics", "log_metrics"]

_sinks: dict[str, Any] = {}


def _number(value: Any) -> float:
    if hasattr(value, "item"):
        value = value.item()
    return float(value)


def _tensorboard() -> Any:
    if "tb" not in _sinks:
        env = job_env()
        writer = None
        if env.tensorboard_dir is not None and importlib.util.find_spec("tensorboard") is not None:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(log_dir=str(env.tensorboard_dir), flush_secs=10)
        _sinks["tb"] = writer
    return _sinks["tb"]


def _wandb() -> Any:
    if "wandb" not in _sinks:
        env = job_env()
        run = None
        if env.run_dir is not None and importlib.util.find_spec("wandb") is not None:
            import wandb

            run = wandb.init(mode="offline", dir=str(env.run_dir), name=env.job_id, resume="allow")
        _sinks["wandb"] = run
    return _sinks["wandb"]


def log_metrics(step: int, *, all_ranks: bool = False, **values: Any) -> None:
    """Record ``values`` (numbers or 0-d tensors) at ``step``; rank 0 only unless ``all_ranks``."""
    env = job_env()
    if env.rank != 0 and not all_ranks:
        return
    numbers = {k: _number(v) for k, v in values.items()}
    record = {"step": int(step), "time": time.time(), "rank": env.rank, **numbers}
    if env.run_dir is None:
        print(" ".join([f"step {step}", *(f"{k}={v:.6g}" for k, v in numbers.items())]), flush=True)
        return
    if "jsonl" not in _sinks:
        env.run_dir.mkdir(parents=True, exist_ok=True)
        _sinks["jsonl"] = (env.run_dir / "metrics.jsonl").open("a", buffering=1)
    _sinks["jsonl"].write(json.dumps(record) + "\n")
    if env.rank == 0:
        tb = _tensorboard()
        if tb is not None:
            for k, v in numbers.items():
                tb.add_scalar(k, v, step)
        run = _wandb()
        if run is not None:
            run.log(numbers, step=step)


def close_metrics() -> None:
    """Flush and close every sink (called at the end of :func:`steps`)."""
    for key, sink in list(_sinks.items()):
        if sink is None:
            continue
        if key == "jsonl" or key == "tb":
            sink.close()
        elif key == "wandb":
            sink.finish()
    _sinks.clear()
