"""JobSpec: what to run, where and how big. Validated on construction.

The same spec drives every backend (local processes, Kubernetes) and every front door.
It round-trips through JSON (``to_json`` / ``from_json``) because it is stored as
``spec.json`` in the experiment folder, which is the job's truth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any

from ..errors import BadInputError

__all__ = ["JobSpec", "TEMPLATES", "BILLING_MODES", "FRAMEWORKS"]

TEMPLATES = ("ddp", "fsdp", "tp", "pp")
FRAMEWORKS = ("torch", "megatron", "deepspeed")
BILLING_MODES = ("on_demand", "daily", "weekly", "spot")

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_REF_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/[-._a-zA-Z0-9]+$")
_RESERVED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "STARVERSE_EXPERIMENT_DIR")


def _bad(field_name: str, why: str, hint: str | None = None) -> BadInputError:
    return BadInputError(f"JobSpec.{field_name}: {why}", field=field_name, hint=hint)


def _positive_int(name: str, value: object, *, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"must be a whole number, got {value!r}")
    if not 1 <= value <= upper:
        raise _bad(name, f"must be between 1 and {upper}, got {value}")
    return value


@dataclass(frozen=True)
class JobSpec:
    """A training job, independent of where it runs.

    Parameters
    ----------
    name
        Lower-case letters, digits, ``.``, ``_``, ``-`` (max 63); becomes part of the job id.
    script
        Path of a Python training script. Exactly one of ``script``, ``code``, ``command``.
    code
        Python source (a notebook cell body); written into the experiment folder as ``train.py``.
    command
        A full command instead of a script (for Megatron-LM / DeepSpeed launchers).
    args
        Arguments passed to the script.
    nodes, procs_per_node
        Topology: ``nodes`` machines (or pods, or local agent processes), each with
        ``procs_per_node`` ranks (one per GPU in GPU mode).
    accelerator
        ``"cpu"`` or a GPU type from the price / pool tables (``"a100-80g"``, ``"rtx4090"``).
    template
        Parallelism: ``ddp``, ``fsdp``, ``tp`` (tensor), ``pp`` (pipeline).
    tensor_parallel, pipeline_parallel
        Degrees for the ``tp`` / ``pp`` templates; their product must divide the world size.
    framework
        Who renders the launch command: plain ``torch`` (torchrun), ``megatron``, ``deepspeed``.
    mounts
        Catalog entry names made available to every rank.
    env
        Extra environment variables (plain values; no secrets here).
    secrets
        Environment variables taken from secrets by reference: ``{"HF_TOKEN": "hf-secret/token"}``.
    steps
        Number of training steps the script should run (exported as ``STARVERSE_STEPS``).
    max_restarts
        How often a failed worker group is restarted (torchrun ``--max-restarts``).
    checkpoint_every
        Steps between checkpoints (exported as ``STARVERSE_CHECKPOINT_EVERY``).
    billing
        ``on_demand`` (per second), ``daily``, ``weekly`` package, or ``spot``.
    budget
        Stop the job gracefully once its cost reaches this amount (price table currency).
    experiment
        Experiment name; defaults to ``name``. Runs of one experiment share checkpoints.
    resume
        Continue from the experiment's latest checkpoint.
    image
        Container image (Kubernetes only).
    cpu, memory
        Per-node requests for Kubernetes (``"8"``, ``"64Gi"``).
    """

    name: str
    script: str | None = None
    code: str | None = None
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()
    nodes: int = 1
    procs_per_node: int = 1
    accelerator: str = "cpu"
    template: str = "ddp"
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    framework: str = "torch"
    mounts: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    steps: int | None = None
    max_restarts: int = 0
    checkpoint_every: int | None = None
    billing: str = "on_demand"
    budget: Decimal | None = None
    experiment: str | None = None
    resume: bool = False
    image: str | None = None
    cpu: str | None = None
    memory: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise _bad(
                "name",
                f"{self.name!r} is not a valid job name",
                "use 1-63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit",
            )
        given = [n for n in ("script", "code", "command") if getattr(self, n)]
        if len(given) != 1:
            raise _bad(
                "script",
                "give exactly one of script, code or command"
                + (f" (got {', '.join(given)})" if given else " (got none)"),
            )
        if self.command is not None:
            set_(self, "command", tuple(str(c) for c in self.command))
        set_(self, "args", tuple(str(a) for a in self.args))
        set_(self, "mounts", tuple(self.mounts))
        _positive_int("nodes", self.nodes, upper=4096)
        _positive_int("procs_per_node", self.procs_per_node, upper=64)
        _positive_int("tensor_parallel", self.tensor_parallel, upper=4096)
        _positive_int("pipeline_parallel", self.pipeline_parallel, upper=4096)
        set_(self, "accelerator", str(self.accelerator).strip().lower())
        if not self.accelerator:
            raise _bad("accelerator", "must be 'cpu' or a GPU type such as 'a100-80g'")
        if self.template not in TEMPLATES:
            raise _bad("template", f"{self.template!r} is not one of {', '.join(TEMPLATES)}")
        if self.framework not in FRAMEWORKS:
            raise _bad("framework", f"{self.framework!r} is not one of {', '.join(FRAMEWORKS)}")
        model_parallel = self.tensor_parallel * self.pipeline_parallel
        if self.world_size % model_parallel:
            raise _bad(
                "tensor_parallel",
                f"tensor_parallel x pipeline_parallel = {model_parallel}"
                f" does not divide the world size {self.world_size}",
                "choose degrees whose product divides nodes x procs_per_node",
            )
        if self.template == "tp" and self.tensor_parallel < 2:
            raise _bad("tensor_parallel", "the tp template needs tensor_parallel >= 2")
        if self.template == "pp" and self.pipeline_parallel < 2:
            raise _bad("pipeline_parallel", "the pp template needs pipeline_parallel >= 2")
        env = dict(self.env)
        for key, value in env.items():
            if not _ENV_RE.match(str(key)):
                raise _bad("env", f"{key!r} is not a valid environment variable name")
            if key in _RESERVED_ENV:
                raise _bad("env", f"{key} is set by the launcher and cannot be overridden")
            env[key] = str(value)
        set_(self, "env", env)
        secrets = dict(self.secrets)
        for key, ref in secrets.items():
            if not _ENV_RE.match(str(key)):
                raise _bad("secrets", f"{key!r} is not a valid environment variable name")
            if not isinstance(ref, str) or not _SECRET_REF_RE.match(ref):
                raise _bad("secrets", f"{key}: {ref!r} is not a secret reference", "write it as 'secret-name/key'")
        set_(self, "secrets", secrets)
        if self.steps is not None:
            _positive_int("steps", self.steps, upper=10**12)
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise _bad("max_restarts", f"must be a whole number >= 0, got {self.max_restarts!r}")
        if self.checkpoint_every is not None:
            _positive_int("checkpoint_every", self.checkpoint_every, upper=10**12)
        if self.billing not in BILLING_MODES:
            raise _bad("billing", f"{self.billing!r} is not one of {', '.join(BILLING_MODES)}")
        if self.budget is not None:
            try:
                budget = Decimal(str(self.budget))
            except InvalidOperation:
                raise _bad("budget", f"{self.budget!r} is not an amount of money") from None
            if not budget.is_finite() or budget <= 0:
                raise _bad("budget", f"must be a positive amount, got {self.budget}")
            set_(self, "budget", budget)
        if self.experiment is not None and not _NAME_RE.match(self.experiment):
            raise _bad("experiment", f"{self.experiment!r} is not a valid experiment name")

    @property
    def world_size(self) -> int:
        """Total number of ranks."""
        return self.nodes * self.procs_per_node

    @property
    def is_gpu(self) -> bool:
        """True when the job asks for GPUs."""
        return self.accelerator != "cpu"

    @property
    def experiment_name(self) -> str:
        """The experiment this run belongs to."""
        return self.experiment or self.name

    def replace(self, **changes: Any) -> JobSpec:
        """A validated copy with some fields changed."""
        data = self.to_json()
        data.update(changes)
        return JobSpec.from_json(data)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the content of ``spec.json``)."""
        data = asdict(self)
        data["command"] = list(self.command) if self.command is not None else None
        data["args"] = list(self.args)
        data["mounts"] = list(self.mounts)
        data["env"] = dict(self.env)
        data["secrets"] = dict(self.secrets)
        data["budget"] = str(self.budget) if self.budget is not None else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobSpec:
        """Build from a dict, rejecting unknown keys with the list of known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInputError(
                f"JobSpec: unknown field(s) {', '.join(unknown)}",
                field=unknown[0],
                hint=f"known fields: {', '.join(sorted(known))}",
            )
        kwargs = dict(data)
        for key in ("command", "args", "mounts"):
            if isinstance(kwargs.get(key), Sequence) and not isinstance(kwargs.get(key), str):
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)
