"""Recovery inside the cluster, driven only by the test API server's controllers.

A preempted pod (an eviction with ``DisruptionTarget``, or ``jobs preempt``: a graceful delete)
checkpoints and exits 143; the Indexed Job's pod failure policy ``Ignore``s it and the Job
controller recreates the pod, which joins the elastic rendezvous and resumes. A failure of the
script counts against ``backoffLimitPerIndex`` (``max_restarts``); a usage error fails the Job.
A JobSet restarts its whole gang (``failurePolicy.maxRestarts``). The backend only reads: restarts
and their lost work come from the pods.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.kubernetes import KubernetesBackend
from jupyter_starverse.experiments import read_json
from jupyter_starverse.jobmodel import Job, JobSpec, JobState
from tests.k8s.apiserver import KubeServer, PodPlan, serve_kube


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    with serve_kube(tmp_path, crds=("jobset",)) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server


def _node(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])


class _Plan:
    """First pods run until :attr:`release` (or fail as told: node -> exit code, ``times`` over);
    a pod that replaces one prints ``resumed`` and succeeds."""

    def __init__(self, fail: dict[int, int] | None = None, times: int = 1) -> None:
        self.fail, self.times = fail or {}, times
        self.release = threading.Event()
        self.started: dict[int, int] = {}
        self.lock = threading.Lock()

    def __call__(self, pod: dict[str, Any]) -> PodPlan:
        node = _node(pod)
        with self.lock:
            n = self.started[node] = self.started.get(node, 0) + 1
        if node in self.fail and n <= self.times:
            return PodPlan(lines=("[default0]:boom",), exit_code=self.fail[node], run_seconds=0.05)
        if n > 1:
            return PodPlan(lines=("[default0]:resumed",), run_seconds=0.05)
        return PodPlan(lines=("[default0]:step",), run_seconds=0, until=self.release)


def _spec(**kw: Any) -> JobSpec:
    return JobSpec(**{"name": "spot", "code": "print('hi')", "nodes": 2, "procs_per_node": 1, **kw})


def _until(check: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"never: {what}")


def _states_until_finished(
    backend: KubernetesBackend, job_id: str, *, seen: Job | None = None
) -> tuple[list[JobState], Job]:
    """Every state a reader polling ``get`` sees (after ``seen``), in order, repeats collapsed; the last job."""
    states: list[JobState] = [seen.state] if seen is not None else []
    deadline = time.monotonic() + 30
    job = seen or backend.get(job_id)
    while time.monotonic() < deadline:
        job = backend.get(job_id)
        if not states or states[-1] is not job.state:
            states.append(job.state)
        if job.state.finished:
            break
        time.sleep(0.02)
    return states, job


def _running(backend: KubernetesBackend, job_id: str) -> Job:
    return next(j for j in backend.watch_job(job_id, timeout=10) if j.state is JobState.RUNNING)


def _record(job: Job) -> dict[str, Any]:
    return dict(read_json(Path(job.experiment_dir) / "kubernetes.json") or {})


def _job_done(kube: KubeServer, name: str) -> str | None:
    for job in kube.objects("jobs"):
        if job["metadata"]["name"] == name:
            for c in job.get("status", {}).get("conditions", []):
                if c["type"] in ("Complete", "Failed") and c["status"] == "True":
                    return str(c["type"])
    return None


def test_a_preempted_pod_recovers_with_no_client_running(kube: KubeServer, settings: Settings) -> None:
    """The issue's test: after the submit, nobody calls the API; the Job controller recreates
    the evicted node's pod (``Ignore``: not counted) and the job completes."""
    plan = _Plan()
    kube.set_plan(plan)
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(max_restarts=0))  # a preemption spends no failure budget
    _running(backend, job.id)
    calls = kube.count()
    first = {_node(p): p["metadata"]["name"] for p in kube.objects("pods")}
    kube.evict(first[1], reason="PreemptionByScheduler")  # the control plane's act, not a client's
    _until(lambda: plan.started.get(1) == 2, "node 1 recreated by the Job controller")
    plan.release.set()
    assert _until(lambda: _job_done(kube, job.id), "the Job finished") == "Complete"
    assert kube.count() == calls  # no client (no Jupyter server, no `jobs` command) took part
    (k8s_job,) = [j for j in kube.objects("jobs") if j["metadata"]["name"] == job.id]
    assert k8s_job["status"].get("failed", 0) == 0 and k8s_job["status"]["succeeded"] == 2
    pods = kube.objects("pods")
    assert first[0] in {p["metadata"]["name"] for p in pods}  # node 0 kept running: only node 1 came back
    assert sum(_node(p) == 1 for p in pods) == 2

    done = backend.get(job.id)  # a reader afterwards sees what the cluster did
    assert done.state is JobState.SUCCEEDED and done.restarts == 1
    (event,) = _record(done)["events"]
    assert event["kind"] == "preempted" and event["action"] == "resumed" and "node 1" in event["cause"]


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_preempt_drill_is_recovered_by_the_cluster(kube: KubeServer, settings: Settings, kind: str) -> None:
    plan = _Plan()
    kube.set_plan(plan)
    backend = KubernetesBackend(settings, kind=kind)
    job = backend.submit(_spec())
    _running(backend, job.id)
    told = backend.preempt(job.id)  # deletes node 1's pod with its grace period: SIGTERM, exit 143
    assert told.state is JobState.PREEMPTED and "the cluster recreates it" in (told.reason or "")
    _until(lambda: plan.started.get(1) == 2, "node 1 recreated")
    plan.release.set()
    states, done = _states_until_finished(backend, job.id, seen=told)
    assert done.state is JobState.SUCCEEDED and JobState.FAILED not in states
    assert done.restarts == 1 and done.reason is None
    (event,) = _record(done)["events"]
    assert event["kind"] == "preempted" and "exit 143" in event["cause"]
    assert backend.get(job.id).restarts == 1 and backend.list()[0].restarts == 1


