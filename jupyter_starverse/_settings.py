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
| STARVERSE_NAMESPACE         | Kubernetes namespace                              | from kubeconfig / SA / default  |
| STARVERSE_KUBE_CONTEXT      | kubeconfig context                                | current context                 |
| STARVERSE_KUBE_KIND         | manifest kind: ``job``/``jobset``/``trainjob``/``pytorchjob`` | ``job``             |
| STARVERSE_IMAGE             | default training image                            | ``pytorch/pytorch:latest``      |
| STARVERSE_KUEUE_QUEUE       | Kueue LocalQueue name                             |                                 |
| STARVERSE_GPU_POOLS         | path of a GPU pool table (JSON)                   | shipped table                   |
| STARVERSE_USER              | user name recorded on jobs and costs              | login name                      |
| STARVERSE_WORKSPACE         | where the workspace runs: ``auto``/``local``/``kubernetes``/``jupyterhub`` | ``auto`` |
| STARVERSE_CPU_IMAGE         | image of jobs in CPU mode (CPU variant)           | the job's image                 |
| STARVERSE_HUB_PROFILES      | KubeSpawner profile per mode: ``cpu=slug,a100-80g=slug`` |                          |
| STARVERSE_WORKSPACE_CONTAINER | container of the workspace pod to move           | the first one                   |
| STARVERSE_STORE_CLAIM       | PVC of the store in job pods (read-only there)    | ``starverse-store``             |
| STARVERSE_EXPERIMENTS_CLAIM | PVC of the experiments root in job pods           | ``starverse-experiments``       |
"""

from __future__ import annotations

import dataclasses
import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInputError

__all__ = ["Settings", "BACKENDS", "MODES", "KUBE_KINDS"]

BACKENDS = ("local", "kubernetes")
MODES = ("cpu", "gpu")
KUBE_KINDS = ("job", "jobset", "trainjob", "pytorchjob")
WORKSPACES = ("auto", "local", "kubernetes", "jupyterhub")


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


def _optional(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


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
    namespace: str | None = None
    kube_context: str | None = None
    kube_kind: str = "job"
    image: str = "pytorch/pytorch:latest"
    kueue_queue: str | None = None
    gpu_pools_file: Path | None = None
    user: str = "user"
    workspace: str = "auto"
    cpu_image: str | None = None
    hub_profiles: str | None = None
    workspace_container: str | None = None
    store_claim: str | None = None
    experiments_claim: str | None = None

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
            namespace=_optional(env, "STARVERSE_NAMESPACE"),
            kube_context=_optional(env, "STARVERSE_KUBE_CONTEXT"),
            kube_kind=_choice(env, "STARVERSE_KUBE_KIND", KUBE_KINDS, "job"),
            image=_optional(env, "STARVERSE_IMAGE") or "pytorch/pytorch:latest",
            kueue_queue=_optional(env, "STARVERSE_KUEUE_QUEUE"),
            gpu_pools_file=_path(pools) if pools else None,
            user=_optional(env, "STARVERSE_USER") or _user(),
            workspace=_choice(env, "STARVERSE_WORKSPACE", WORKSPACES, "auto"),
            cpu_image=_optional(env, "STARVERSE_CPU_IMAGE"),
            hub_profiles=_optional(env, "STARVERSE_HUB_PROFILES"),
            workspace_container=_optional(env, "STARVERSE_WORKSPACE_CONTAINER"),
            store_claim=_optional(env, "STARVERSE_STORE_CLAIM"),
            experiments_claim=_optional(env, "STARVERSE_EXPERIMENTS_CLAIM"),
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
            "STARVERSE_HUB_PROFILES": self.hub_profiles,
            "STARVERSE_STORE_CLAIM": self.store_claim,
            "STARVERSE_EXPERIMENTS_CLAIM": self.experiments_claim,
        }
        env.update({k: str(v) for k, v in optional.items() if v is not None})
        return env
