"""Against a real cluster: run only when STARVERSE_TEST_KUBECONFIG is set (skipped, with that
reason, otherwise). STARVERSE_TEST_NAMESPACE picks the namespace (default ``default``);
STARVERSE_TEST_IMAGE, an image with jupyter_starverse and torch, enables the end-to-end run."""

# The client accepts plain dicts as bodies and its models type every field Optional:
# mypy: disable-error-code="arg-type,union-attr,index,attr-defined,no-untyped-call,call-overload,operator,misc,type-var"
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

KUBECONFIG = os.environ.get("STARVERSE_TEST_KUBECONFIG")
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not KUBECONFIG, reason="set STARVERSE_TEST_KUBECONFIG to run the real-cluster tests"),
]


@pytest.fixture
def backend(settings: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.backends.kubernetes import KubernetesBackend

    assert isinstance(settings, Settings) and KUBECONFIG
    monkeypatch.setenv("KUBECONFIG", str(Path(KUBECONFIG).expanduser()))
    namespace = os.environ.get("STARVERSE_TEST_NAMESPACE", "default")
    image = os.environ.get("STARVERSE_TEST_IMAGE") or settings.image
    yield KubernetesBackend(settings.replace(namespace=namespace, image=image))


def test_server_side_dry_run_accepts_every_object(backend: object) -> None:
    """The API server itself validates what we would create (dryRun=All: nothing is stored)."""
    from kubernetes import client

    from jupyter_starverse.backends.kubernetes import KubernetesBackend
    from jupyter_starverse.backends.kubernetes._manifests import to_dict
    from jupyter_starverse.jobmodel import JobSpec

    assert isinstance(backend, KubernetesBackend)
    _, objects = backend.plan(JobSpec(name="dry", code="pass", nodes=16, procs_per_node=2))
    api, ns = backend.conn.api, backend.conn.namespace
    for obj in objects:
        body = to_dict(obj)
        if body["kind"] == "Service":
            client.CoreV1Api(api).create_namespaced_service(ns, body, dry_run="All")
        else:
            client.BatchV1Api(api).create_namespaced_job(ns, body, dry_run="All")


@pytest.mark.skipif(not os.environ.get("STARVERSE_TEST_IMAGE"), reason="set STARVERSE_TEST_IMAGE for a real run")
def test_two_cpu_nodes_end_to_end(backend: object) -> None:
    from jupyter_starverse.backends.kubernetes import KubernetesBackend
    from jupyter_starverse.jobmodel import JobSpec, JobState

    assert isinstance(backend, KubernetesBackend)
    code = "import torch.distributed as d; d.init_process_group('gloo'); print('rank', d.get_rank())"
    job = backend.submit(JobSpec(name="cluster-smoke", code=code, nodes=2, procs_per_node=1))
    try:
        assert backend.wait(job.id, timeout=600).state is JobState.SUCCEEDED
    finally:
        backend.cancel(job.id)


@pytest.mark.skipif(not os.environ.get("STARVERSE_TEST_IMAGE"), reason="set STARVERSE_TEST_IMAGE for a real run")
def test_an_evicted_pod_is_recreated_by_the_real_job_controller(backend: object) -> None:
    """The issue's test on a real control plane: evict one pod (the Eviction API, as a drain does);
    the Job controller recreates it (Ignore: uncounted) and the job completes, read afterwards."""

    from kubernetes import client

    from jupyter_starverse.backends.kubernetes import KubernetesBackend
    from jupyter_starverse.jobmodel import JobSpec, JobState

    assert isinstance(backend, KubernetesBackend)
    code = (
        "import os, time, torch.distributed as d; d.init_process_group('gloo'); "
        "time.sleep(60 if os.environ.get('STARVERSE_NODE_PREEMPTIONS') in ('', None, '0') else 1)"
    )
    job = backend.submit(JobSpec(name="cluster-evict", code=code, nodes=2, procs_per_node=1))
    try:
        running = next(j for j in backend.watch_job(job.id, timeout=600) if j.state is JobState.RUNNING)
        target = next(n for n in running.nodes if n.index == 1)
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=target.name, namespace=backend.conn.namespace))
        client.CoreV1Api(backend.conn.api).create_namespaced_pod_eviction(target.name, backend.conn.namespace, body)
        done = backend.wait(job.id, timeout=900)
        assert done.state is JobState.SUCCEEDED and done.restarts >= 1, done.reason
    finally:
        backend.cancel(job.id)
