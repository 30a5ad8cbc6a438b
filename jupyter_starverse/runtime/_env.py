"""The job environment a training process sees, parsed once (the runtime's settings)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["JobEnv", "job_env"]


def _int(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = env.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        return default


def _float(env: Mapping[str, str], name: str) -> float | None:
    try:
        value = float(env.get(name, "").strip() or "nan")
    except ValueError:
        return None
    return value if value > 0 and value != float("inf") else None


@dataclass(frozen=True)
class JobEnv:
    """What the launcher told this process: its rank, the run folder, steps, mounts."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    node: int = 0
    restart: int = 0
    job_id: str | None = None
    run_dir: Path | None = None
    checkpoint_dir: Path | None = None
    resume_from: Path | None = None
    steps: int | None = None
    checkpoint_every: int | None = None
    template: str = "ddp"
    accelerator: str = "cpu"
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    tensorboard_dir: Path | None = None
    mounts: Mapping[str, str] = field(default_factory=dict)
    attempt: int = 0  # the launcher's relaunch count of the whole job (STARVERSE_ATTEMPT)
    preempt_exit: int | None = None  # exit with this code after a SIGTERM stop (STARVERSE_PREEMPT_EXIT)
    stop_grace: float | None = None  # seconds the launcher allows from SIGTERM to SIGKILL
    reference_curve: str | None = None  # a reproduction's reference loss curve (STARVERSE_REFERENCE_CURVE)
    # warn: departures from the curve are warned about; draw: drawn beside it only (a --small run's
    # toy model is no reproduction of the full-size run the curve is) (STARVERSE_REFERENCE_CHECK)
    reference_check: str = "warn"

    @property
    def distributed(self) -> bool:
        """True under torchrun (``WORLD_SIZE`` and ``MASTER_ADDR`` set)."""
        return "MASTER_ADDR" in os.environ and "WORLD_SIZE" in os.environ

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobEnv:
        env = os.environ if environ is None else environ

        def path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value) if value else None

        try:
            mounts = json.loads(env.get("STARVERSE_MOUNTS", "") or "{}")
        except ValueError:
            mounts = {}
        run_dir = path("STARVERSE_EXPERIMENT_DIR")
        return cls(
            rank=_int(env, "RANK", 0) or 0,
            local_rank=_int(env, "LOCAL_RANK", 0) or 0,
            world_size=_int(env, "WORLD_SIZE", 1) or 1,
            node=_int(env, "STARVERSE_NODE_INDEX", 0) or 0,
            restart=_int(env, "TORCHELASTIC_RESTART_COUNT", 0) or 0,
            job_id=env.get("STARVERSE_JOB_ID") or None,
            run_dir=run_dir,
            checkpoint_dir=path("STARVERSE_CHECKPOINT_DIR") or (run_dir / "checkpoints" if run_dir else None),
            resume_from=path("STARVERSE_RESUME_FROM"),
            steps=_int(env, "STARVERSE_STEPS", None),
            checkpoint_every=_int(env, "STARVERSE_CHECKPOINT_EVERY", None),
            template=env.get("STARVERSE_TEMPLATE", "ddp") or "ddp",
            accelerator=(env.get("STARVERSE_ACCELERATOR", "cpu") or "cpu").lower(),
            tensor_parallel=_int(env, "STARVERSE_TENSOR_PARALLEL", 1) or 1,
            pipeline_parallel=_int(env, "STARVERSE_PIPELINE_PARALLEL", 1) or 1,
            tensorboard_dir=path("TENSORBOARD_LOGDIR"),
            mounts={str(k): str(v) for k, v in mounts.items()} if isinstance(mounts, dict) else {},
            attempt=_int(env, "STARVERSE_ATTEMPT", 0) or 0,
            preempt_exit=_int(env, "STARVERSE_PREEMPT_EXIT", None),
            reference_curve=env.get("STARVERSE_REFERENCE_CURVE") or None,
            reference_check=(env.get("STARVERSE_REFERENCE_CHECK") or "warn").strip().lower(),
            stop_grace=_float(env, "STARVERSE_STOP_GRACE"),
        )


@functools.lru_cache(maxsize=1)
def job_env() -> JobEnv:
    """The environment of this process (read once)."""
    return JobEnv.from_env()
