"""Kubernetes workspace switch against the test API server: the exact patch, both directions."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, ConflictError
from jupyter_starverse.kube._pools import default_pools
from jupyter_starverse.modes import Mode, ModeService
from jupyter_starverse.modes._k8s import KubernetesSwitcher, make_workspace_patch
from tests.k8s import apiserver
from tests.k8s._store import Resource

NS = "team"
POD = "workspace-7d9f-abcde"
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TEAM_TOL = {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
NOTEBOOK = {
    "name": "notebook",
    "image": "jupyter/pytorch-notebook:2026",
    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}, "requests": {"nvidia.com/gpu": "1", "cpu": "2"}},
    "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
}
SIDECAR = {"name": "proxy", "image": "busybox:1.36"}
VOLUMES = [{"name": "home", "persistentVolumeClaim": {"claimName": "home-ada"}}]


def _template(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "ws"}},
        "spec": {
            "nodeSelector": {"starverse.io/pool": "a100-80g", "topology.kubernetes.io/zone": "z1"},
            "tolerations": [GPU_TOL, TEAM_TOL],
            "containers": containers,
            "volumes": VOLUMES,
        },
    }


def _deployment(containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "workspace", "namespace": NS, "uid": "uid-deploy"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "ws"}},
            "template": _template(containers or [NOTEBOOK, SIDECAR]),
        },
    }


def _owner(kind: str, name: str, uid: str) -> list[dict[str, Any]]:
    api = "apps/v1"
    return [{"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}]


class _Recording(apiserver._Handler):
    """The test server's handler, also keeping every request body (the patch as sent)."""

    def _body(self) -> Any:
        body = super()._body()
        self.kube.bodies.append((self.command, self.path, self.headers.get("Content-Type"), body))  # type: ignore[attr-defined]
        return body


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[apiserver.KubeServer]:
    with apiserver.serve_kube(tmp_path, namespaces=("default", NS)) as server:
        server.resources["replicasets"] = Resource("apps", "v1", "replicasets", "ReplicaSet")
        server.resources["nodes"] = Resource("", "v1", "nodes", "Node", namespaced=False)
        server.bodies = []  # type: ignore[attr-defined]
        server._http.RequestHandlerClass = _Recording
        for name, pool in (("cpu-1", "cpu"), ("gpu-1", "a100-80g"), ("gpu-2", "h100-80g")):
            _create(server, "nodes", "", {"metadata": {"name": name, "labels": {"starverse.io/pool": pool}}})
        yield server


