"""The server looks at unfinished Kubernetes jobs on its own: a preempted group that nobody lists,
shows or follows is relaunched from its checkpoint (the relaunch itself is tested in tests/k8s)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.jobmodel import JobSpec, JobState
from tests.k8s.apiserver import KubeServer, serve_kube
from tests.k8s.test_preemption import _attempt, _node, _plan


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


async def test_the_server_relaunches_a_preempted_job_nobody_follows(jp_serverapp: Any, kube: KubeServer) -> None:
    kube.set_plan(_plan(last_runs=3600))
    backend = Starverse(Settings.from_env()).backend("kubernetes")
    job = backend.submit(JobSpec(name="spot", code="print('hi')", nodes=2, procs_per_node=1))
    for _ in range(200):  # running: both pods up (this test reads the job only until then)
        if backend.get(job.id).state is JobState.RUNNING:
            break
        await asyncio.sleep(0.05)
    kube.evict(next(p for p in kube.objects("pods") if _node(p) == 0)["metadata"]["name"])
    for _ in range(300):
        if sorted(_attempt(p) for p in kube.objects("pods")) == [1, 1]:
            break
        await asyncio.sleep(0.1)
    assert sorted(_attempt(p) for p in kube.objects("pods")) == [1, 1], "the server did not relaunch the group"
