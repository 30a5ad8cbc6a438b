"""LLaMA-Factory: the recipe's parameters rendered as its training YAML and ``dataset_info.json``.

LLaMA-Factory pins older transformers/trl than this project, so it lives in its own environment
(a venv with ``llamafactory``, named by ``STARVERSE_LLAMAFACTORY`` or found as ``llamafactory-cli``
on PATH). A launch checks for it and refuses with what to install when it is missing. The job runs
under our torchrun: every rank runs our worker (standard library: the rank's log, pid and error
records) with LLaMA-Factory's Python, which starts LLaMA-Factory's own per-rank entry (``run_exp``,
what ``FORCE_TORCHRUN=1 llamafactory-cli train`` starts on each rank) with the rendered files
written into the run folder. A ``--resume`` launch continues from the newest ``checkpoint-N`` of
the experiment's earlier runs (this user's own, not writable by others); a restart of the same run
(a preemption) continues from its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from jupyter_starverse.backends import _worker
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.experiments import ExperimentPaths
from jupyter_starverse.jobmodel import JobSpec

from ._model import Recipe, RecipeStore

__all__ = [
    "DATASET_NAME",
    "ENTRY",
    "dataset_info",
    "find_llamafactory",
    "latest_checkpoint_of",
    "llamafactory_config",
    "llamafactory_spec",
    "render_yaml",
]

DATASET_NAME = "starverse"
ENTRY = Path(__file__).with_name("train") / "llamafactory_entry.py"
WORKER = Path(_worker.__file__)  # standard library only: it runs under LLaMA-Factory's Python too
_STAGE = {"sft": "sft", "dpo": "dpo", "kto": "kto", "reward": "rm", "cpt": "pt"}
_INSTALL = (
    "LLaMA-Factory needs its own environment: `python -m venv lf && lf/bin/pip install llamafactory==0.9.5` "
    "(it pins transformers <= 5.6 and trl <= 0.24), then set STARVERSE_LLAMAFACTORY=lf/bin/llamafactory-cli "
    "(or put lf/bin on PATH)"
)


def dataset_info(objective: str, files: list[str]) -> dict[str, Any]:
    """``dataset_info.json``: one dataset named ``starverse`` over ``files`` (folders or ``*.jsonl``)."""
    entry: dict[str, Any] = {"file_name": files[0] if len(files) == 1 else files}
    if objective == "sft":
        entry |= {
            "formatting": "sharegpt",
            "columns": {"messages": "messages"},
            "tags": {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
                "system_tag": "system",
            },
        }
    elif objective in ("dpo", "reward"):
        entry |= {"ranking": True, "columns": {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"}}
    elif objective == "kto":
        entry |= {"columns": {"prompt": "prompt", "response": "completion", "kto_tag": "label"}}
    else:
        entry |= {"columns": {"prompt": "text"}}
    return {DATASET_NAME: entry}


def llamafactory_config(
    values: dict[str, Any],
    *,
    objective: str,
    model_dir: str,
    dataset_dir: str,
    output_dir: str,
    accumulation: int,
    checkpoint_every: int | None = None,
    on_gpu: bool = True,
) -> dict[str, Any]:
    """The training YAML (as a dict) for the recipe's parameters and the job's batch plan.

    Precision ``auto`` is bf16 on GPUs and fp32 on CPU (``use_cpu``: the HF Trainer refuses bf16
    without a GPU unless told to use the CPU, and bf16 autocast is slower there). Checkpoints follow
    the job's schedule (``checkpoint_every``, else every tenth of the steps) into
    ``output_dir/checkpoint-N``, the two newest kept; the per-rank entry resumes from the newest one
    and reports every logged step into the run's ``metrics.jsonl`` (``llamafactory_entry``).
    """
    precision = values.get("precision", "auto")
    config: dict[str, Any] = {
        "model_name_or_path": model_dir,
        "trust_remote_code": False,
        "stage": _STAGE[objective],
        "do_train": True,
        "finetuning_type": values.get("finetuning_type", "full"),
        "dataset": DATASET_NAME,
        "dataset_dir": dataset_dir,
        "template": "default",
        "cutoff_len": values["seq_len"],
        "overwrite_cache": True,
        "output_dir": output_dir,
        "overwrite_output_dir": True,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": checkpoint_every or max(1, int(values["steps"]) // 10),
        "save_total_limit": 2,
        "save_only_model": False,  # optimizer, scheduler and RNG too: a resume continues the run
        "report_to": "none",
        "per_device_train_batch_size": values["micro_batch"],
        "gradient_accumulation_steps": accumulation,
        "learning_rate": values["lr"],
        "max_steps": values["steps"],
        "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": values["min_lr_ratio"]},
        "warmup_steps": values["warmup_steps"],
        "max_grad_norm": values["max_grad_norm"],
        "weight_decay": values["weight_decay"],
        "seed": values["seed"],
        "bf16": precision == "bf16" or (precision == "auto" and on_gpu),
        "fp16": precision == "fp16",
        "include_num_input_tokens_seen": True,  # the monitor's tokens/s
        "ddp_timeout": 1800,
    }
    if objective in ("dpo", "kto"):
        config["pref_beta"] = values.get("beta", 0.1)
        config["pref_loss"] = "sigmoid"
    if not on_gpu:
        config["use_cpu"] = True
    if config["finetuning_type"] == "lora":
        config["lora_target"] = "all"
    return config


def render_yaml(config: dict[str, Any]) -> str:
    import yaml

    return str(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def _shebang_python(cli: Path) -> str | None:
    """The interpreter a ``llamafactory-cli`` script starts (its ``#!`` line)."""
    try:
        first = cli.read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError, UnicodeError):
        return None
    python = first[2:].strip().split()[0] if first.startswith("#!") and first[2:].strip() else ""
    return python if python and Path(python).is_file() else None


