"""Node pools a workspace can move between: one for CPU, one per GPU type.

A pool is what the scheduler needs to put a pod on it: a node selector, tolerations and,
for GPU pools, the extended resource name. The operator's table (``STARVERSE_GPU_POOLS``,
JSON) replaces the defaults::

    {"cpu": {"node_selector": {"pool": "cpu"}},
     "a100-80g": {"node_selector": {"pool": "a100"}, "resource": "nvidia.com/gpu",
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError

__all__ = ["POOL_LABEL", "NodePool", "PoolTable", "Toleration", "load_pools"]

POOL_LABEL = "starverse.io/pool"
_GPU_TYPES = ("rtx4090", "a100-80g", "a100-40g", "h100-80g", "l40s")


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
class NodePool:
    """Where pods of one kind (``cpu`` or a GPU type) are scheduled."""

    name: str
    node_selector: dict[str, str]
    tolerations: tuple[Toleration, ...] = ()
    resource: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.resource is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "node_selector": dict(self.node_selector),
            "tolerations": [t.to_json() for t in self.tolerations],
            "resource": self.resource,
        }


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
                str(name).lower(), {str(k): str(v) for k, v in raw["node_selector"].items()}, tolerations, resource
            )
        return cls(pools)


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
