"""The test API server is faithful enough for the official client, unmodified."""

# The client accepts plain dicts as bodies and its models type every field Optional:
# mypy: disable-error-code="arg-type,union-attr,index,attr-defined,no-untyped-call,call-overload,operator,misc,type-var"
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from tests.k8s.apiserver import KubeServer, Node, PodPlan  # noqa: E402

T = TypeVar("T")


@pytest.fixture
def api(kube_server: KubeServer) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(str(kube_server.kubeconfig)) as api_client:
        yield api_client


def _job(name: str, completions: int, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"restartPolicy": "Never", "subdomain": name, "containers": [{"name": "main", "image": "img"}]},
            },
            **spec,
        },
    }


def _wait_job(batch: client.BatchV1Api, name: str, timeout: float = 10) -> client.V1Job:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        job = batch.read_namespaced_job(name, "default")
        if any(
            c.status == "True" and c.type in ("Complete", "Failed")
            for c in (job.status and job.status.conditions) or []
        ):
            return job
        time.sleep(0.02)
    raise AssertionError(f"job {name} did not finish")


def _until(fn: Callable[[], T | None], timeout: float = 10) -> T:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = fn()
        if value is not None:
            return value
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def _deployment(name: str) -> dict[str, object]:
    labels = {"app": name}
    pod = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "lab", "image": "jupyter"}]}}
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": labels}, "template": pod}}


def test_crud_status_bodies_and_selectors(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}})
    assert cm.metadata.uid and int(cm.metadata.resource_version) > 0
    core.create_namespaced_config_map("default", {"metadata": {"name": "b", "labels": {"x": "2"}}})
    with pytest.raises(ApiException) as conflict:
        core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    assert conflict.value.status == 409 and '"AlreadyExists"' in conflict.value.body
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("zzz", "default")
    assert missing.value.status == 404
    with pytest.raises(ApiException) as bad_ns:
        core.create_namespaced_config_map("nope", {"metadata": {"name": "a"}})
    assert bad_ns.value.status == 404 and 'namespaces \\"nope\\" not found' in bad_ns.value.body
    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_config_map("default", {"metadata": {"name": "Bad_Name"}})
    assert invalid.value.status == 422

    def names(sel: str) -> list[str]:
        return sorted(i.metadata.name for i in core.list_namespaced_config_map("default", label_selector=sel).items)

    assert names("x=1") == ["a"]
    assert names("x in (1,2)") == ["a", "b"]
    assert names("x,!y") == ["b"]
    assert names("x!=1") == ["b"]
    patched = core.patch_namespaced_config_map("a", "default", {"data": {"k": "v"}})
    assert patched.data == {"k": "v"} and patched.metadata.resource_version != cm.metadata.resource_version
    core.delete_namespaced_config_map("a", "default")
    assert names("") == ["b"]


def test_indexed_job_runs_one_pod_per_index_with_logs(kube_server: KubeServer, api: client.ApiClient) -> None:
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    kube_server.set_plan(lambda pod: PodPlan(lines=("a", "b", "c"), run_seconds=0.1))
    batch.create_namespaced_job("default", _job("train", 3))
    job = _wait_job(batch, "train")
    assert job.status.succeeded == 3 and job.status.completed_indexes == "0,1,2"
    pods = core.list_namespaced_pod("default", label_selector="batch.kubernetes.io/job-name=train").items
    assert sorted(p.spec.hostname for p in pods) == ["train-0", "train-1", "train-2"]
    assert core.read_namespaced_pod_log(pods[0].metadata.name, "default") == "a\nb\nc\n"


def test_failure_policy_and_unschedulable(kube_server: KubeServer, api: client.ApiClient) -> None:
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    kube_server.set_plan(lambda pod: PodPlan(exit_code=3 if pod["metadata"]["name"].startswith("bad-1") else 0))
    batch.create_namespaced_job("default", _job("bad", 2))
    job = _wait_job(batch, "bad")
    assert [c.type for c in job.status.conditions] == ["FailureTarget", "Failed"]  # v1.31+: target first
    kube_server.set_nodes([Node("cpu-1", labels={"pool": "cpu"})])
    spec = _job("gpu", 1)
    spec["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a100"}  # type: ignore[index]
    batch.create_namespaced_job("default", spec)
    time.sleep(0.2)
    (pod,) = core.list_namespaced_pod("default", label_selector="job-name=gpu").items
    assert pod.status.phase == "Pending"
    assert pod.status.conditions[0].reason == "Unschedulable"


def test_watch_timeout_resource_version_and_410(kube_server: KubeServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    listed = core.list_namespaced_config_map("default")
    rv = listed.metadata.resource_version
    threading.Timer(0.1, lambda: core.create_namespaced_config_map("default", {"metadata": {"name": "w"}})).start()
    w = watch.Watch()
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1)
    ]
    assert seen == [("ADDED", "w")]
    kube_server.compact()
    with pytest.raises(ApiException) as gone:
        list(watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1))
    assert gone.value.status == 410


def test_log_follow_and_cascade_delete(kube_server: KubeServer, api: client.ApiClient) -> None:
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    kube_server.set_plan(lambda pod: PodPlan(lines=tuple(str(i) for i in range(20)), run_seconds=0.3))
    job = batch.create_namespaced_job("default", _job("f", 1))
    core.create_namespaced_service(
        "default",
        {
            "metadata": {
                "name": "f",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "f", "uid": job.metadata.uid}],
            },
            "spec": {"clusterIP": "None"},
        },
    )
    pod = _until(
        lambda: next(
            (
                p.metadata.name
                for p in core.list_namespaced_pod("default", label_selector="job-name=f").items
                if p.status.phase == "Running"
            ),
            None,
        )
    )
    resp = core.read_namespaced_pod_log(pod, "default", follow=True, _preload_content=False)
    text = b"".join(resp.stream()).decode()
    assert text.split() == [str(i) for i in range(20)]
    batch.delete_namespaced_job("f", "default", propagation_policy="Foreground")
    assert core.list_namespaced_service("default").items == []
    assert core.list_namespaced_pod("default").items == []


def test_rbac_and_discovery(kube_server: KubeServer, api: client.ApiClient, tmp_path: Path) -> None:
    kube_server.forbid("create", "jobs")
    with pytest.raises(ApiException) as denied:
        client.BatchV1Api(api).create_namespaced_job("default", _job("x", 1))
    assert denied.value.status == 403 and "cannot create resource" in denied.value.body
    res = client.CustomObjectsApi(api).get_api_resources("jobset.x-k8s.io", "v1alpha2")
    assert [r.name for r in res.resources] == ["jobsets"]
    with pytest.raises(ApiException) as absent:
        client.CustomObjectsApi(api).get_api_resources("example.com", "v1")
    assert absent.value.status == 404
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", _deployment("ws"))
    patched = apps.patch_namespaced_deployment(
        "ws", "default", {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}
    )
    assert patched.spec.template.spec.node_selector == {"a": "b"} and patched.metadata.generation == 2
