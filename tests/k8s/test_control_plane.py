"""The test API server refuses what a real control plane refuses, rule by rule (``_admission``),
and its Job controller applies the pod failure policy and back-off limits as documented."""

# The client accepts plain dicts as bodies and its models type every field Optional:
# mypy: disable-error-code="arg-type,union-attr,index,attr-defined,no-untyped-call,call-overload,operator,misc"
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from tests.k8s.apiserver import KubeServer, PodPlan, serve_kube  # noqa: E402

T = TypeVar("T")
RUNNING = threading.Event()  # never set: pods run until the test (the kubelet) ends them


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeServer]:
    with serve_kube(tmp_path) as server:
        server.set_plan(lambda pod: PodPlan(until=RUNNING))
        yield server


@pytest.fixture
def api(kube: KubeServer) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(str(kube.kubeconfig)) as api_client:
        yield api_client


def _eventually(fn: Callable[[], T | None], what: str, timeout: float = 5.0) -> T:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def _container(**extra: Any) -> dict[str, Any]:
    return {"name": "main", "image": "img", **extra}


def _job(name: str, completions: int = 1, pod: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [_container()], **(pod or {})}},
            **spec,
        },
    }


def _pods(core: client.CoreV1Api, job: str) -> list[Any]:
    items = core.list_namespaced_pod("default", label_selector=f"batch.kubernetes.io/job-name={job}").items
    return sorted(items, key=lambda p: p.metadata.creation_timestamp or 0)


def _running(core: client.CoreV1Api, job: str, n: int) -> list[Any]:
    def ready() -> list[Any] | None:
        pods = [p for p in _pods(core, job) if p.status.phase == "Running"]
        return pods if len(pods) == n else None

    return _eventually(ready, f"{n} running pods of {job}")


def _message(err: pytest.ExceptionInfo[ApiException]) -> str:
    return str(json.loads(err.value.body)["message"])


def _events(core: client.CoreV1Api, name: str, reason: str) -> list[Any]:
    items = core.list_namespaced_event("default").items
    return [e for e in items if e.involved_object.name == name and e.reason == reason]


def _finished(batch: client.BatchV1Api, name: str) -> Any:
    def done() -> Any:
        job = batch.read_namespaced_job(name, "default")
        types = [c.type for c in job.status.conditions or [] if c.status == "True"]
        return job if {"Complete", "Failed"} & set(types) else None

    return _eventually(done, f"job {name} finished")


# -- admission --------------------------------------------------------------------------
def test_pod_security_restricted_refuses_pods_and_the_job_says_why(kube: KubeServer, api: client.ApiClient) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    kube.label_namespace("default", {"pod-security.kubernetes.io/enforce": "restricted"})
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [_container()]}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod)
    assert err.value.status == 403 and 'violates PodSecurity "restricted:latest"' in _message(err)
    assert "Privilege Escalation" in _message(err) and "Running as Non-root" in _message(err)
    batch.create_namespaced_job("default", _job("loose"))  # workloads are admitted; their pods are not
    (event,) = _eventually(lambda: _events(core, "loose", "FailedCreate"), "FailedCreate")
    assert event.type == "Warning" and "violates PodSecurity" in event.message and _pods(core, "loose") == []
    secure = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            _container(securityContext={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}})
        ],
    }
    batch.create_namespaced_job("default", _job("tight", pod=secure))
    _running(core, "tight", 1)


