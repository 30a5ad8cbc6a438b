"""Connecting to the cluster: configuration loaded once, namespace resolved once.

Order: in-cluster service account (when running in a pod and no context was asked for),
then the kubeconfig (``KUBECONFIG`` or ``~/.kube/config``) with ``Settings.kube_context``.
Namespace: ``Settings.namespace``, else the kubeconfig context's, else the service
account's namespace file, else ``default``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BackendUnavailableError, MissingDependencyError

__all__ = ["SA_NAMESPACE", "KubeConnection", "connect", "require_kubernetes", "resolve_namespace"]

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def require_kubernetes() -> Any:
    """The ``kubernetes`` package, or :class:`MissingDependencyError` with the install hint."""
    try:
        import kubernetes
    except ImportError:
        raise MissingDependencyError("kubernetes", extra="kubernetes", purpose="the Kubernetes backend") from None
    return kubernetes


@dataclass(frozen=True)
class KubeConnection:
    """A configured API client and where it points."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str
    host: str
    context: str | None
    in_cluster: bool


def _kubeconfig() -> str | None:
    # Read at each load, not at import time as the client's default does.
    return os.environ.get("KUBECONFIG") or None


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SA_NAMESPACE.parent.joinpath("token").is_file()


def _context_namespace(context: str | None) -> tuple[str | None, str | None]:
    """(namespace, context name) of the kubeconfig context, or (None, None) without a kubeconfig."""
    kubernetes = require_kubernetes()
    try:
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=_kubeconfig())
    except (kubernetes.config.ConfigException, OSError, TypeError):
        return None, None
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    if chosen is None:
        return None, context
    return (chosen.get("context") or {}).get("namespace"), chosen.get("name")


def resolve_namespace(settings: Settings, *, in_cluster: bool | None = None, sa_file: Path = SA_NAMESPACE) -> str:
    """The namespace jobs go to (see the module docstring for the order). Reads files only."""
    if settings.namespace:
        return settings.namespace
    if not (in_cluster if in_cluster is not None else _in_cluster()) or settings.kube_context:
        namespace, _ = _context_namespace(settings.kube_context)
        if namespace:
            return namespace
    try:
        return sa_file.read_text().strip() or "default"
    except OSError:
        return "default"


def connect(settings: Settings) -> KubeConnection:
    """Load the configuration once and build an API client (no request is made)."""
    kubernetes = require_kubernetes()
    cfg = kubernetes.client.Configuration()
    in_cluster = _in_cluster() and not settings.kube_context
    try:
        if in_cluster:
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        else:
            kubernetes.config.load_kube_config(
                config_file=_kubeconfig(), context=settings.kube_context, client_configuration=cfg
            )
    except (kubernetes.config.ConfigException, OSError, TypeError) as e:
        where = f"context {settings.kube_context!r}" if settings.kube_context else "a kubeconfig"
        raise BackendUnavailableError(
            f"no Kubernetes configuration: could not load {where} ({e})",
            hint="set KUBECONFIG (and STARVERSE_KUBE_CONTEXT) or run inside the cluster; "
            "check with `kubectl config get-contexts`",
        ) from None
    _, context = (None, None) if in_cluster else _context_namespace(settings.kube_context)
    namespace = resolve_namespace(settings, in_cluster=in_cluster)
    return KubeConnection(kubernetes.client.ApiClient(cfg), namespace, cfg.host, context, in_cluster)