def test_script_failure_spends_backoff_limit_per_index(kube: KubeServer, settings: Settings) -> None:
    plan = _Plan(fail={1: 1})
    kube.set_plan(plan)
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(max_restarts=1))
    _until(lambda: plan.started.get(1) == 2, "node 1 recreated after its failure")
    plan.release.set()
    _, done = _states_until_finished(backend, job.id)
    assert done.state is JobState.SUCCEEDED and done.restarts == 1
    (event,) = _record(done)["events"]
    assert event["kind"] == "failed" and "node 1" in event["cause"] and "exit code 1" in event["cause"]


def test_budget_runs_out_and_usage_errors_fail_the_job(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(_Plan(fail={0: 1}, times=2))
    backend = KubernetesBackend(settings)
    _, done = _states_until_finished(backend, backend.submit(_spec(max_restarts=1)).id)
    assert done.state is JobState.FAILED and done.restarts == 1
    assert "no restarts left (backoffLimitPerIndex=1" in (done.reason or ""), done.reason
    again = [backend.get(done.id) for _ in range(3)] + [j for j in backend.list() if j.id == done.id]
    assert {j.reason for j in again} == {done.reason}  # judged once

    kube.set_plan(_Plan(fail={1: 2}))
    _, done = _states_until_finished(backend, backend.submit(_spec(max_restarts=3)).id)
    assert done.state is JobState.FAILED and done.restarts == 0 and "usage error" in (done.reason or "")


def test_jobset_restarts_its_gang_when_a_child_job_fails(kube: KubeServer, settings: Settings) -> None:
    plan = _Plan(fail={1: 1})
    kube.set_plan(plan)
    backend = KubernetesBackend(settings, kind="jobset")
    job = backend.submit(_spec(max_restarts=0))  # the child Job fails at once; the JobSet recreates it
    _until(lambda: plan.started.get(0) == 2 and plan.started.get(1) == 2, "the whole gang recreated")
    (js,) = kube.objects("jobsets")
    assert js["status"]["restarts"] == 1 and js["spec"]["failurePolicy"]["restartStrategy"] == "Recreate"
    _, done = _states_until_finished(backend, job.id)
    assert done.state is JobState.SUCCEEDED
