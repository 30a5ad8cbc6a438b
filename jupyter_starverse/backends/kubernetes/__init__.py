"""The Kubernetes backend: the same JobSpec onto pods, from 1 to 512 nodes.

``make_backend("kubernetes", settings)`` builds :class:`KubernetesBackend`. Manifests come
only from ``_manifests`` (pure ``make_*`` builders); names from ``_names``; the shipped
workspace RBAC is ``rbac.yaml`` next to this file. The ``kubernetes`` package is imported
lazily, on first use.
"""

from __future__ import annotations

from pathlib import Path

from ._backend import KubernetesBackend

__all__ = ["RBAC_MANIFEST", "KubernetesBackend"]

#: Role + RoleBinding the workspace's service account needs (``kubectl apply -n NS -f``).
RBAC_MANIFEST = Path(__file__).with_name("rbac.yaml")
#: A pool table for a mixed cluster (RTX 4090 + A100 + H100, GPU-feature-discovery labels):
#: copy it, adapt it, and point STARVERSE_GPU_POOLS at the copy.
GPU_POOLS_EXAMPLE = Path(__file__).with_name("gpu_pools.example.json")
