"""Every ``STARVERSE_*`` environment variable, parsed in one place.

Nothing else in the package reads ``os.environ`` for configuration: code asks for a
:class:`Settings` (``Settings.from_env()``) and passes it down. The Jupyter server
extension starts from the same object and overrides fields from its traitlets.

| variable                    | meaning                                           | default                         |
|-----------------------------|---------------------------------------------------|---------------------------------|
| STARVERSE_HOME              | per-user state (mode, saved kernel state)         | ``~/.starverse``                |
| STARVERSE_STORE             | shared store, an fsspec URL or a path             | ``$STARVERSE_HOME/store``       |
| STARVERSE_EXPERIMENTS       | experiments root (one folder per run)             | ``$STARVERSE_HOME/experiments`` |
| STARVERSE_BACKEND           | default launch backend: ``local``/``kubernetes``  | ``local``                       |
| STARVERSE_MODE              | mode when none was switched: ``cpu``/``gpu``      | ``gpu`` if a GPU is visible     |
| STARVERSE_GPU_TYPE          | GPU type of this workspace in gpu mode            | ``a100-80g``                    |
| STARVERSE_PRICES            | path of a price table (JSON) replacing the shipped|                                 |
| STARVERSE_CURRENCY          | currency shown, overriding the price table's      |                                 |
| STARVERSE_LOCK_TTL          | seconds a pull lease lives without renewal        | ``30``                          |
| STARVERSE_PULL_CONNECTIONS  | connections per large file; small files at once   | ``8``                           |
| STARVERSE_NAMESPACE         | Kubernetes namespace                              | from kubeconfig / SA / default  |
| STARVERSE_KUBE_CONTEXT      | kubeconfig context                                | current context                 |
| STARVERSE_KUBE_KIND         | manifest kind: ``job``/``jobset``/``trainjob``/``pytorchjob`` | ``job``             |
| STARVERSE_IMAGE             | default training image (must contain this package) | ``DEFAULT_IMAGE`` (pinned tag)  |
| STARVERSE_KUEUE_QUEUE       | Kueue LocalQueue name                             |                                 |
| STARVERSE_GPU_POOLS         | path of a GPU pool table (JSON)                   | shipped table                   |
| STARVERSE_USER              | user name recorded on jobs and costs              | login name                      |
| STARVERSE_WORKSPACE         | where the workspace runs: ``auto``/``local``/``kubernetes``/``jupyterhub`` | ``auto`` |
| STARVERSE_LOCAL_GPU         | this machine has a GPU: ``auto``/``yes``/``no``   | ``auto`` (look for one)         |
| STARVERSE_READONLY_MOUNTS   | local jobs' mounts read-only binds: ``auto``/``no`` | ``auto``                        |
| STARVERSE_WARM_POOL         | local jobs start from a warm pool: ``auto``/``off`` | ``auto``                        |
| STARVERSE_POOL_IDLE_MINUTES | a warm pool without a job exits after this long   | ``20``                          |
| STARVERSE_CPU_IMAGE         | image of jobs in CPU mode (CPU variant)           | the job's image                 |
| STARVERSE_HUB_PROFILES      | KubeSpawner profile per mode: ``cpu=slug,a100-80g=slug`` |                          |
| STARVERSE_WORKSPACE_CONTAINER | container of the workspace pod to move           | the first one                   |
| STARVERSE_STORE_CLAIM       | PVC of the store in job pods (read-only there)    | ``starverse-store``             |
| STARVERSE_EXPERIMENTS_CLAIM | PVC of the experiments root in job pods           | ``starverse-experiments``       |
| STARVERSE_SHARED_GROUP      | group (name or gid) sharing the store (docs/sharing.md) | none: single user         |
| STARVERSE_ADMIN_GROUP       | group whose members may act on others' jobs/entries | none: owners and root only  |
| STARVERSE_POD_UID           | uid of job pods (non-root, owns the shared volumes)| ``1000``                        |
| STARVERSE_POD_GID           | primary gid of job pods                           | ``1000``                        |
| STARVERSE_POD_FS_GROUP      | fsGroup of job pods (``none``: do not set)        | the gid                         |
| STARVERSE_AUTOMOUNT_TOKEN   | mount the service-account token in job pods       | ``false``                       |
| STARVERSE_IMAGE_PULL_SECRETS| pull secrets of job pods, comma separated         |                                 |
| STARVERSE_SERVICE_ACCOUNT   | service account of job pods                       | the namespace's ``default``     |
| STARVERSE_PRIORITY_CLASS    | priorityClassName of job pods                     |                                 |
| STARVERSE_POD_ANNOTATIONS   | pod annotations: ``k=v,k2=v2`` or a JSON object   |                                 |
| STARVERSE_EXTRA_RESOURCES   | extra device limits of GPU pods: ``rdma/hca=1``   |                                 |
| STARVERSE_NODE_AFFINITY     | required node affinity of GPU pods (JSON, alternatives) |                           |
| STARVERSE_SHM_SIZE          | sizeLimit of ``/dev/shm`` in job pods             | a quarter of the pod's memory   |
| STARVERSE_SLURM_PARTITIONS  | Slurm partition per accelerator: ``cpu=debug,a100-80g=gpu`` | the cluster's default |
| STARVERSE_SLURM_ACCOUNT     | Slurm account (``--account``)                     |                                 |
| STARVERSE_SLURM_QOS         | Slurm QOS (``--qos``)                             |                                 |
| STARVERSE_SLURM_SPOT_QOS    | QOS of --billing spot jobs                        |                                 |
| STARVERSE_SLURM_SPOT_PARTITION| partition of --billing spot                       |                                 |
| STARVERSE_SLURM_TIME        | Slurm time limit (``--time``: ``HH:MM:SS``, ``D-HH:MM``) | the partition's default  |
| STARVERSE_SLURM_GPU_FLAG    | how jobs ask for GPUs: ``gpus-per-node``/``gres`` | ``gpus-per-node``               |
| STARVERSE_SLURM_PYTHON      | Python on the compute nodes (has this package and torch) | this interpreter         |
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _settings_parse as rule
from ._settings_parse import (
    NodeTerm,
    check_quantity,
    check_resources,
    node_affinity_json,
    parse_mapping,
    parse_node_affinity,
)
from ._version import __version__
from .errors import BadInputError

__all__ = [
    "BACKENDS",
    "DEFAULT_IMAGE",
    "KUBE_KINDS",
    "MODES",
    "NodeTerm",
    "Settings",
    "check_quantity",
    "check_resources",
    "node_affinity_json",
    "parse_mapping",
    "parse_node_affinity",
]

BACKENDS = ("local", "kubernetes", "slurm")
SLURM_GPU_FLAGS = ("gpus-per-node", "gres")
MODES = ("cpu", "gpu")
KUBE_KINDS = ("job", "jobset", "trainjob", "pytorchjob")
WORKSPACES = ("auto", "local", "kubernetes", "jupyterhub")
LOCAL_GPU = ("auto", "yes", "no")
READONLY_MOUNTS = ("auto", "no")
WARM_POOL = ("auto", "off")


def _image_tag(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", version)[:128]


#: The default training image: built from docs/image/Dockerfile for this version of the package
#: (CUDA torch + jupyter_starverse), pinned to the version, never ``:latest``.
DEFAULT_IMAGE = f"ghcr.io/jupyter-starverse/starverse-torch:{_image_tag(__version__)}"


def _gpu_visible() -> bool:
    return any(Path("/dev").glob("nvidia[0-9]*"))


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers with arbitrary uid)
        return f"uid{os.getuid()}"


#: How a value is written back for a child process (:meth:`Settings.to_env`); None: not written.
_Dump = Callable[[Any], "str | None"]


def _never(value: object) -> None:
    return None


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _g(value: float) -> str:
    return f"{value:g}"


def _json(value: tuple[tuple[str, str], ...]) -> str | None:
    return json.dumps(dict(value), sort_keys=True) if value else None


def _env(
    name: str,
    parse: rule.Rule,
    dump: _Dump = _str,
    unset: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any]:
    """The metadata of a field read from variable ``name``; ``unset(values read before)`` gives what an
    unset variable means when that is not the field's default."""
    return {"env": name, "parse": parse, "dump": dump, "unset": unset}


