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
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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

#: One nodeSelectorTerm: requirements ``(key, operator, values)``, all of which must hold.
NodeTerm = tuple[tuple[str, str, tuple[str, ...]], ...]
_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _gpu_visible() -> bool:
    return any(Path("/dev").glob("nvidia[0-9]*"))


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers with arbitrary uid)
        return f"uid{os.getuid()}"


def _path(value: str) -> Path:
    return Path(value).expanduser().absolute()


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = env.get(name, "").strip().lower() or default
    if value not in choices:
        raise BadInputError(
            f"{name}={value!r} is not one of {', '.join(choices)}",
            field=name,
            hint=f"set {name} to one of: {', '.join(choices)}",
        )
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInputError(f"{name}={raw!r} is not a number", field=name) from None
    if value <= 0:
        raise BadInputError(f"{name} must be positive, got {raw}", field=name)
    return value


def _count(env: Mapping[str, str], name: str, default: int, *, most: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise BadInputError(
            f"{name}={raw!r} is not a whole number from 1 to {most}", field=name, hint=f"e.g. {name}={default}"
        )
    return int(raw)


def _optional(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _minutes(env: Mapping[str, str], name: str, default: float) -> float:
    """A duration in minutes, ``0`` meaning off (the idle guards)."""
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e6:
        raise BadInputError(
            f"{name}={raw!r} is not a number of minutes >= 0", field=name, hint=f"e.g. {name}=30; 0: off"
        )
    return value


def _group(env: Mapping[str, str], name: str) -> str | None:
    """A group name or numeric gid (resolved where it is used: the group may live in NSS only)."""
    value = _optional(env, name)
    if value is None:
        return None
    if not re.fullmatch(r"\d{1,10}|[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?", value):
        raise BadInputError(
            f"{name}={value!r} is not a group name or gid",
            field=name,
            hint="give a group all users of the store belong to, e.g. ml-team (docs/sharing.md)",
        )
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise BadInputError(f"{name}={raw!r} is not a boolean", field=name, hint=f"set {name} to true or false")


def _id(env: Mapping[str, str], name: str, default: int | None, *, allow_none: bool = False) -> int | None:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if allow_none and raw == "none":
        return None
    if not raw.isdigit() or int(raw) == 0 or int(raw) > 2**31 - 1:
        raise BadInputError(
            f"{name}={raw!r} is not a non-root numeric id",
            field=name,
            hint=f"give a number above 0 (Pod Security 'restricted' refuses root), e.g. {name}=1000",
        )
    return int(raw)


def check_quantity(value: object, where: str) -> str:
    """A Kubernetes quantity (``8``, ``500m``, ``64Gi``), as a string; bad input otherwise."""
    text = str(value).strip()
    if not _QUANTITY.match(text):
        raise BadInputError(f"{where}: {value!r} is not a Kubernetes quantity", field=where, hint="e.g. 8, 500m, 64Gi")
    return text


def parse_mapping(raw: str, where: str) -> dict[str, str]:
    """``k=v,k2=v2`` or a JSON object of strings."""
    import json

    raw = raw.strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise BadInputError(f"{where} is not valid JSON: {e}", field=where) from None
        if not isinstance(data, dict):
            raise BadInputError(f"{where} must be a JSON object", field=where)
        return {str(k): str(v) for k, v in data.items()}
    out: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"{where}: {item!r} is not KEY=VALUE", field=where, hint="e.g. a=1,b=2")
        out[key.strip()] = value.strip()
    return out


def check_resources(data: Mapping[str, object], where: str) -> dict[str, str]:
    """Extra extended resources (``{"rdma/hca": "1"}``): valid names and quantities."""
    out = {}
    for name, value in data.items():
        if not _RESOURCE_NAME.match(str(name)) or str(name) in ("cpu", "memory"):
            raise BadInputError(
                f"{where}: {name!r} is not an extended resource name", field=where, hint="e.g. rdma/hca=1"
            )
        out[str(name)] = check_quantity(value, f"{where}.{name}")
    return out


def parse_node_affinity(data: object, where: str) -> tuple[NodeTerm, ...]:
    """Alternatives of node requirements (nodeSelectorTerms, any one of which may match).

    ``data`` is a JSON list of terms; a term maps a label to a value, a list of values
    (``In``), or ``{"operator": "NotIn|Exists|DoesNotExist|Gt|Lt", "values": [...]}``.
    """
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise BadInputError(
            f"{where}: expected a list of terms",
            field=where,
            hint='e.g. [{"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-80GB"]}]',
        )
    terms: list[NodeTerm] = []
    for i, term in enumerate(data):
        if not isinstance(term, dict) or not term:
            raise BadInputError(f"{where}[{i}] must be a non-empty object of label requirements", field=where)
        reqs = []
        for key, value in term.items():
            if isinstance(value, dict):
                op = str(value.get("operator", "In"))
                values = value.get("values", [])
            else:
                op, values = "In", value if isinstance(value, list) else [value]
            if op not in _NODE_OPERATORS or not isinstance(values, list):
                raise BadInputError(
                    f"{where}[{i}].{key}: operator must be one of {', '.join(_NODE_OPERATORS)}", field=where
                )
            if (op in ("Exists", "DoesNotExist")) != (not values):
                raise BadInputError(f"{where}[{i}].{key}: {op} takes {'no' if values else 'some'} values", field=where)
            reqs.append((str(key), op, tuple(str(v) for v in values)))
        terms.append(tuple(reqs))
    return tuple(terms)


def node_affinity_json(terms: tuple[NodeTerm, ...]) -> list[dict[str, object]]:
    """The JSON form :func:`parse_node_affinity` reads."""
    return [{k: {"operator": op, "values": list(v)} for k, op, v in term} for term in terms]


def _affinity(env: Mapping[str, str], name: str) -> tuple[NodeTerm, ...]:
    import json

    raw = _optional(env, name)
    if raw is None:
        return ()
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise BadInputError(
            f"{name} is not valid JSON: {e}",
            field=name,
            hint=f'e.g. {name}=\'[{{"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-80GB"]}}]\'',
        ) from None
    return parse_node_affinity(data, name)


_SLURM_TIME = re.compile(r"^(\d+-\d{1,2}(:\d{1,2}(:\d{1,2})?)?|\d+(:\d{1,2}(:\d{1,2})?)?|unlimited|infinite)$")


def _slurm_partitions(env: Mapping[str, str], name: str) -> tuple[tuple[str, str], ...]:
    """``cpu=debug,a100-80g=gpu-a100`` (or a JSON object): accelerator -> Slurm partition."""
    table = parse_mapping(env.get(name, ""), name)
    for key, value in table.items():
        if not value or not re.fullmatch(r"[A-Za-z0-9_.,-]+", value):
            raise BadInputError(
                f"{name}: partition {value!r} of {key!r} is not a Slurm partition name",
                field=name,
                hint="e.g. cpu=debug,a100-80g=gpu-a100 (names as `sinfo -s` lists them)",
            )
    return tuple(sorted((k.strip().lower(), v) for k, v in table.items()))


def _slurm_time(env: Mapping[str, str], name: str) -> str | None:
    value = _optional(env, name)
    if value is not None and not _SLURM_TIME.match(value.lower()):
        raise BadInputError(
            f"{name}={value!r} is not a Slurm time limit",
            field=name,
            hint="use MINUTES, HH:MM:SS or D-HH:MM:SS, e.g. 2-00:00:00",
        )
    return value


@dataclass(frozen=True)
class Settings:
    """Resolved configuration. Build with :meth:`from_env`; change with :meth:`replace`."""

    home: Path
    store: str
    experiments: Path
    backend: str = "local"
    default_mode: str = "cpu"
    gpu_type: str = "a100-80g"
    prices_file: Path | None = None
    currency: str | None = None
    lock_ttl: float = 30.0
    pull_connections: int = 8
    namespace: str | None = None
    kube_context: str | None = None
    kube_kind: str = "job"
    image: str = DEFAULT_IMAGE
    kueue_queue: str | None = None
    gpu_pools_file: Path | None = None
    user: str = "user"
    workspace: str = "auto"
    #: whether this machine has a GPU for the local workspace's GPU mode (auto: probe; yes: e.g. ROCm)
    local_gpu: str = "auto"
    #: local jobs: store mounts read-only in a mount namespace where the kernel allows it (auto), or not (no)
    readonly_mounts: str = "auto"
    #: local jobs: ranks forked from a warm pool (torch imported) when one matches the job (auto), never (off)
    warm_pool: str = "auto"
    pool_idle_minutes: float = 20.0
    cpu_image: str | None = None
    #: idle guards (issue 13): a job whose GPUs idle this long is stopped, the workspace switches to CPU
    job_idle_minutes: float = 30.0
    workspace_idle_minutes: float = 60.0
    #: a chat worker (a model in memory) that answers nothing for this long exits; the next question
    #: starts it again (0: kept for as long as its session)
    chat_idle_minutes: float = 15.0
    #: LLaMA-Factory's environment for its recipes: its ``llamafactory-cli`` or its Python (None: the
    #: ``llamafactory-cli`` found on PATH)
    llamafactory: str | None = None
    #: a job whose loss is NaN/inf for this many logged steps in a row stops (0: off)
    nan_steps: int = 3
    hub_profiles: str | None = None
    workspace_container: str | None = None
    store_claim: str | None = None
    experiments_claim: str | None = None
    shared_group: str | None = None
    admin_group: str | None = None
    pod_uid: int = 1000
    pod_gid: int = 1000
    pod_fs_group: int | None = 1000
    automount_token: bool = False
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    priority_class: str | None = None
    #: (key, value) pairs, so that Settings stays hashable
    pod_annotations: tuple[tuple[str, str], ...] = ()
    extra_resources: tuple[tuple[str, str], ...] = ()
    node_affinity: tuple[NodeTerm, ...] = ()
    shm_size: str | None = None
    #: (accelerator, partition) pairs: STARVERSE_SLURM_PARTITIONS
    slurm_partitions: tuple[tuple[str, str], ...] = ()
    slurm_account: str | None = None
    slurm_qos: str | None = None
    slurm_spot_qos: str | None = None  # the QOS of preemptible (spot) jobs: --billing spot
    slurm_spot_partition: str | None = None  # or a partition of preemptible nodes (both may be set)
    slurm_time: str | None = None
    slurm_gpu_flag: str = "gpus-per-node"
    slurm_python: str | None = None
    #: folders a data step may read besides the store (empty: any folder); the Jupyter server sets
    #: its root dir here, so a REST request cannot scan "/" (no variable: a CLI user reads their own files)
    source_roots: tuple[Path, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every ``STARVERSE_*`` variable; raise :class:`BadInputError` on a bad value."""
        env = os.environ if environ is None else environ
        home = _path(env.get("STARVERSE_HOME", "").strip() or "~/.starverse")
        store = env.get("STARVERSE_STORE", "").strip() or str(home / "store")
        if "://" not in store and not store.startswith(("file:", "memory:")):
            store = str(_path(store))
        experiments = _path(env.get("STARVERSE_EXPERIMENTS", "").strip() or str(home / "experiments"))
        prices = _optional(env, "STARVERSE_PRICES")
        pools = _optional(env, "STARVERSE_GPU_POOLS")
        gid = _id(env, "STARVERSE_POD_GID", 1000) or 1000
        return cls(
            home=home,
            store=store,
            experiments=experiments,
            backend=_choice(env, "STARVERSE_BACKEND", BACKENDS, "local"),
            default_mode=_choice(env, "STARVERSE_MODE", MODES, "gpu" if _gpu_visible() else "cpu"),
            gpu_type=(_optional(env, "STARVERSE_GPU_TYPE") or "a100-80g").lower(),
            prices_file=_path(prices) if prices else None,
            currency=(_optional(env, "STARVERSE_CURRENCY") or "").upper() or None,
            lock_ttl=_float(env, "STARVERSE_LOCK_TTL", 30.0),
            pull_connections=_count(env, "STARVERSE_PULL_CONNECTIONS", 8, most=64),
            namespace=_optional(env, "STARVERSE_NAMESPACE"),
            kube_context=_optional(env, "STARVERSE_KUBE_CONTEXT"),
            kube_kind=_choice(env, "STARVERSE_KUBE_KIND", KUBE_KINDS, "job"),
            image=_optional(env, "STARVERSE_IMAGE") or DEFAULT_IMAGE,
            kueue_queue=_optional(env, "STARVERSE_KUEUE_QUEUE"),
            gpu_pools_file=_path(pools) if pools else None,
            user=_optional(env, "STARVERSE_USER") or _user(),
            workspace=_choice(env, "STARVERSE_WORKSPACE", WORKSPACES, "auto"),
            local_gpu=_choice(env, "STARVERSE_LOCAL_GPU", LOCAL_GPU, "auto"),
            readonly_mounts=_choice(env, "STARVERSE_READONLY_MOUNTS", READONLY_MOUNTS, "auto"),
            warm_pool=_choice(env, "STARVERSE_WARM_POOL", WARM_POOL, "auto"),
            pool_idle_minutes=_minutes(env, "STARVERSE_POOL_IDLE_MINUTES", 20.0),
            cpu_image=_optional(env, "STARVERSE_CPU_IMAGE"),
            job_idle_minutes=_minutes(env, "STARVERSE_JOB_IDLE_MINUTES", 30.0),
            workspace_idle_minutes=_minutes(env, "STARVERSE_WORKSPACE_IDLE_MINUTES", 60.0),
            chat_idle_minutes=_minutes(env, "STARVERSE_CHAT_IDLE_MINUTES", 15.0),
            llamafactory=_optional(env, "STARVERSE_LLAMAFACTORY"),
            nan_steps=int(_minutes(env, "STARVERSE_NAN_STEPS", 3)),
            hub_profiles=_optional(env, "STARVERSE_HUB_PROFILES"),
            workspace_container=_optional(env, "STARVERSE_WORKSPACE_CONTAINER"),
            store_claim=_optional(env, "STARVERSE_STORE_CLAIM"),
            experiments_claim=_optional(env, "STARVERSE_EXPERIMENTS_CLAIM"),
            shared_group=_group(env, "STARVERSE_SHARED_GROUP"),
            admin_group=_group(env, "STARVERSE_ADMIN_GROUP"),
            pod_uid=_id(env, "STARVERSE_POD_UID", 1000) or 1000,
            pod_gid=gid,
            pod_fs_group=_id(env, "STARVERSE_POD_FS_GROUP", gid, allow_none=True),
            automount_token=_bool(env, "STARVERSE_AUTOMOUNT_TOKEN", False),
            image_pull_secrets=tuple(
                x.strip() for x in (_optional(env, "STARVERSE_IMAGE_PULL_SECRETS") or "").split(",") if x.strip()
            ),
            service_account=_optional(env, "STARVERSE_SERVICE_ACCOUNT"),
            priority_class=_optional(env, "STARVERSE_PRIORITY_CLASS"),
            pod_annotations=tuple(
                sorted(parse_mapping(env.get("STARVERSE_POD_ANNOTATIONS", ""), "STARVERSE_POD_ANNOTATIONS").items())
            ),
            extra_resources=tuple(
                sorted(
                    check_resources(
                        parse_mapping(env.get("STARVERSE_EXTRA_RESOURCES", ""), "STARVERSE_EXTRA_RESOURCES"),
                        "STARVERSE_EXTRA_RESOURCES",
                    ).items()
                )
            ),
            node_affinity=_affinity(env, "STARVERSE_NODE_AFFINITY"),
            slurm_partitions=_slurm_partitions(env, "STARVERSE_SLURM_PARTITIONS"),
            slurm_account=_optional(env, "STARVERSE_SLURM_ACCOUNT"),
            slurm_qos=_optional(env, "STARVERSE_SLURM_QOS"),
            slurm_spot_qos=_optional(env, "STARVERSE_SLURM_SPOT_QOS"),
            slurm_spot_partition=_optional(env, "STARVERSE_SLURM_SPOT_PARTITION"),
            slurm_time=_slurm_time(env, "STARVERSE_SLURM_TIME"),
            slurm_gpu_flag=_choice(env, "STARVERSE_SLURM_GPU_FLAG", SLURM_GPU_FLAGS, "gpus-per-node"),
            slurm_python=_optional(env, "STARVERSE_SLURM_PYTHON"),
            shm_size=check_quantity(shm, "STARVERSE_SHM_SIZE")
            if (shm := _optional(env, "STARVERSE_SHM_SIZE"))
            else None,
        )

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
        env = {
            "STARVERSE_HOME": str(self.home),
            "STARVERSE_STORE": self.store,
            "STARVERSE_EXPERIMENTS": str(self.experiments),
            "STARVERSE_BACKEND": self.backend,
            "STARVERSE_MODE": self.default_mode,
            "STARVERSE_GPU_TYPE": self.gpu_type,
            "STARVERSE_LOCK_TTL": str(self.lock_ttl),
            "STARVERSE_JOB_IDLE_MINUTES": f"{self.job_idle_minutes:g}",
            "STARVERSE_WORKSPACE_IDLE_MINUTES": f"{self.workspace_idle_minutes:g}",
            "STARVERSE_CHAT_IDLE_MINUTES": f"{self.chat_idle_minutes:g}",
            "STARVERSE_LOCAL_GPU": self.local_gpu,
            "STARVERSE_READONLY_MOUNTS": self.readonly_mounts,
            "STARVERSE_WARM_POOL": self.warm_pool,
            "STARVERSE_POOL_IDLE_MINUTES": f"{self.pool_idle_minutes:g}",
            "STARVERSE_NAN_STEPS": str(self.nan_steps),
            "STARVERSE_PULL_CONNECTIONS": str(self.pull_connections),
            "STARVERSE_KUBE_KIND": self.kube_kind,
            "STARVERSE_IMAGE": self.image,
            "STARVERSE_USER": self.user,
        }
        optional = {
            "STARVERSE_PRICES": self.prices_file,
            "STARVERSE_CURRENCY": self.currency,
            "STARVERSE_NAMESPACE": self.namespace,
            "STARVERSE_KUBE_CONTEXT": self.kube_context,
            "STARVERSE_KUEUE_QUEUE": self.kueue_queue,
            "STARVERSE_GPU_POOLS": self.gpu_pools_file,
            "STARVERSE_CPU_IMAGE": self.cpu_image,
            "STARVERSE_LLAMAFACTORY": self.llamafactory,
            "STARVERSE_HUB_PROFILES": self.hub_profiles,
            "STARVERSE_STORE_CLAIM": self.store_claim,
            "STARVERSE_EXPERIMENTS_CLAIM": self.experiments_claim,
            "STARVERSE_SHARED_GROUP": self.shared_group,
            "STARVERSE_ADMIN_GROUP": self.admin_group,
            "STARVERSE_SERVICE_ACCOUNT": self.service_account,
            "STARVERSE_PRIORITY_CLASS": self.priority_class,
            "STARVERSE_SHM_SIZE": self.shm_size,
            "STARVERSE_SLURM_ACCOUNT": self.slurm_account,
            "STARVERSE_SLURM_QOS": self.slurm_qos,
            "STARVERSE_SLURM_SPOT_QOS": self.slurm_spot_qos,
            "STARVERSE_SLURM_SPOT_PARTITION": self.slurm_spot_partition,
            "STARVERSE_SLURM_TIME": self.slurm_time,
            "STARVERSE_SLURM_PYTHON": self.slurm_python,
        }
        env.update({k: str(v) for k, v in optional.items() if v is not None})
        import json

        env["STARVERSE_POD_UID"] = str(self.pod_uid)
        env["STARVERSE_POD_GID"] = str(self.pod_gid)
        env["STARVERSE_POD_FS_GROUP"] = "none" if self.pod_fs_group is None else str(self.pod_fs_group)
        env["STARVERSE_AUTOMOUNT_TOKEN"] = "true" if self.automount_token else "false"
        env["STARVERSE_SLURM_GPU_FLAG"] = self.slurm_gpu_flag
        if self.slurm_partitions:
            env["STARVERSE_SLURM_PARTITIONS"] = json.dumps(dict(self.slurm_partitions), sort_keys=True)
        if self.image_pull_secrets:
            env["STARVERSE_IMAGE_PULL_SECRETS"] = ",".join(self.image_pull_secrets)
        if self.pod_annotations:
            env["STARVERSE_POD_ANNOTATIONS"] = json.dumps(dict(self.pod_annotations), sort_keys=True)
        if self.extra_resources:
            env["STARVERSE_EXTRA_RESOURCES"] = json.dumps(dict(self.extra_resources), sort_keys=True)
        if self.node_affinity:
            env["STARVERSE_NODE_AFFINITY"] = json.dumps(node_affinity_json(self.node_affinity))
        return env
