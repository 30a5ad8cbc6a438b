"""Kubernetes plumbing shared by the launch backend and the workspace switcher.

Configuration loaded once (in-cluster, then kubeconfig), the node-pool table per GPU type,
and the one translation of API failures into :mod:`jupyter_starverse.errors`.
Imports only the floor (settings, errors); the ``kubernetes`` client is imported lazily.
"""

from __future__ import annotations

from ._config import KubeConnection, connect, require_kubernetes, resolve_namespace
from ._errors import api_errors, status_of, translate
from ._pools import (
    HOST_SHARE,
    NodePool,
    PoolTable,
    SpotPlacement,
    Toleration,
    format_cpu,
    format_memory,
    load_pools,
    parse_quantity,
)

__all__ = [
    "HOST_SHARE",
    "KubeConnection",
    "NodePool",
    "PoolTable",
    "SpotPlacement",
    "Toleration",
    "api_errors",
    "connect",
    "format_cpu",
    "format_memory",
    "load_pools",
    "parse_quantity",
    "require_kubernetes",
    "resolve_namespace",
    "status_of",
    "translate",
]