def _var(
    default: Any,
    name: str,
    parse: rule.Rule = rule.text,
    dump: _Dump = _str,
    unset: Callable[[dict[str, Any]], Any] | None = None,
) -> Any:
    """A field with ``default``, read from variable ``name`` (see :func:`_env`)."""
    return dataclasses.field(default=default, metadata=_env(name, parse, dump, unset))


@dataclass(frozen=True)
class Settings:
    """Resolved configuration. Build with :meth:`from_env`; change with :meth:`replace`.

    Each field read from a variable names it, its parse rule and how it is written back
    (``_var(default, variable, parse, dump)``): :meth:`from_env` and :meth:`to_env` walk the fields.
    """

    home: Path = dataclasses.field(metadata=_env("STARVERSE_HOME", rule.directory, unset=lambda _: "~/.starverse"))
    store: str = dataclasses.field(
        metadata=_env("STARVERSE_STORE", rule.store, unset=lambda v: str(v["home"] / "store"))
    )
    experiments: Path = dataclasses.field(
        metadata=_env("STARVERSE_EXPERIMENTS", rule.directory, unset=lambda v: str(v["home"] / "experiments"))
    )
    backend: str = _var("local", "STARVERSE_BACKEND", rule.choice(BACKENDS))
    default_mode: str = _var(
        "cpu", "STARVERSE_MODE", rule.choice(MODES), unset=lambda _: "gpu" if _gpu_visible() else "cpu"
    )
    gpu_type: str = _var("a100-80g", "STARVERSE_GPU_TYPE", rule.lower)
    prices_file: Path | None = dataclasses.field(default=None, metadata=_env("STARVERSE_PRICES", rule.file))
    currency: str | None = _var(None, "STARVERSE_CURRENCY", rule.upper)
    lock_ttl: float = _var(30.0, "STARVERSE_LOCK_TTL", rule.number)
    pull_connections: int = _var(8, "STARVERSE_PULL_CONNECTIONS", rule.count(most=64))
    namespace: str | None = _var(None, "STARVERSE_NAMESPACE")
    kube_context: str | None = _var(None, "STARVERSE_KUBE_CONTEXT")
    kube_kind: str = _var("job", "STARVERSE_KUBE_KIND", rule.choice(KUBE_KINDS))
    image: str = _var(DEFAULT_IMAGE, "STARVERSE_IMAGE")
    kueue_queue: str | None = _var(None, "STARVERSE_KUEUE_QUEUE")
    gpu_pools_file: Path | None = dataclasses.field(default=None, metadata=_env("STARVERSE_GPU_POOLS", rule.file))
    user: str = _var("user", "STARVERSE_USER", unset=lambda _: _user())
    #: describes this workspace: to_env does not pass it (nor workspace_container) to child processes
    workspace: str = _var("auto", "STARVERSE_WORKSPACE", rule.choice(WORKSPACES), _never)
    #: whether this machine has a GPU for the local workspace's GPU mode (auto: probe; yes: e.g. ROCm)
    local_gpu: str = _var("auto", "STARVERSE_LOCAL_GPU", rule.choice(LOCAL_GPU))
    #: local jobs: store mounts read-only in a mount namespace where the kernel allows it (auto), or not (no)
    readonly_mounts: str = _var("auto", "STARVERSE_READONLY_MOUNTS", rule.choice(READONLY_MOUNTS))
    #: local jobs: ranks forked from a warm pool (torch imported) when one matches the job (auto), never (off)
    warm_pool: str = _var("auto", "STARVERSE_WARM_POOL", rule.choice(WARM_POOL))
    pool_idle_minutes: float = _var(20.0, "STARVERSE_POOL_IDLE_MINUTES", rule.minutes, _g)
    cpu_image: str | None = _var(None, "STARVERSE_CPU_IMAGE")
    #: idle guards (issue 13): a job whose GPUs idle this long is stopped, the workspace switches to CPU
    job_idle_minutes: float = _var(30.0, "STARVERSE_JOB_IDLE_MINUTES", rule.minutes, _g)
    workspace_idle_minutes: float = _var(60.0, "STARVERSE_WORKSPACE_IDLE_MINUTES", rule.minutes, _g)
    #: a chat worker (a model in memory) that answers nothing for this long exits; the next question
    #: starts it again (0: kept for as long as its session)
    chat_idle_minutes: float = _var(15.0, "STARVERSE_CHAT_IDLE_MINUTES", rule.minutes, _g)
    #: LLaMA-Factory's environment for its recipes: its ``llamafactory-cli`` or its Python (None: the
    #: ``llamafactory-cli`` found on PATH)
    llamafactory: str | None = _var(None, "STARVERSE_LLAMAFACTORY")
    #: a job whose loss is NaN/inf for this many logged steps in a row stops (0: off)
    nan_steps: int = _var(3, "STARVERSE_NAN_STEPS", rule.steps)
    hub_profiles: str | None = _var(None, "STARVERSE_HUB_PROFILES")
    workspace_container: str | None = _var(None, "STARVERSE_WORKSPACE_CONTAINER", rule.text, _never)
    store_claim: str | None = _var(None, "STARVERSE_STORE_CLAIM")
    experiments_claim: str | None = _var(None, "STARVERSE_EXPERIMENTS_CLAIM")
    shared_group: str | None = _var(None, "STARVERSE_SHARED_GROUP", rule.group)
    admin_group: str | None = _var(None, "STARVERSE_ADMIN_GROUP", rule.group)
    pod_uid: int = _var(1000, "STARVERSE_POD_UID", rule.pod_id)
    pod_gid: int = _var(1000, "STARVERSE_POD_GID", rule.pod_id)
    pod_fs_group: int | None = _var(
        1000,
        "STARVERSE_POD_FS_GROUP",
        rule.pod_id_or_none,
        lambda v: "none" if v is None else str(v),
        unset=lambda v: v["pod_gid"],
    )
    automount_token: bool = _var(False, "STARVERSE_AUTOMOUNT_TOKEN", rule.boolean, lambda v: "true" if v else "false")
    image_pull_secrets: tuple[str, ...] = _var(
        (), "STARVERSE_IMAGE_PULL_SECRETS", rule.names, lambda v: ",".join(v) or None
    )
    service_account: str | None = _var(None, "STARVERSE_SERVICE_ACCOUNT")
    priority_class: str | None = _var(None, "STARVERSE_PRIORITY_CLASS")
    #: (key, value) pairs, so that Settings stays hashable
    pod_annotations: tuple[tuple[str, str], ...] = _var((), "STARVERSE_POD_ANNOTATIONS", rule.pairs, _json)
    extra_resources: tuple[tuple[str, str], ...] = _var((), "STARVERSE_EXTRA_RESOURCES", rule.resources, _json)
    node_affinity: tuple[NodeTerm, ...] = _var(
        (), "STARVERSE_NODE_AFFINITY", rule.affinity, lambda v: json.dumps(node_affinity_json(v)) if v else None
    )
    shm_size: str | None = _var(None, "STARVERSE_SHM_SIZE", rule.quantity)
    #: (accelerator, partition) pairs: STARVERSE_SLURM_PARTITIONS
    slurm_partitions: tuple[tuple[str, str], ...] = _var((), "STARVERSE_SLURM_PARTITIONS", rule.slurm_partitions, _json)
    slurm_account: str | None = _var(None, "STARVERSE_SLURM_ACCOUNT")
    slurm_qos: str | None = _var(None, "STARVERSE_SLURM_QOS")
    slurm_spot_qos: str | None = _var(None, "STARVERSE_SLURM_SPOT_QOS")  # the QOS of preemptible (spot) jobs
    slurm_spot_partition: str | None = _var(None, "STARVERSE_SLURM_SPOT_PARTITION")  # or a partition of them
    slurm_time: str | None = _var(None, "STARVERSE_SLURM_TIME", rule.slurm_time)
    slurm_gpu_flag: str = _var("gpus-per-node", "STARVERSE_SLURM_GPU_FLAG", rule.choice(SLURM_GPU_FLAGS))
    slurm_python: str | None = _var(None, "STARVERSE_SLURM_PYTHON")
    #: folders a data step may read besides the store (empty: any folder); the Jupyter server sets
    #: its root dir here, so a REST request cannot scan "/" (no variable: a CLI user reads their own files)
    source_roots: tuple[Path, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every ``STARVERSE_*`` variable; raise :class:`BadInputError` on a bad value."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if "env" in f.metadata:
                name, unset = f.metadata["env"], f.metadata["unset"]
                default = f.default if unset is None else unset(values)
                values[f.name] = f.metadata["parse"](env.get(name, "").strip(), name, default)
        return cls(**values)

    def replace(self, **changes: object) -> Settings:
        """Return a copy with some fields changed (validated the same way)."""
        out = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        if out.backend not in BACKENDS:
            raise BadInputError(f"backend {out.backend!r} is not one of {', '.join(BACKENDS)}", field="backend")
        if out.default_mode not in MODES:
            raise BadInputError(f"mode {out.default_mode!r} is not one of {', '.join(MODES)}", field="mode")
        if out.kube_kind not in KUBE_KINDS:
            raise BadInputError(f"kind {out.kube_kind!r} is not one of {', '.join(KUBE_KINDS)}", field="kube_kind")
        return out

    def to_env(self) -> dict[str, str]:
        """The variables a child process needs to see the same settings."""
        env = {}
        for f in dataclasses.fields(self):
            if "env" in f.metadata and (text := f.metadata["dump"](getattr(self, f.name))) is not None:
                env[f.metadata["env"]] = text
        return env