def find_llamafactory(configured: str | None = None) -> str | None:
    """The Python of LLaMA-Factory's environment (``None``: not installed).

    ``configured`` (``STARVERSE_LLAMAFACTORY``) names its ``llamafactory-cli`` or its ``python``; without
    it, the ``llamafactory-cli`` on PATH. A configured path that is not such an environment is refused
    with what to set, rather than treated as absent.
    """
    if not configured:
        cli = shutil.which("llamafactory-cli")
        return _shebang_python(Path(cli)) if cli else None
    path = Path(configured).expanduser()
    if path.is_dir():  # the environment's folder
        path = path / "bin" / "python"
    python = _shebang_python(path) if path.name.startswith("llamafactory-cli") else str(path)
    hint = "set STARVERSE_LLAMAFACTORY to ENV/bin/llamafactory-cli or ENV/bin/python of the venv with llamafactory"
    if python is None or not Path(python).is_file():
        raise BadInputError(f"STARVERSE_LLAMAFACTORY={configured}: no such interpreter", field="recipe", hint=hint)
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('llamafactory') is None)"
    try:
        found = subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if not found:
        raise BadInputError(
            f"STARVERSE_LLAMAFACTORY={configured}: {python} cannot import llamafactory", field="recipe", hint=hint
        )
    return python


def latest_checkpoint_of(experiment: ExperimentPaths) -> Path | None:
    """The newest complete ``checkpoint-N`` LLaMA-Factory wrote in any run of ``experiment``.

    Only this user's own folders that nobody else may write count (resuming unpickles the trainer's
    RNG state); newest by the time its ``trainer_state.json`` was written, then by step.
    """
    found: list[tuple[float, int, Path]] = []
    me = os.geteuid()
    for state in experiment.runs.glob("*/model/checkpoint-*/trainer_state.json"):
        folder = state.parent
        step = folder.name.removeprefix("checkpoint-")
        try:
            infos = [folder.lstat(), state.lstat(), folder.parent.lstat()]
        except OSError:
            continue
        mine = all(i.st_uid == me and not i.st_mode & 0o022 for i in infos)
        if step.isdigit() and mine and not folder.is_symlink():
            found.append((infos[1].st_mtime, int(step), folder))
    return max(found)[2] if found else None


def llamafactory_spec(
    service: RecipeStore,
    recipe: Recipe,
    *,
    model: str,
    data: tuple[str, ...],
    values: dict[str, Any],
    name: str | None,
    **job: Any,
) -> JobSpec:
    """A job that runs LLaMA-Factory on every rank; refused when its environment is missing."""
    from .train import batch_plan

    python = find_llamafactory(service.settings.llamafactory)
    if python is None:
        raise BadInputError(f"recipe {recipe.name}: `llamafactory-cli` is not on PATH", field="recipe", hint=_INSTALL)
    world = int(job.get("nodes", 1)) * int(job.get("procs_per_node", 1))
    plan = batch_plan(global_batch=values["global_batch"], micro_batch=values["micro_batch"], world_size=world)
    files = [str(service.catalog.mount(d)) for d in data]
    config = llamafactory_config(
        {**values, "micro_batch": plan.micro_batch},
        objective=recipe.objective,
        model_dir=str(service.catalog.mount(model)),
        dataset_dir="<run>/llamafactory",
        output_dir="<run>/model",
        accumulation=plan.accumulation,
        checkpoint_every=job.get("checkpoint_every"),
        on_gpu=str(job.get("accelerator") or "cpu").lower() != "cpu",
    )
    argv = [
        python,
        str(WORKER),
        str(ENTRY),
        "--config",
        json.dumps(config),
        "--dataset-info",
        json.dumps(dataset_info(recipe.objective, files)),
    ]
    mounts = tuple(dict.fromkeys([model, *data, *job.pop("mounts", ())]))
    spec = JobSpec(name=name or recipe.name, command=tuple(argv), mounts=mounts, steps=values["steps"], **job)
    if spec.resume:
        last = latest_checkpoint_of(ExperimentPaths.of(service.settings.experiments, spec.experiment_name))
        if last is not None:
            spec = spec.replace(command=(*argv, "--resume-from", str(last)))
    return spec
