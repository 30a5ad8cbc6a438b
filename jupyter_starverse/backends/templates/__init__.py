"""Parallelism templates: example scripts, GPU requirements, and Megatron-LM / DeepSpeed arguments.

``ddp``, ``fsdp``, ``tp`` (DTensor tensor parallel, 2-D with FSDP2) and ``pp``
(``torch.distributed.pipelining``) run anywhere: gloo on CPU, NCCL on GPUs, the same code.
``tp`` and ``pp`` split the model and need at least two processes. The Megatron-LM and
DeepSpeed frameworks need GPUs (CUDA-only kernels): on CPU they are refused with an error
that names the CPU path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_starverse._volume import write_atomic
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import folder_modes
from jupyter_starverse.jobmodel import TEMPLATES, JobSpec

__all__ = ["check_template", "deepspeed_config", "example_script", "framework_args", "megatron_args"]

_HERE = Path(__file__).parent


def example_script(template: str) -> Path:
    """The example training script of ``template`` (shipped with the package)."""
    if template not in TEMPLATES:
        raise BadInputError(
            f"unknown template {template!r}", field="template", hint=f"use one of {', '.join(TEMPLATES)}"
        )
    return _HERE / f"{template}.py"


def check_template(spec: JobSpec) -> None:
    """Refuse GPU-only frameworks on CPU, saying what to use instead (every template runs on CPU:
    a split model on fewer ranks than its degrees is refused by ``JobSpec`` itself)."""
    if spec.is_gpu:
        return
    if spec.framework != "torch":
        name = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed"}[spec.framework]
        raise BadInputError(
            f"JobSpec.framework: {name} needs GPUs (its kernels are CUDA-only)",
            field="framework",
            hint="pick a GPU type (--gpu a100-80g) or, on CPU, use framework='torch' with template='ddp' or 'fsdp'",
        )


def megatron_args(spec: JobSpec, *, checkpoint_dir: str, tensorboard_dir: str) -> list[str]:
    """Megatron-LM ``pretrain_*.py`` arguments for the spec's parallelism, steps and checkpoints."""
    dp = spec.world_size // (spec.tensor_parallel * spec.pipeline_parallel)
    args = [
        "--tensor-model-parallel-size", str(spec.tensor_parallel),
        "--pipeline-model-parallel-size", str(spec.pipeline_parallel),
        "--distributed-backend", "nccl",
        "--save", checkpoint_dir,
        "--load", checkpoint_dir,
        "--tensorboard-dir", tensorboard_dir,
    ]  # fmt: skip
    if spec.template == "fsdp":
        args += ["--use-torch-fsdp2"]
    elif dp > 1:
        args += ["--use-distributed-optimizer"]
    if spec.steps is not None:
        args += ["--train-iters", str(spec.steps)]
    if spec.checkpoint_every is not None:
        args += ["--save-interval", str(spec.checkpoint_every)]
    return args


def deepspeed_config(spec: JobSpec) -> dict[str, Any]:
    """A DeepSpeed config: ZeRO-3 for ``fsdp``, ZeRO-1 for ``ddp``, pipeline stages for ``pp``."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3 if spec.template == "fsdp" else 1},
        "steps_per_print": 10,
    }
    if spec.template == "pp":
        config["pipeline"] = {"stages": spec.pipeline_parallel}
        config["zero_optimization"] = {"stage": 1}
    if spec.template == "tp":
        config["tensor_parallel"] = {"autotp_size": spec.tensor_parallel}
    return config


def framework_args(spec: JobSpec, *, run_dir: str = "<run>") -> list[str]:
    """Arguments appended to the script for ``spec.framework`` (none for plain torch)."""
    if spec.framework == "megatron":
        return megatron_args(spec, checkpoint_dir=f"{run_dir}/checkpoints", tensorboard_dir=f"{run_dir}/tensorboard")
    if spec.framework == "deepspeed":
        return ["--deepspeed", "--deepspeed_config", f"{run_dir}/ds_config.json"]
    return []


def write_framework_files(spec: JobSpec, run_dir: Path) -> None:
    """Files a framework reads at start (DeepSpeed's config), with the run folder's file mode (0600 private,
    0640 in a group's folder) whatever the umask; a link planted at the path is replaced, never written through."""
    if spec.framework == "deepspeed":
        data = json.dumps(deepspeed_config(spec), indent=1).encode()
        write_atomic(run_dir / "ds_config.json", data, folder_modes(run_dir).file)