def _create(kube: apiserver.KubeServer, plural: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.store.create(kube.resources[plural], ns, copy.deepcopy(body))


def _pod(owner: list[dict[str, Any]] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": POD, "labels": {"app": "ws"}}
    if owner:
        meta["ownerReferences"] = owner
    return {"metadata": meta, "spec": _template([NOTEBOOK, SIDECAR])["spec"]}


def _switcher(kube: apiserver.KubeServer, settings: Settings, **env: str) -> KubernetesSwitcher:
    from kubernetes import config

    client = config.new_client_from_config(str(kube.kubeconfig))  # type: ignore[no-untyped-call]
    environ = {"POD_NAME": POD, "KUBERNETES_SERVICE_HOST": "10.0.0.1", **env}
    if "POD_NAMESPACE" not in env:
        settings = settings.replace(namespace=NS)
    return KubernetesSwitcher(settings, environ=environ, api_client=client)


def _patches(kube: apiserver.KubeServer) -> list[tuple[str, str, Any]]:
    return [(path, ctype, body) for method, path, ctype, body in kube.bodies if method == "PATCH"]  # type: ignore[attr-defined]


EXPECTED_TO_CPU = {
    "metadata": {"annotations": {"starverse.io/mode": "cpu", "starverse.io/gpu-type": None}},
    "spec": {
        "template": {
            "metadata": {"annotations": {"starverse.io/mode": "cpu", "starverse.io/gpu-type": None}},
            "spec": {
                "nodeSelector": {"starverse.io/pool": "cpu"},
                "tolerations": [TEAM_TOL],
                "containers": [
                    {
                        "name": "notebook",
                        "image": "jupyter/pytorch-notebook:2026",
                        "resources": {"limits": {"memory": "16Gi"}, "requests": {"cpu": "2"}},
                        "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
                    },
                    SIDECAR,
                ],
            },
        },
        "strategy": {"type": "Recreate", "rollingUpdate": None},
    },
}


def test_patch_to_cpu_is_a_pure_function() -> None:
    patch = make_workspace_patch(_deployment(), target=Mode("cpu"), pools=default_pools())
    assert patch == EXPECTED_TO_CPU


def test_patch_to_gpu_picks_the_named_container_and_pool() -> None:
    cpu_notebook = {**NOTEBOOK, "resources": {"limits": {"memory": "16Gi"}}}
    deployment = _deployment([SIDECAR, cpu_notebook])
    deployment["spec"]["template"]["spec"].update(nodeSelector={"starverse.io/pool": "cpu"}, tolerations=[TEAM_TOL])
    deployment["spec"]["strategy"] = {"type": "Recreate"}
    patch = make_workspace_patch(
        deployment, target=Mode("gpu", "h100-80g", 2), pools=default_pools(), container="notebook"
    )
    assert patch == {
        "metadata": {"annotations": {"starverse.io/mode": "gpu", "starverse.io/gpu-type": "h100-80g"}},
        "spec": {
            "template": {
                "metadata": {"annotations": {"starverse.io/mode": "gpu", "starverse.io/gpu-type": "h100-80g"}},
                "spec": {
                    "nodeSelector": {"starverse.io/pool": "h100-80g"},
                    "tolerations": [TEAM_TOL, GPU_TOL],
                    "containers": [
                        SIDECAR,
                        {
                            **NOTEBOOK,
                            "resources": {
                                "limits": {"memory": "16Gi", "nvidia.com/gpu": "2"},
                                "requests": {"nvidia.com/gpu": "2"},
                            },
                        },
                    ],
                },
            }
        },
    }


def test_patch_rejects_unknown_pool_and_container() -> None:
    with pytest.raises(BadInputError, match="no node pool for 'tpu-v5'"):
        make_workspace_patch(_deployment(), target=Mode("gpu", "tpu-v5", 1), pools=default_pools())
    with pytest.raises(BadInputError, match="no container 'lab'"):
        make_workspace_patch(_deployment(), target=Mode("cpu"), pools=default_pools(), container="lab")


def test_deployment_round_trip_through_the_api(kube: apiserver.KubeServer, settings: Settings) -> None:
    _create(kube, "deployments", NS, _deployment())
    _create(kube, "replicasets", NS, {"metadata": {"name": "workspace-7d9f", "ownerReferences": _owner(
        "Deployment", "workspace", "uid-deploy")}, "spec": {"selector": {"matchLabels": {"app": "ws"}}}})
    _create(kube, "pods", NS, _pod(_owner("ReplicaSet", "workspace-7d9f", "uid-rs")))
    switcher = _switcher(kube, settings)
    service = ModeService(settings, switcher=switcher)
    assert service.current() == Mode("gpu", "a100-80g", 1)

    result = service.switch("cpu")
    assert result.outcome is not None and result.outcome.restarts_workspace
    assert service.current() == Mode("cpu")
    assert result.plan.price.difference is not None and str(result.plan.price.difference) == "-6.4"
    [(path, ctype, body)] = _patches(kube)
    assert path == f"/apis/apps/v1/namespaces/{NS}/deployments/workspace"
    assert ctype == "application/merge-patch+json"
    assert body == EXPECTED_TO_CPU
    stored = kube.store.get(kube.resources["deployments"], NS, "workspace")
    pod_spec = stored["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"starverse.io/pool": "cpu", "topology.kubernetes.io/zone": "z1"}
    assert pod_spec["volumes"] == VOLUMES  # comes back with the same volumes
    assert "nvidia.com/gpu" not in pod_spec["containers"][0]["resources"]["limits"]

    back = service.switch("gpu", gpu_type="h100-80g", gpus=2)
    assert service.current() == Mode("gpu", "h100-80g", 2)
    assert back.plan.price.to_json()["difference_per_hour"] == "23.9"
    (_, _, _first), (_, _, second) = _patches(kube)
    assert second["spec"]["template"]["spec"]["nodeSelector"] == {"starverse.io/pool": "h100-80g"}
    assert second["spec"]["template"]["spec"]["tolerations"] == [TEAM_TOL, GPU_TOL]
    assert second["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"memory": "16Gi", "nvidia.com/gpu": "2"},
        "requests": {"cpu": "2", "nvidia.com/gpu": "2"},
    }
    assert "strategy" not in second["spec"]  # already Recreate after the first switch
    stored = kube.store.get(kube.resources["deployments"], NS, "workspace")
    assert stored["spec"]["template"]["spec"]["volumes"] == VOLUMES


def test_statefulset_on_delete_gets_its_pod_replaced(kube: apiserver.KubeServer, settings: Settings) -> None:
    sts = _deployment()
    sts["kind"] = "StatefulSet"
    sts["metadata"]["uid"] = "uid-sts"
    sts["spec"]["updateStrategy"] = {"type": "OnDelete"}
    _create(kube, "statefulsets", NS, sts)
    _create(kube, "pods", NS, _pod(_owner("StatefulSet", "workspace", "uid-sts")))
    outcome = _switcher(kube, settings, POD_NAMESPACE=NS).apply(Mode("cpu"))  # namespace from the downward API
    assert "StatefulSet team/workspace" in outcome.action
    [(path, _, body)] = _patches(kube)
    assert path == f"/apis/apps/v1/namespaces/{NS}/statefulsets/workspace"
    assert "strategy" not in body["spec"]  # StatefulSets keep their volumes per ordinal
    assert any(c.method == "DELETE" and c.path.endswith(f"/pods/{POD}") for c in kube.calls), kube.calls


def test_bare_pod_is_refused_and_nothing_is_patched(kube: apiserver.KubeServer, settings: Settings) -> None:
    _create(kube, "pods", NS, _pod(None))
    service = ModeService(settings, switcher=_switcher(kube, settings))
    with pytest.raises(ConflictError, match="bare pod team/workspace-7d9f-abcde") as err:
        service.switch("cpu")
    assert "StatefulSet or Deployment" in str(err.value)
    assert _patches(kube) == []
    assert service.current() == Mode("gpu", "a100-80g", 1)  # mode unchanged


def test_gpu_pool_missing_in_the_cluster(kube: apiserver.KubeServer, settings: Settings) -> None:
    _create(kube, "deployments", NS, _deployment())
    _create(kube, "pods", NS, _pod(_owner("Deployment", "workspace", "uid-deploy")))
    service = ModeService(settings, switcher=_switcher(kube, settings))
    with pytest.raises(BadInputError, match="no node in the l40s pool"):
        service.switch("gpu", gpu_type="l40s")
    with pytest.raises(BadInputError, match="no node pool for 'tpu-v5'") as err:
        service.switch("gpu", gpu_type="tpu-v5")
    assert "known pools" in str(err.value)
    assert _patches(kube) == []


def test_forbidden_patch_is_a_clear_permission_error(kube: apiserver.KubeServer, settings: Settings) -> None:
    from jupyter_starverse.errors import PermissionDeniedError

    _create(kube, "deployments", NS, _deployment())
    _create(kube, "pods", NS, _pod(_owner("Deployment", "workspace", "uid-deploy")))
    kube.forbid("patch", "deployments")
    service = ModeService(settings, switcher=_switcher(kube, settings))
    with pytest.raises(PermissionDeniedError, match="forbidden") as err:
        service.switch("cpu")
    assert "service account" in str(err.value)
    assert service.current() == Mode("gpu", "a100-80g", 1)
