"""Move a workspace running in Kubernetes to the other node pool by patching its controller.

The pod (name from the downward API ``POD_NAME`` or the hostname) is followed through its
owner references to its StatefulSet, or ReplicaSet -> Deployment. The controller's pod
template gets GPU requests, node selector and tolerations of the target pool; everything
else (volumes, env, image) stays, so the workspace comes back with the same volumes. A bare
Pod has nothing that would bring it back and is refused.

:func:`make_workspace_patch` builds the JSON merge patch as a pure function.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import (
    BadInputError,
    ConflictError,
)
from jupyter_starverse.kube import PoolTable, api_errors, connect, load_pools, resolve_namespace, translate

from ._switch import SwitchOutcome, WorkspaceSwitcher

if TYPE_CHECKING:
    from jupyter_starverse._settings import Settings

    from ._mode import Mode

__all__ = ["GPU_ANNOTATION", "MODE_ANNOTATION", "KubernetesSwitcher", "make_workspace_patch"]

MODE_ANNOTATION = "starverse.io/mode"
GPU_ANNOTATION = "starverse.io/gpu-type"
_PATCH_TYPE = "application/merge-patch+json"


def _canonical(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True)


def _pick_container(containers: list[dict[str, Any]], name: str | None, gpu_resources: tuple[str, ...]) -> int:
    if not containers:
        raise BadInputError("the workspace's pod template has no containers")
    if name is not None:
        for i, c in enumerate(containers):
            if c.get("name") == name:
                return i
        names = ", ".join(str(c.get("name")) for c in containers)
        raise BadInputError(
            f"the workspace has no container {name!r}", field="workspace_container", hint=f"containers: {names}"
        )
    for i, c in enumerate(containers):
        limits = (c.get("resources") or {}).get("limits") or {}
        if any(r in limits for r in gpu_resources):
            return i
    return 0


def make_workspace_patch(
    controller: Mapping[str, Any], *, target: Mode, pools: PoolTable, container: str | None = None
) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that moves ``controller``'s pods to ``target``'s pool.

    Parameters
    ----------
    controller
        The StatefulSet or Deployment as the API returns it (JSON).
    target
        The mode to move to; its GPU type and count decide pool and GPU requests.
    pools
        Node pools of the cluster; ``BadInputError`` when the target has none.
    container
        The workspace container (default: the one holding GPUs, else the first).

    Notes
    -----
    Lists cannot be merged by a merge patch, so ``containers`` and ``tolerations`` are sent
    whole: the current lists with only GPU resources and pool tolerations changed. Node
    selector keys of other pools are removed with ``null``. A Deployment whose pods mount
    claims is switched to the ``Recreate`` strategy, as a ``ReadWriteOnce`` volume cannot be
    attached to the old and the new pod at once.
    """
    kind = controller.get("kind")
    if kind not in ("StatefulSet", "Deployment"):
        raise BadInputError(f"cannot move a {kind}", hint="the workspace must run as a StatefulSet or Deployment")
    template = (controller.get("spec") or {}).get("template") or {}
    pod_spec: Mapping[str, Any] = template.get("spec") or {}
    pool = pools.get(target.accelerator)
    gpu_resources = tuple(sorted(set(pools.gpu_resources) | ({pool.resource} if pool.resource else set())))

    selector: dict[str, Any] = {}
    old_selector = pod_spec.get("nodeSelector") or {}
    for other in pools.pools.values():
        for key in other.node_selector:
            if key in old_selector and key not in pool.node_selector:
                selector[key] = None
    selector.update(pool.node_selector)

    pool_tolerations = {_canonical(t.to_json()) for p in pools.pools.values() for t in p.tolerations}
    tolerations = [t for t in pod_spec.get("tolerations") or [] if _canonical(t) not in pool_tolerations]
    tolerations += [t.to_json() for t in pool.tolerations]

    containers = copy.deepcopy(list(pod_spec.get("containers") or []))
    index = _pick_container(containers, container, gpu_resources)
    resources = dict(containers[index].get("resources") or {})
    for section in ("limits", "requests"):
        values = {k: v for k, v in (resources.get(section) or {}).items() if k not in gpu_resources}
        if target.kind == "gpu" and pool.resource:
            values[pool.resource] = str(target.gpus)
        if values:
            resources[section] = values
        else:
            resources.pop(section, None)
    containers[index]["resources"] = resources

    annotations = {MODE_ANNOTATION: target.kind, GPU_ANNOTATION: target.gpu_type}
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"nodeSelector": selector, "tolerations": tolerations or None, "containers": containers},
        }
    }
    strategy = (controller.get("spec") or {}).get("strategy") or {}
    claims = any("persistentVolumeClaim" in v for v in pod_spec.get("volumes") or [])
    if kind == "Deployment" and claims and strategy.get("type", "RollingUpdate") != "Recreate":
        spec["strategy"] = {"type": "Recreate", "rollingUpdate": None}
    return {"metadata": {"annotations": dict(annotations)}, "spec": spec}