def test_quota_and_missing_priority_class_refuse_pods_with_failed_create(
    kube: KubeServer, api: client.ApiClient
) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    kube.apply({"kind": "ResourceQuota", "metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "6"}}})
    sized = {"containers": [_container(resources={"requests": {"cpu": "4"}, "limits": {"cpu": "4"}})]}
    batch.create_namespaced_job("default", _job("big", 2, pod=sized))
    _running(core, "big", 1)  # the first fits, the second would take requests.cpu to 8 > 6
    (event,) = _eventually(lambda: _events(core, "big", "FailedCreate"), "FailedCreate")
    assert "exceeded quota: compute, requested: requests.cpu=4, used: requests.cpu=4, limited: requests.cpu=6" in (
        event.message
    )
    with pytest.raises(ApiException) as err:  # a quota on cpu refuses a pod that states none
        core.create_namespaced_pod("default", {"metadata": {"name": "bare"}, "spec": {"containers": [_container()]}})
    assert err.value.status == 403 and "must specify requests.cpu" in _message(err)
    spot = {"priorityClassName": "spot", **sized}
    kube.apply({"kind": "ResourceQuota", "metadata": {"name": "more"}, "spec": {"hard": {"pods": "10"}}}, "default")
    batch.create_namespaced_job("default", _job("spot", 1, pod=spot))
    (event,) = _eventually(lambda: _events(core, "spot", "FailedCreate"), "FailedCreate")
    assert event.message.endswith("no PriorityClass with name spot was found")
    assert _pods(core, "spot") == []


def test_rbac_from_roles_refuses_a_verb_the_role_lacks(tmp_path: Path) -> None:
    with serve_kube(tmp_path, rbac=True) as kube:
        kube.apply(
            {
                "kind": "Role",
                "metadata": {"name": "reader"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
                    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
                ],
            }
        )
        kube.apply(
            {
                "kind": "RoleBinding",
                "metadata": {"name": "reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "workspace", "namespace": "default"}],
            }
        )
        path = kube.add_user(tmp_path, "system:serviceaccount:default:workspace")
        with config.new_client_from_config(str(path)) as api:
            core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
            assert core.list_namespaced_pod("default").items == []
            batch.create_namespaced_job("default", _job("j"))
            with pytest.raises(ApiException) as err:
                batch.delete_namespaced_job("j", "default")
            assert err.value.status == 403
            assert (
                'jobs.batch "j" is forbidden: User "system:serviceaccount:default:workspace" cannot delete '
                'resource "jobs" in API group "batch" in the namespace "default"'
            ) in _message(err)
            with pytest.raises(ApiException) as err:
                core.list_namespaced_event("default")
            assert 'cannot list resource "events" in API group ""' in _message(err)
        with config.new_client_from_config(str(kube.add_user(tmp_path, "mallory"))) as api:
            with pytest.raises(ApiException) as err:
                client.CoreV1Api(api).list_namespaced_pod("default")
            assert err.value.status == 403 and 'User "mallory" cannot list' in _message(err)


def _post(kube: KubeServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], list[str]]:
    """A raw POST, as kubectl sends one (the official client refuses unknown fields itself)."""
    request = urllib.request.Request(
        kube.url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": "Bearer test-token", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read()), response.headers.get_all("Warning") or []
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), []


def test_strict_field_validation_refuses_unknown_fields(kube: KubeServer) -> None:
    job = _job("typo")
    job["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    path = "/apis/batch/v1/namespaces/default/jobs"
    code, status, _ = _post(kube, path + "?fieldValidation=Strict", job)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'Job in version "v1" cannot be handled as a Job: strict decoding error: '
        'unknown field "spec.template.spec.restartPolicyy"'
    )
    code, created, warnings = _post(kube, path, job)  # the default, Warn: dropped, with a warning
    assert code == 201 and "restartPolicyy" not in created["spec"]["template"]["spec"]
    assert warnings == ['299 - "unknown field \\"spec.template.spec.restartPolicyy\\""']


# -- the Job controller ---------------------------------------------------------------------
POLICY = {
    "rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2]}},
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}},
    ]
}


