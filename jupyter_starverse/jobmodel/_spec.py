"""JobSpec: what to run, where and how big. Validated on construction.

The same spec drives every backend (local processes, Kubernetes) and every front door.
It round-trips through JSON (``to_json`` / ``from_json``) because it is stored as
``spec.json`` in the experiment folder, which is the job's truth.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal
from typing import Any

from .._inputs import NAME_MAX, check_number, check_path, check_text
from ..errors import BadInputError
from ._fields import MAX_CODE, MAX_TEXT, check_type
from ._fields import field_error as _bad
from ._secrets import REF_EXAMPLES, parse_secret_ref

__all__ = ["JobSpec", "MAX_BUDGET", "TEMPLATES", "BILLING_MODES", "FRAMEWORKS", "job_name_of", "STORE_REPORTS"]

TEMPLATES = ("ddp", "fsdp", "tp", "pp")
FRAMEWORKS = ("torch", "megatron", "deepspeed")
BILLING_MODES = ("on_demand", "daily", "weekly", "spot")

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HASH_RE = re.compile(r"^[0-9a-f]{64}$")
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: ``JobSpec.store_writes``: the job writes a data step's report (``prepared/`` on the store).
STORE_REPORTS = "reports"
# a dataset version a job publishes: NAME@VERSION (the catalog's own check runs when it publishes)
_WRITE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}@[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_RESERVED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "STARVERSE_EXPERIMENT_DIR")


_MAX_DISPLAY = 256
#: The largest budget a job takes (the pipelines' bound): beyond it the decimal arithmetic of the meter overflows.
MAX_BUDGET = 10**15


def job_name_of(display_name: str) -> str:
    """A valid, stable job name (a DNS-1123 label) for any display name.

    Lower-cased; accents dropped (``Café`` -> ``cafe``); every other character outside
    ``[a-z0-9]`` becomes ``-``; at most 63 characters. When letters had to be dropped
    (``训练-模型``) or cut, a short hash of the display name keeps different names apart.
    The same display name always gives the same name.
    """
    text = unicodedata.normalize("NFKD", display_name)
    ascii_text = text.encode("ascii", "ignore").decode()
    lossy = any(not unicodedata.combining(c) and ord(c) > 127 for c in text)
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    digest = hashlib.sha256(display_name.encode()).hexdigest()[:8]
    if not slug:
        return f"job-{digest}"
    if lossy or len(slug) > 63:
        slug = f"{slug[: 63 - 9].rstrip('-')}-{digest}"
    return slug


def _text(name: str, value: object, *, path: bool = False, max_len: int | None = None) -> None:
    """Refuse a string that is not UTF-8 (a lone surrogate from a CLI argument or a magic) or too long."""
    if not isinstance(value, str):
        return  # the type checks below name the expected type
    try:
        if path:
            check_path(value, name)
        else:
            check_text(value, name, empty=True, max_len=max_len or MAX_CODE)
    except BadInputError as e:
        raise BadInputError(f"JobSpec.{e.message}", field=name.split(".")[0], hint=e.hint) from None


def _check_strings(spec: JobSpec) -> None:
    """Every string of ``spec`` checked with the same rules as a REST body, before it is used."""
    for key in ("name", "display_name", "accelerator", "template", "framework", "billing", "experiment", "image",
                "cpu", "memory", "env_id", "workdir_id"):  # fmt: skip
        _text(key, getattr(spec, key), max_len=MAX_TEXT)
    for key in ("script", "env_from", "workdir"):
        _text(key, getattr(spec, key), path=True)
    _text("code", spec.code)
    for key in ("command", "args", "mounts", "after"):
        for item in getattr(spec, key) or ():
            _text(key, item, max_len=MAX_TEXT)
    for key in ("env", "secrets"):
        for name, item in dict(getattr(spec, key)).items():
            _text(key, name, max_len=NAME_MAX)
            _text(f"{key}.{name}" if isinstance(name, str) and name.isascii() else key, item, max_len=MAX_TEXT)


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
        Any other text (``Big_Run.v1``, ``my run``, ``训练-模型``) is kept as ``display_name``
        and a valid name is derived from it (:func:`job_name_of`).
    after
        Ids of jobs that must succeed before this one starts (a pipeline's earlier steps).
        The Slurm backend submits with ``--dependency=afterok:...``; pipelines wait for them
        themselves on the other backends.
    display_name
        The name as a person wrote it (shown by ``jobs ls``/``show`` and the monitor);
        ``None`` when ``name`` is already what they wrote.
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
    mount_versions
        The exact version each mount resolved to at launch (``{"corpus": "corpus@1"}``), filled in
        by the facade: what the job read, shown by ``jobs show`` and the job list.
    env
        Extra environment variables (plain values; no secrets here).
    secrets
        Environment variables taken from secrets by reference, resolved only where the job starts:
        ``{"HF_TOKEN": "env:HF_TOKEN"}`` (a variable of the submitting environment),
        ``"file:/home/me/.hf_token"`` (a file only its owner can read) or ``"hf-secret/token"``
        (a Kubernetes Secret's key). Only the reference is ever written down.
    steps
        Number of training steps the script should run (exported as ``STARVERSE_STEPS``).
    max_restarts
        How often the whole job is relaunched from its last checkpoint after a failure of the
        script (the supervisor or the backend keeps the count; torchrun never restarts on its
        own). Preemptions and lost nodes have their own budget and do not spend this one.
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
    env_from
        What the job's Python has beyond its image: ``"notebook"`` (the kernel's packages the
        image lacks), ``"image"`` (nothing: the default) or a requirements / pyproject / lock file.
    workdir
        A folder packed once into the store and unpacked read-only as every rank's working folder.
    env_id, workdir_id
        What the launch resolved them to (lock hash, content hash): set by the facade, read by the
        backends ("activate env H, unpack workdir W"), recorded in ``spec.json``.
    cpu, memory
        Per-node requests for Kubernetes (``"8"``, ``"64Gi"``).
    store_writes
        What the job adds to the store: new dataset versions (``NAME@VERSION``) and ``reports``
        (a data step's report and work folder under ``prepared/``). Set only by a data step's job
        (``data._job.job_spec``). A job with none sees the store read-only where the backend can
        make it so (a Kubernetes pod's store mount); with some, the Kubernetes backend mounts the
        store writable for that job alone. A version it mounts cannot be one it writes (a version
        is never overwritten), and only a ``command`` job (the data step's entry point) writes.
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
    display_name: str | None = None
    after: tuple[str, ...] = ()
    env_from: str | None = None
    workdir: str | None = None
    env_id: str | None = None
    workdir_id: str | None = None
    mount_versions: Mapping[str, str] = field(default_factory=dict)
    store_writes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        _check_strings(self)
        if isinstance(self.name, str) and self.name.strip() and not _NAME_RE.match(self.name):
            if len(self.name) > _MAX_DISPLAY:
                raise _bad("name", f"is too long ({len(self.name)} characters, at most {_MAX_DISPLAY})")
            if self.display_name is None:
                set_(self, "display_name", self.name.strip())
            set_(self, "name", job_name_of(self.name.strip()))
        if self.display_name is not None and (not isinstance(self.display_name, str) or
                                              len(self.display_name) > _MAX_DISPLAY):  # fmt: skip
            raise _bad("display_name", f"must be text of at most {_MAX_DISPLAY} characters")
        if self.display_name == self.name:
            set_(self, "display_name", None)
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
        set_(self, "after", tuple(str(a) for a in self.after))
        set_(self, "store_writes", tuple(str(w) for w in self.store_writes))
        self._check_writes()
        for dep in self.after:
            if not _JOB_ID_RE.match(dep):
                raise _bad("after", f"{dep[:64]!r} is not a job id", "name the ids of earlier jobs, e.g. ['prep-3f2a']")
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
            if key in _RESERVED_ENV:
                raise _bad("secrets", f"{key} is set by the launcher and cannot be overridden")
            if key in env:
                raise _bad("secrets", f"{key} is given both as env and as a secret", "give it once, as a secret")
            if parse_secret_ref(ref) is None:  # never echo the text back: it may be the secret itself
                raise _bad(
                    "secrets",
                    f"{key}: the value is not a secret reference",
                    f"give a reference, not the secret: {REF_EXAMPLES} (e.g. {key}=env:{key})",
                )
        set_(self, "secrets", secrets)
        set_(self, "mount_versions", {str(k): str(v) for k, v in dict(self.mount_versions).items()})
        if self.steps is not None:
            _positive_int("steps", self.steps, upper=10**12)
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise _bad("max_restarts", f"must be a whole number >= 0, got {self.max_restarts!r}")
        if self.checkpoint_every is not None:
            _positive_int("checkpoint_every", self.checkpoint_every, upper=10**12)
        if self.billing not in BILLING_MODES:
            raise _bad("billing", f"{self.billing!r} is not one of {', '.join(BILLING_MODES)}")
        if self.budget is not None:
            hint = f"give the budget as a positive amount of money, at most {MAX_BUDGET:,}, e.g. 25 or 25.50"
            try:
                budget = check_number(self.budget, "budget", low=0, low_open=True, high=MAX_BUDGET, hint=hint)
            except BadInputError as e:
                raise BadInputError(f"JobSpec.{e.message}", field="budget", hint=hint) from None
            set_(self, "budget", budget)
        if self.experiment is not None and not _NAME_RE.match(self.experiment):
            raise _bad("experiment", f"{self.experiment!r} is not a valid experiment name")
        if self.env_from is not None and (not isinstance(self.env_from, str) or not self.env_from.strip()):
            raise _bad("env_from", "must be notebook, image or the path of a requirements file")
        if self.workdir is not None and (not isinstance(self.workdir, str) or not self.workdir.strip()):
            raise _bad("workdir", "must be the path of a folder")
        for key in ("env_id", "workdir_id"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not _HASH_RE.match(value)):
                raise _bad(key, "must be a sha256 hash (64 hex digits)", "leave it out: the launch sets it")

    def _check_writes(self) -> None:
        hint = "store_writes names the new versions a data step's job publishes; leave it out for training"
        for ref in self.store_writes:
            if ref != STORE_REPORTS and not _WRITE_RE.match(ref):
                raise _bad("store_writes", f"{ref[:64]!r} is not NAME@VERSION or {STORE_REPORTS!r}", hint)
        if self.store_writes and self.command is None:
            raise _bad("store_writes", "only a data step's command job publishes into the store", hint)
        read = set(self.mounts) | set(self.mount_versions.values())
        both = sorted(read.intersection(self.store_writes))
        if both:
            raise _bad("store_writes", f"{both[0]} is both mounted and written; a version is never overwritten",
                       "write a new version (e.g. NAME@VERSION-2) and mount the old one")  # fmt: skip

    @property
    def world_size(self) -> int:
        """Total number of ranks."""
        return self.nodes * self.procs_per_node

    @property
    def data_parallel(self) -> int:
        """Ranks that train on their own samples (tensor- and pipeline-parallel ranks share theirs)."""
        return max(1, self.world_size // (self.tensor_parallel * self.pipeline_parallel))

    @property
    def is_gpu(self) -> bool:
        """True when the job asks for GPUs."""
        return self.accelerator != "cpu"

    @property
    def title(self) -> str:
        """The name to show a person: the display name, else the name."""
        return self.display_name or self.name

    @property
    def mounted(self) -> tuple[str, ...]:
        """What each mount read: its exact ``NAME@VERSION`` once pinned at launch, else the name."""
        return tuple(self.mount_versions.get(name, name) for name in self.mounts)

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
        data["after"] = list(self.after)
        data["env"] = dict(self.env)
        data["secrets"] = dict(self.secrets)
        data["mount_versions"] = dict(self.mount_versions)
        data["store_writes"] = list(self.store_writes)
        data["budget"] = str(self.budget) if self.budget is not None else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobSpec:
        """Build from a dict, rejecting unknown keys with the list of known ones."""
        if not isinstance(data, Mapping):
            raise BadInputError(
                f"JobSpec: expected a JSON object, got {type(data).__name__}",
                field="spec",
                hint='e.g. {"name": "run", "script": "train.py"}',
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInputError(
                f"JobSpec: unknown field(s) {', '.join(unknown)}",
                field=unknown[0],
                hint=f"known fields: {', '.join(sorted(known))}",
            )
        if "name" not in data:
            raise _bad("name", "is required", 'give the job a name, e.g. {"name": "run", "script": "train.py"}')
        for key, value in data.items():
            check_type(key, value)
        kwargs = dict(data)
        for key in ("command", "args", "mounts", "after", "store_writes"):
            if isinstance(kwargs.get(key), Sequence) and not isinstance(kwargs.get(key), str):
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)