class KubernetesSwitcher(WorkspaceSwitcher):
    """Patch the workspace's StatefulSet/Deployment onto the CPU or a GPU node pool.

    Parameters
    ----------
    settings
        Namespace, kube context, pool table and the workspace container.
    environ
        Where ``POD_NAME``/``HOSTNAME`` and ``POD_NAMESPACE`` come from.
    api_client
        A ready ``kubernetes.client.ApiClient`` (default: in-cluster, then kubeconfig).
    """

    where = "kubernetes"

    def __init__(self, settings: Settings, *, environ: Mapping[str, str], api_client: Any | None = None) -> None:
        self.settings = settings
        self.environ = environ
        self._api_client = api_client
        self._namespace: str | None = None
        self.pools = load_pools(settings)

    # -- plumbing --------------------------------------------------------------------
    @property
    def api_client(self) -> Any:
        if self._api_client is None:
            self._connect()
        return self._api_client

    def _connect(self) -> None:
        # The same configuration loading as the Kubernetes launch backend (in-cluster first).
        conn = connect(self.settings)
        self._api_client, self._namespace = conn.api, conn.namespace

    @property
    def namespace(self) -> str:
        """``Settings.namespace``, else the pod's own (downward API ``POD_NAMESPACE``), else the connection's."""
        if self.settings.namespace:
            return self.settings.namespace
        if self.environ.get("POD_NAMESPACE"):
            return self.environ["POD_NAMESPACE"]
        if self._namespace is None:
            if self._api_client is not None:
                self._namespace = resolve_namespace(self.settings)
            else:
                self._connect()
        return self._namespace or "default"

    @property
    def pod_name(self) -> str:
        name = self.environ.get("POD_NAME") or self.environ.get("HOSTNAME")
        if not name:
            raise BadInputError(
                "cannot tell which pod this workspace is",
                hint="expose the pod name as POD_NAME through the downward API (fieldRef: metadata.name)",
            )
        return name

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # The one Kubernetes error translation, shared with the launch backend.
        with api_errors(action=f"{fn.__name__.split('_', 1)[0]}", obj=what, namespace=self.namespace):
            return fn(*args, **kwargs)

    def controller(self) -> tuple[str, str]:
        """``(kind, name)`` of the StatefulSet or Deployment that owns this workspace's pod."""
        from kubernetes import client

        core, apps, ns = client.CoreV1Api(self.api_client), client.AppsV1Api(self.api_client), self.namespace
        pod = self._call(f"pod {ns}/{self.pod_name}", core.read_namespaced_pod, self.pod_name, ns)
        owner = next((r for r in pod.metadata.owner_references or [] if r.controller), None)
        if owner is None:
            raise ConflictError(
                f"the workspace runs in the bare pod {ns}/{pod.metadata.name}, without a controller that would "
                "bring it back on another node",
                hint="run the workspace as a StatefulSet or Deployment (or use JupyterHub profiles); "
                "nothing was changed",
            )
        if owner.kind == "ReplicaSet":
            rs = self._call(f"replicaset {ns}/{owner.name}", apps.read_namespaced_replica_set, owner.name, ns)
            owner = next((r for r in rs.metadata.owner_references or [] if r.controller), None)
            if owner is None or owner.kind != "Deployment":
                raise ConflictError(
                    f"the workspace's ReplicaSet {ns}/{rs.metadata.name} is not owned by a Deployment",
                    hint="run the workspace as a StatefulSet or Deployment; nothing was changed",
                )
        if owner.kind not in ("StatefulSet", "Deployment"):
            raise ConflictError(
                f"the workspace is controlled by a {owner.kind} ({owner.name}), which cannot be moved",
                hint="run the workspace as a StatefulSet or Deployment; nothing was changed",
            )
        return owner.kind, owner.name

    def _read(self, kind: str, name: str) -> dict[str, Any]:
        from kubernetes import client

        apps = client.AppsV1Api(self.api_client)
        read = apps.read_namespaced_stateful_set if kind == "StatefulSet" else apps.read_namespaced_deployment
        obj = self._call(f"{kind} {self.namespace}/{name}", read, name, self.namespace)
        data: dict[str, Any] = self.api_client.sanitize_for_serialization(obj)
        data["kind"] = kind
        return data

    def _check_nodes(self, target: Mode) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        pool = self.pools.get(target.accelerator)
        selector = ",".join(f"{k}={v}" for k, v in sorted(pool.node_selector.items()))
        try:
            nodes = client.CoreV1Api(self.api_client).list_node(label_selector=selector)
        except ApiException as e:
            if e.status in (403, 404):
                return  # the workspace may not list nodes; the pool table is then the only check
            raise translate(e, action="list", obj="nodes", namespace=self.namespace) from e
        if not nodes.items:
            raise BadInputError(
                f"the cluster has no node in the {pool.name} pool (labels {selector})",
                field="gpu_type",
                hint="choose another GPU type with --gpu, or ask the operator to add that pool; nothing was changed",
            )

    # -- the switcher ----------------------------------------------------------------
    def check(self, target: Mode) -> None:
        self.pools.get(target.accelerator)
        self._check_nodes(target)
        kind, name = self.controller()
        make_workspace_patch(
            self._read(kind, name), target=target, pools=self.pools, container=self.settings.workspace_container
        )

    def apply(self, target: Mode) -> SwitchOutcome:
        from kubernetes import client

        kind, name = self.controller()
        data = self._read(kind, name)
        patch = make_workspace_patch(data, target=target, pools=self.pools, container=self.settings.workspace_container)
        apps, ns = client.AppsV1Api(self.api_client), self.namespace
        fn = apps.patch_namespaced_stateful_set if kind == "StatefulSet" else apps.patch_namespaced_deployment
        self._call(f"{kind} {ns}/{name}", fn, name, ns, patch, _content_type=_PATCH_TYPE)
        action = (
            f"patched {kind} {ns}/{name}: the workspace restarts on the {target.accelerator} pool with the same volumes"
        )
        strategy = ((data.get("spec") or {}).get("updateStrategy") or {}).get("type")
        if kind == "StatefulSet" and strategy == "OnDelete":
            # OnDelete never replaces pods by itself: remove ours so the new template applies.
            core = client.CoreV1Api(self.api_client)
            self._call(f"pod {ns}/{self.pod_name}", core.delete_namespaced_pod, self.pod_name, ns)
            action += " (pod deleted: the StatefulSet updates OnDelete)"
        return SwitchOutcome("kubernetes", action, restarts_workspace=True)
