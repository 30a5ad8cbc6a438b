"""Node pools a workspace can move between: one for CPU, one per GPU type.

A pool is what the scheduler needs to put a pod on it: a node selector, tolerations and,
for GPU pools, the extended resource name. The operator's table (``STARVERSE_GPU_POOLS``,
JSON) replaces the defaults::

    {"cpu": {"node_selector": {"pool": "cpu"}},
     "a100-80g": {"node_selector": {"pool": "a100"}, "resource": "nvidia.com/gpu",
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]}}

Optional per pool (each overrides the workspace default of the same ``STARVERSE_*`` setting):
``image``, ``cpu_per_proc`` / ``memory_per_proc`` (requests per GPU, or per process on the CPU
pool; defaults: :data:`HOST_SHARE`, a share of the GPU type's typical host, else 8 and 64Gi per
GPU; 1 and 4Gi per CPU process), ``max_cpu`` / ``max_memory``
(what one node of the pool can give a pod: the caps), ``shm_size``, ``image_pull_secrets``,
``service_account``, ``priority_class``, ``annotations``, ``extra_resources``
(``{"rdma/hca": "1"}``) and ``node_affinity`` (a list of alternative terms, see
:func:`jupyter_starverse._settings.parse_node_affinity`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import (
    NodeTerm,
    Settings,
    check_quantity,
    check_resources,
    node_affinity_json,
    parse_node_affinity,
)
from jupyter_starverse.errors import BadInputError

__all__ = [
    "HOST_SHARE",
    "POOL_LABEL",
    "NodePool",
    "PoolTable",
    "SpotPlacement",
    "Toleration",
    "format_cpu",
    "format_memory",
    "load_pools",
    "parse_quantity",
]

_SUFFIX: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(text: str) -> Fraction:
    """The value of a Kubernetes quantity (``500m`` -> 1/2, ``64Gi`` -> 64 * 2**30)."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)", check_quantity(text, "quantity"))
    assert m is not None and m.group(2) in _SUFFIX
    return Fraction(m.group(1)) * _SUFFIX[m.group(2)]


def format_cpu(value: Fraction) -> str:
    """CPUs as Kubernetes writes them: whole cores, else millicores."""
    return str(int(value)) if value.denominator == 1 else f"{int(value * 1000)}m"


def format_memory(value: Fraction) -> str:
    """Bytes in the largest binary unit that divides them (``Gi``, ``Mi``, ``Ki``)."""
    n = int(value)
    for unit in ("Ti", "Gi", "Mi", "Ki"):
        if n and n % _SUFFIX[unit] == 0:
            return f"{n // int(_SUFFIX[unit])}{unit}"
    return str(n)


POOL_LABEL = "starverse.io/pool"
_GPU_TYPES = ("rtx4090", "a100-80g", "a100-40g", "h100-80g", "l40s")