def test_ignore_recreates_a_disrupted_pod_without_counting(kube: KubeServer, api: client.ApiClient) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(
        "default", _job("train", 2, podFailurePolicy=POLICY, backoffLimitPerIndex=0, maxFailedIndexes=0)
    )
    first = _running(core, "train", 2)
    victim = next(p for p in first if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "1")
    kube.fail_pod(victim.metadata.name, exit_code=143, disruption="PreemptionByScheduler")
    again = _running(core, "train", 2)
    new = next(p for p in again if p.metadata.name not in {q.metadata.name for q in first})
    assert new.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"
    assert new.metadata.annotations["batch.kubernetes.io/job-index-failure-count"] == "0"
    assert new.metadata.annotations["batch.kubernetes.io/job-index-ignored-failure-count"] == "1"
    job = batch.read_namespaced_job("train", "default")
    assert (job.status.failed or 0) == 0 and not job.status.conditions and not job.status.failed_indexes


def test_count_fails_the_index_past_backoff_limit_per_index(kube: KubeServer, api: client.ApiClient) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(
        "default", _job("train", 2, podFailurePolicy=POLICY, backoffLimitPerIndex=1, maxFailedIndexes=0)
    )

    def fail_index_0() -> str:
        pod = next(
            p
            for p in _running(core, "train", 2)
            if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "0"
        )
        kube.fail_pod(pod.metadata.name, exit_code=1)
        return str(pod.metadata.name)

    gone = fail_index_0()  # counted (1 <= backoffLimitPerIndex): recreated, its count on the new pod
    replaced = _eventually(
        lambda: [p for p in _running(core, "train", 2) if p.metadata.name != gone and p.metadata.name[6] == "0"],
        "index 0 recreated",
    )
    assert replaced[0].metadata.annotations["batch.kubernetes.io/job-index-failure-count"] == "1"
    fail_index_0()  # the second counted failure: index 0 fails, more than maxFailedIndexes 0
    job = _finished(batch, "train")
    assert job.status.failed_indexes == "0" and job.status.failed == 3  # + index 1 after its SIGTERM
    assert [(c.type, c.reason) for c in job.status.conditions] == [
        ("FailureTarget", "MaxFailedIndexesExceeded"),
        ("Failed", "MaxFailedIndexesExceeded"),
    ]
    assert all(p.status.phase == "Failed" for p in _pods(core, "train"))  # the rest got SIGTERM


def test_fail_index_lets_the_others_finish_and_fail_job_ends_at_once(kube: KubeServer, api: client.ApiClient) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job("default", _job("idx", 2, podFailurePolicy=POLICY, backoffLimitPerIndex=3))
    a, b = _running(core, "idx", 2)
    kube.fail_pod(a.metadata.name, exit_code=42)  # FailIndex: no retry of it, the other runs on
    _eventually(lambda: batch.read_namespaced_job("idx", "default").status.failed_indexes, "failed index")
    assert not batch.read_namespaced_job("idx", "default").status.conditions
    kube.fail_pod(b.metadata.name, exit_code=0)
    job = _finished(batch, "idx")
    assert job.status.conditions[-1].reason == "FailedIndexes" and job.status.succeeded == 1

    batch.create_namespaced_job("default", _job("usage", 2, podFailurePolicy=POLICY, backoffLimitPerIndex=3))
    c, _ = _running(core, "usage", 2)
    kube.fail_pod(c.metadata.name, exit_code=2)
    job = _finished(batch, "usage")
    failed = job.status.conditions[-1]
    assert failed.type == "Failed" and failed.reason == "PodFailurePolicy"
    assert f"for pod default/{c.metadata.name} failed with exit code 2 matching FailJob rule at index 1" in (
        failed.message
    )

    batch.create_namespaced_job("default", _job("plain", 1, backoffLimit=1))  # no policy: every failure counts
    for _ in range(2):
        (pod,) = _running(core, "plain", 1)
        kube.fail_pod(pod.metadata.name, exit_code=1)
        _eventually(lambda p=pod: all(q.metadata.name != p.metadata.name or q.status.phase == "Failed"
                                      for q in _pods(core, "plain")), "failed")  # fmt: skip
    job = _finished(batch, "plain")
    assert job.status.conditions[-1].reason == "BackoffLimitExceeded" and job.status.failed == 2
