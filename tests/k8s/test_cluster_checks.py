"""What the cluster refuses reaches the user with what to do: the shipped Role covers every
backend operation (run as that user on the RBAC-enforcing test server), a 403 names the verb and
resource, pods the Job controller cannot create show why, and submit refuses a cluster older
than 1.29 or missing claims."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.kubernetes import RBAC_MANIFEST, KubernetesBackend
from jupyter_starverse.errors import BackendUnavailableError, NotFoundError, PermissionDeniedError
from jupyter_starverse.jobmodel import JobSpec, JobState
from tests.k8s.apiserver import KubeServer, PodPlan, serve_kube

SA = "system:serviceaccount:default:jupyter-workspace"


def _spec(**kw: object) -> JobSpec:
    return JobSpec(**{"name": "chk", "code": "print('hi')", "nodes": 2, "procs_per_node": 1, **kw})  # type: ignore[arg-type]


@pytest.fixture
def rbac_kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    """A server that authorizes from Roles, with the shipped Role bound to the workspace's account."""
    with serve_kube(tmp_path, rbac=True) as server:
        role, binding = yaml.safe_load_all(RBAC_MANIFEST.read_text())
        binding["subjects"][0]["namespace"] = "default"
        server.apply(role)
        server.apply(binding)
        monkeypatch.setenv("KUBECONFIG", str(server.add_user(tmp_path, SA)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server


def test_the_shipped_role_allows_every_backend_operation(rbac_kube: KubeServer, settings: Settings) -> None:
    hold = PodPlan(lines=("[default0]:step",), run_seconds=30)
    rbac_kube.set_plan(lambda pod: hold)
    rbac_kube.label_namespace("default", {"pod-security.kubernetes.io/enforce": "restricted"})  # and PSA
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec())  # version, claims, Job + Service
    running = next(j for j in backend.watch_job(job.id, timeout=10) if j.state is JobState.RUNNING)
    posts = [c for c in rbac_kube.calls if c.method == "POST"]
    assert posts and all("fieldValidation=Strict" in c.query for c in posts)  # no field silently dropped
    assert [j.id for j in backend.list()] == [job.id]
    # the test server's kubelet prints a pod's lines one per controller tick after it runs: poll
    deadline = time.monotonic() + 20
    while not any("step" in line.text for line in backend.logs(job.id)):
        assert time.monotonic() < deadline, "the pod's log never reached the backend"
        time.sleep(0.05)
    assert backend.preempt(running.id).state is JobState.PREEMPTED  # pods: delete
    assert backend.cancel(job.id).state is JobState.CANCELLED  # jobs: delete
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    kubeconfig = os.environ["KUBECONFIG"]
    with config.new_client_from_config(kubeconfig) as api, pytest.raises(ApiException) as err:  # RBAC is on
        client.CoreV1Api(api).list_namespaced_secret("default")
    assert err.value.status == 403


def test_a_403_names_the_missing_verb_and_resource(rbac_kube: KubeServer, settings: Settings) -> None:
    (role,) = rbac_kube.objects("roles")
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["pods"]]
    role["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]})
    rbac_kube.store.update(rbac_kube.resources["roles"], "default", role["metadata"]["name"], role)
    rbac_kube.set_plan(lambda pod: PodPlan(run_seconds=30))
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec())
    next(j for j in backend.watch_job(job.id, timeout=10) if j.state is JobState.RUNNING)
    with pytest.raises(PermissionDeniedError) as err:
        backend.preempt(job.id)
    hint = err.value.hint or ""
    assert f"{SA} may not delete pods in default" in hint and 'verbs: ["delete"]' in hint
    assert "kubectl auth can-i delete pods -n default" in hint
    backend.cancel(job.id)


def test_pods_the_cluster_refuses_show_why_in_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    with serve_kube(tmp_path) as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        kube.apply({"kind": "ResourceQuota", "metadata": {"name": "gpus"}, "spec": {"hard": {"pods": "1"}}})
        kube.set_plan(lambda pod: PodPlan(run_seconds=30))
        backend = KubernetesBackend(settings)
        job = backend.submit(_spec())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "FailedCreate" not in (backend.get(job.id).reason or ""):
            time.sleep(0.02)
        shown = backend.get(job.id)
        assert shown.state is JobState.PENDING
        assert "FailedCreate: Error creating: pods" in (shown.reason or "") and "exceeded quota: gpus" in (
            shown.reason or ""
        )
        assert "kubectl describe resourcequota -n default" in (shown.reason or "")
        backend.cancel(job.id)

        kube.store.delete(kube.resources["persistentvolumeclaims"], "default", "starverse-experiments", None, {})
        with pytest.raises(NotFoundError, match="no PersistentVolumeClaim 'starverse-experiments'") as err:
            backend.submit(_spec())
        assert "STARVERSE_EXPERIMENTS_CLAIM" in (err.value.hint or "")

    with serve_kube(tmp_path, version=(1, 28)) as old:
        monkeypatch.setenv("KUBECONFIG", str(old.kubeconfig))
        with pytest.raises(BackendUnavailableError, match=r"runs Kubernetes 1\.28; jobs need 1\.29") as err:
            KubernetesBackend(settings).submit(_spec())
        assert not old.objects("jobs")


def test_the_shipped_role_runs_a_trainjob_and_its_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    """As the Role's user: the TrainJob's own TrainingRuntime is created first (the Trainer webhook
    refuses a TrainJob whose runtime does not exist yet), then owned by the TrainJob; logs come
    from its pods' ``node`` container; a cancel takes the runtime and the JobSet with it."""
    with serve_kube(tmp_path, rbac=True, crds=("jobset", "trainjob")) as kube:
        role, binding = yaml.safe_load_all(RBAC_MANIFEST.read_text())
        binding["subjects"][0]["namespace"] = "default"
        kube.apply(role)
        kube.apply(binding)
        monkeypatch.setenv("KUBECONFIG", str(kube.add_user(tmp_path, SA)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        kube.set_plan(lambda pod: PodPlan(lines=("[default0]:step",), run_seconds=30))
        backend = KubernetesBackend(settings, kind="trainjob")
        job = backend.submit(_spec())
        next(j for j in backend.watch_job(job.id, timeout=10) if j.state is JobState.RUNNING)
        (runtime,) = kube.objects("trainingruntimes")
        (trainjob,) = kube.objects("trainjobs")
        assert runtime["metadata"]["ownerReferences"][0]["uid"] == trainjob["metadata"]["uid"]
        deadline = time.monotonic() + 20
        while not any("step" in line.text for line in backend.logs(job.id)):
            assert time.monotonic() < deadline, "the pod's log never reached the backend"
            time.sleep(0.05)
        assert [j.id for j in backend.list()] == [job.id]
        assert backend.cancel(job.id).state is JobState.CANCELLED
        assert not kube.objects("trainingruntimes") and not kube.objects("jobsets")

        from kubernetes import client, config
        from kubernetes.client.rest import ApiException

        body = {**trainjob, "metadata": {"name": "orphan"}}
        with config.new_client_from_config(os.environ["KUBECONFIG"]) as api, pytest.raises(ApiException) as err:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", {**body, "status": None}
            )
        assert err.value.status == 403 and "must be created before the TrainJob" in str(err.value.body)