#: Requests per GPU (CPU, memory) where a pool states none: a share of a typical 8-GPU host of
#: that type, keeping about 1/8 of the host for the kubelet, system daemons and the OS.
#: Hosts (vCPU / memory of 8-GPU machines), from the vendors' and providers' published specs:
#:   rtx4090   8x RTX 4090 servers (2x EPYC/Xeon, e.g. ASUS ESC8000A-E12, Supermicro 4U GPU
#:             servers as sold and rented): 64-128 vCPU, 256-512 GiB; the smallest common
#:             configuration, 64 vCPU / 256 GiB, takes 8 x (6 CPU + 28Gi) = 48 CPU / 224Gi
#:   a100-40g  AWS p4d.24xlarge 96 vCPU / 1152 GiB; GCP a2-highgpu-8g 96 vCPU / 680 GB;
#:             Azure ND96asr_v4 96 vCPU / 900 GiB          -> 10 CPU + 64Gi  (80 / 512Gi)
#:   a100-80g  AWS p4de.24xlarge 96 vCPU / 1152 GiB; GCP a2-ultragpu-8g 96 vCPU / 1360 GB;
#:             Azure ND96amsr_A100_v4 96 vCPU / 1900 GiB   -> 10 CPU + 120Gi (80 / 960Gi)
#:   h100-80g  AWS p5.48xlarge 192 vCPU / 2048 GiB; GCP a3-highgpu-8g 208 vCPU / 1872 GB;
#:             Azure ND96isr_H100_v5 96 vCPU / 1900 GiB    -> 10 CPU + 190Gi (80 / 1520Gi)
#:   l40s      AWS g6e.48xlarge 192 vCPU / 1536 GiB        -> 20 CPU + 160Gi (160 / 1280Gi)
#: A pool's ``cpu_per_proc`` / ``memory_per_proc`` / ``max_cpu`` / ``max_memory`` and a job's
#: ``--cpu`` / ``--memory`` override these; other GPU types get 8 CPU + 64Gi per GPU.
HOST_SHARE: dict[str, tuple[str, str]] = {
    "rtx4090": ("6", "28Gi"),
    "a100-40g": ("10", "64Gi"),
    "a100-80g": ("10", "120Gi"),
    "h100-80g": ("10", "190Gi"),
    "l40s": ("20", "160Gi"),
}


@dataclass(frozen=True)
class Toleration:
    """A Kubernetes toleration (only the fields a node pool needs)."""

    key: str
    operator: str = "Exists"
    value: str | None = None
    effect: str | None = "NoSchedule"

    def to_json(self) -> dict[str, str]:
        out = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out

    @classmethod
    def parse(cls, data: Any, where: str) -> Toleration:
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            raise BadInputError(f"pool table: {where} needs a 'key'")
        operator = str(data.get("operator", "Equal" if "value" in data else "Exists"))
        if operator not in ("Exists", "Equal"):
            raise BadInputError(f"pool table: {where}.operator must be Exists or Equal")
        return cls(data["key"], operator, data.get("value"), data.get("effect"))


