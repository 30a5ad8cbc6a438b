"""The server looks at unfinished Kubernetes jobs on its own: it only watches and reports (the
cluster recovers a preempted pod by itself, tested in tests/k8s/test_preemption.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.experiments import read_json
from jupyter_starverse.jobmodel import JobSpec, JobState
from tests.k8s.apiserver import KubeServer, serve_kube
from tests.k8s.test_preemption import _node, _Plan


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    with serve_kube(tmp_path) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server


@pytest.fixture
def jp_server_config(kube: KubeServer) -> dict[str, Any]:  # the cluster exists before the server starts
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_starverse": True}},
        "StarverseApp": {"keep_jobs_every": 0.2},
    }


async def test_the_server_reports_what_the_cluster_recovered(jp_serverapp: Any, kube: KubeServer) -> None:
    """The cluster recreates the preempted pod; the server's look only writes it down (the event)."""
    plan = _Plan()
    kube.set_plan(plan)
    backend = Starverse(Settings.from_env()).backend("kubernetes")
    job = backend.submit(JobSpec(name="spot", code="print('hi')", nodes=2, procs_per_node=1))
    for _ in range(200):  # running: both pods up (this test reads the job only until then)
        if backend.get(job.id).state is JobState.RUNNING:
            break
        await asyncio.sleep(0.05)
    kube.evict(next(p for p in kube.objects("pods") if _node(p) == 0)["metadata"]["name"])
    record = Path(job.experiment_dir) / "kubernetes.json"
    for _ in range(1200):  # up to 60 s on a loaded machine; returns as soon as the look wrote it
        if (read_json(record) or {}).get("events"):
            break
        await asyncio.sleep(0.05)
    (event,) = (read_json(record) or {}).get("events") or [None]
    assert event is not None and event["kind"] == "preempted" and "node 0" in event["cause"]
    assert plan.started[0] == 2 and plan.started[1] == 1  # the cluster recreated node 0 only; nothing relaunched
    plan.release.set()