@dataclass(frozen=True)
class SpotPlacement:
    """Where a ``--billing spot`` pod of a pool goes: extra node labels to select, the taint of
    the spot nodes to tolerate, and the priority class (usually a low, preemptible one).

    In a pool's table entry: ``"spot": {"node_selector": {...}, "tolerations": [...],
    "priority_class": "..."}``. The providers' labels: GKE ``cloud.google.com/gke-spot: "true"``,
    EKS ``eks.amazonaws.com/capacityType: SPOT``, AKS ``kubernetes.azure.com/scalesetpriority: spot``
    (tainted ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule``)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    priority_class: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node_selector": dict(self.node_selector),
            "tolerations": [t.to_json() for t in self.tolerations],
        }
        if self.priority_class:
            out["priority_class"] = self.priority_class
        return out

    @classmethod
    def parse(cls, raw: Any, where: str) -> SpotPlacement:
        if not isinstance(raw, dict) or set(raw) - {"node_selector", "tolerations", "priority_class"}:
            raise BadInputError(
                f"pool table {where}.spot must be an object of node_selector, tolerations, priority_class"
            )
        selector = raw.get("node_selector", {})
        if not isinstance(selector, dict):
            raise BadInputError(f"pool table {where}.spot.node_selector must be an object")
        tolerations = tuple(
            Toleration.parse(t, f"{where}.spot.tolerations[{i}]") for i, t in enumerate(raw.get("tolerations", []))
        )
        priority = raw.get("priority_class")
        if priority is not None and (not isinstance(priority, str) or not priority.strip()):
            raise BadInputError(f"pool table {where}.spot.priority_class must be a non-empty string")
        return cls({str(k): str(v) for k, v in selector.items()}, tolerations, priority)


#: spot placement of a pool that states none: nodes labelled and tainted ``starverse.io/capacity=spot``
DEFAULT_SPOT = SpotPlacement(
    {"starverse.io/capacity": "spot"}, (Toleration("starverse.io/capacity", "Equal", "spot", "NoSchedule"),)
)


@dataclass(frozen=True)
class NodePool:
    """Where pods of one kind (``cpu`` or a GPU type) are scheduled."""

    name: str
    node_selector: dict[str, str]
    tolerations: tuple[Toleration, ...] = ()
    resource: str | None = None
    image: str | None = None
    cpu_per_proc: str | None = None
    memory_per_proc: str | None = None
    max_cpu: str | None = None
    max_memory: str | None = None
    shm_size: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    priority_class: str | None = None
    annotations: tuple[tuple[str, str], ...] = ()
    extra_resources: tuple[tuple[str, str], ...] = ()
    node_affinity: tuple[NodeTerm, ...] = ()
    spot: SpotPlacement | None = None  # None: DEFAULT_SPOT

    @property
    def is_gpu(self) -> bool:
        return self.resource is not None

    def for_billing(self, billing: str) -> NodePool:
        """The pool as a job billed ``billing`` sees it: ``spot`` adds the spot nodes' selector and
        toleration and takes the spot priority class (:class:`SpotPlacement`); others: unchanged."""
        if billing != "spot":
            return self
        spot = self.spot or DEFAULT_SPOT
        return dataclasses.replace(
            self,
            node_selector={**self.node_selector, **spot.node_selector},
            tolerations=tuple(dict.fromkeys((*self.tolerations, *spot.tolerations))),
            priority_class=spot.priority_class or self.priority_class,
        )

    def requests(self, procs: int) -> tuple[str, str]:
        """(cpu, memory) of a pod with ``procs`` GPUs (or CPU processes), capped by the node's size."""
        share = HOST_SHARE.get(self.name, ("8", "64Gi")) if self.is_gpu else ("1", "4Gi")
        cpu = parse_quantity(self.cpu_per_proc or share[0]) * procs
        memory = parse_quantity(self.memory_per_proc or share[1]) * procs
        if self.max_cpu:
            cpu = min(cpu, parse_quantity(self.max_cpu))
        if self.max_memory:
            memory = min(memory, parse_quantity(self.max_memory))
        return format_cpu(cpu), format_memory(memory)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "node_selector": dict(self.node_selector),
            "tolerations": [t.to_json() for t in self.tolerations],
            "resource": self.resource,
        }
        optional: dict[str, Any] = {
            "image": self.image,
            "cpu_per_proc": self.cpu_per_proc,
            "memory_per_proc": self.memory_per_proc,
            "max_cpu": self.max_cpu,
            "max_memory": self.max_memory,
            "shm_size": self.shm_size,
            "image_pull_secrets": list(self.image_pull_secrets) or None,
            "service_account": self.service_account,
            "priority_class": self.priority_class,
            "annotations": dict(self.annotations) or None,
            "extra_resources": dict(self.extra_resources) or None,
            "node_affinity": node_affinity_json(self.node_affinity) or None,
            "spot": self.spot.to_json() if self.spot is not None else None,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


@dataclass(frozen=True)
class PoolTable:
    """Pools by name: ``cpu`` and one per GPU type."""

    pools: dict[str, NodePool] = field(default_factory=dict)

    def get(self, name: str) -> NodePool:
        """The pool for ``cpu`` or a GPU type; a type the cluster lacks is bad input."""
        try:
            return self.pools[name.lower()]
        except KeyError:
            raise BadInputError(
                f"the cluster has no node pool for {name!r}",
                field="gpu_type",
                hint=f"known pools: {', '.join(sorted(self.pools))} (the operator adds pools in STARVERSE_GPU_POOLS)",
            ) from None

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        return tuple(sorted({p.resource for p in self.pools.values() if p.resource}))

    @classmethod
    def parse(cls, data: Any, *, source: str) -> PoolTable:
        if not isinstance(data, dict) or "cpu" not in data:
            raise BadInputError(f"pool table {source}: expected a JSON object with a 'cpu' pool")
        pools: dict[str, NodePool] = {}
        for name, raw in data.items():
            where = f"{source}: {name}"
            if not isinstance(raw, dict) or not isinstance(raw.get("node_selector"), dict) or not raw["node_selector"]:
                raise BadInputError(f"pool table {where} needs a non-empty 'node_selector'")
            tolerations = tuple(
                Toleration.parse(t, f"{where}.tolerations[{i}]") for i, t in enumerate(raw.get("tolerations", []))
            )
            resource = raw.get("resource", None if name == "cpu" else "nvidia.com/gpu")
            pools[str(name).lower()] = NodePool(
                str(name).lower(),
                {str(k): str(v) for k, v in raw["node_selector"].items()},
                tolerations,
                resource,
                **_options(raw, where),
            )
        return cls(pools)


_KNOWN = {
    "name",  # written by NodePool.to_json; the key of the table is the name
    "node_selector",
    "tolerations",
    "resource",
    "image",
    "cpu_per_proc",
    "memory_per_proc",
    "max_cpu",
    "max_memory",
    "shm_size",
    "image_pull_secrets",
    "service_account",
    "priority_class",
    "annotations",
    "extra_resources",
    "node_affinity",
    "spot",
}


def _options(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The optional fields of one pool, checked (an unknown key is a typo, not a no-op)."""
    unknown = sorted(set(raw) - _KNOWN)
    if unknown:
        raise BadInputError(
            f"pool table {where}: unknown field(s) {', '.join(unknown)}", hint=f"known: {', '.join(sorted(_KNOWN))}"
        )
    out: dict[str, Any] = {}
    for key in ("image", "service_account", "priority_class"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], str) or not raw[key].strip():
                raise BadInputError(f"pool table {where}.{key} must be a non-empty string")
            out[key] = raw[key].strip()
    for key in ("cpu_per_proc", "memory_per_proc", "max_cpu", "max_memory", "shm_size"):
        if raw.get(key) is not None:
            out[key] = check_quantity(raw[key], f"pool table {where}.{key}")
    secrets = raw.get("image_pull_secrets", [])
    if not isinstance(secrets, list) or not all(isinstance(x, str) and x for x in secrets):
        raise BadInputError(f"pool table {where}.image_pull_secrets must be a list of secret names")
    out["image_pull_secrets"] = tuple(secrets)
    for key in ("annotations", "extra_resources"):
        value = raw.get(key, {})
        if not isinstance(value, dict):
            raise BadInputError(f"pool table {where}.{key} must be an object")
        if key == "extra_resources":
            value = check_resources(value, f"pool table {where}.{key}")
        out[key] = tuple(sorted((str(k), str(v)) for k, v in value.items()))
    if raw.get("node_affinity") is not None:
        out["node_affinity"] = parse_node_affinity(raw["node_affinity"], f"pool table {where}.node_affinity")
    if raw.get("spot") is not None:
        out["spot"] = SpotPlacement.parse(raw["spot"], where)
    return out


def default_pools() -> PoolTable:
    """One ``starverse.io/pool=<name>`` label per pool; GPU pools tainted ``nvidia.com/gpu``."""
    gpu_taint = (Toleration("nvidia.com/gpu"),)
    pools = {"cpu": NodePool("cpu", {POOL_LABEL: "cpu"})}
    for gpu in _GPU_TYPES:
        pools[gpu] = NodePool(gpu, {POOL_LABEL: gpu}, gpu_taint, "nvidia.com/gpu")
    return PoolTable(pools)


def load_pools(settings: Settings) -> PoolTable:
    """The operator's pool table (``STARVERSE_GPU_POOLS``) or the defaults."""
    if settings.gpu_pools_file is None:
        return default_pools()
    path = Path(settings.gpu_pools_file)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInputError(f"pool file {path} does not exist", hint="fix STARVERSE_GPU_POOLS or unset it") from None
    except ValueError as e:
        raise BadInputError(f"pool file {path} is not valid JSON: {e}", hint="fix STARVERSE_GPU_POOLS") from None
    return PoolTable.parse(raw, source=str(path))
