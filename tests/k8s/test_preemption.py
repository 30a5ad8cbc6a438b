"""Whole-group restarts on Kubernetes, against the test API server's controllers.

A preempted pod (``jobs preempt``: a graceful delete; or an eviction with ``DisruptionTarget``)
checkpoints and exits 143; the pod failure policy ends the attempt; the backend deletes it and
creates attempt N + 1, which resumes. Failures of the script spend ``max_restarts``; usage
errors never relaunch. The same on the Indexed Job and the JobSet kinds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.kubernetes import KubernetesBackend
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import ConflictError
from jupyter_starverse.experiments import read_json
from jupyter_starverse.jobmodel import Job, JobSpec, JobState
from tests.k8s.apiserver import KubeServer, PodPlan, serve_kube


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    with serve_kube(tmp_path, crds=("jobset",)) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server


def _attempt(pod: dict[str, Any]) -> int:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    return int(env["STARVERSE_ATTEMPT"])


def _node(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])


def _plan(*, fail: dict[int, tuple[int, int]] | None = None, last_runs: float = 0.3) -> Any:
    """Attempts before the last one run until stopped (or fail as told: attempt -> (node, code))."""
    fail = fail or {}

    def plan(pod: dict[str, Any]) -> PodPlan:
        attempt = _attempt(pod)
        if attempt in fail and _node(pod) == fail[attempt][0]:
            return PodPlan(lines=("[default0]:boom",), exit_code=fail[attempt][1], run_seconds=0.2)
        if attempt >= max(fail, default=-1) + 1 and attempt > 0:
            return PodPlan(lines=("[default0]:resumed",), run_seconds=last_runs)
        return PodPlan(lines=("[default0]:step",), run_seconds=3600)

    return plan


def _spec(**kw: Any) -> JobSpec:
    return JobSpec(**{"name": "spot", "code": "print('hi')", "nodes": 2, "procs_per_node": 1, **kw})


def _states_until_finished(
    backend: KubernetesBackend, job_id: str, timeout: float = 30, *, seen: Job | None = None
) -> tuple[list[JobState], Job]:
    """Every state a reader polling ``get`` sees (after ``seen``), in order, repeats collapsed; the last job."""
    states: list[JobState] = [seen.state] if seen is not None else []
    deadline = time.monotonic() + timeout
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


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_preempt_drill_relaunches_the_whole_group(kube: KubeServer, settings: Settings, kind: str) -> None:
    kube.set_plan(_plan())
    backend = KubernetesBackend(settings, kind=kind)
    job = backend.submit(_spec())
    _running(backend, job.id)
    first = {p["metadata"]["name"] for p in kube.objects("pods")}
    told = backend.preempt(job.id)  # deletes node 1's pod with its grace period, as a preemption does
    states, done = _states_until_finished(backend, job.id, seen=told)
    assert states[0] is JobState.PREEMPTED and done.state is JobState.SUCCEEDED
    assert states.index(JobState.RESUMING) < states.index(JobState.SUCCEEDED)
    assert JobState.RUNNING not in states[: states.index(JobState.RESUMING)]  # no flicker back to running
    assert JobState.FAILED not in states
    assert done.restarts == 1 and done.reason is None
    pods = kube.objects("pods")
    assert first.isdisjoint(p["metadata"]["name"] for p in pods)  # every node relaunched, not one index
    assert sorted(_attempt(p) for p in pods) == [1, 1]
    (event,) = _record(done)["events"]
    assert event["kind"] == "preempted" and event["action"] == "resumed" and event["attempt"] == 0
    assert "node 1" in event["cause"] and "SIGTERM" in event["cause"] and "exit 143" in event["cause"]
    assert backend.get(job.id).restarts == 1 and backend.list()[0].restarts == 1


def test_a_preempted_job_nobody_follows_is_relaunched_by_the_keeper(kube: KubeServer, settings: Settings) -> None:
    """What a JupyterLab server does every 30 s: one look at unfinished jobs relaunches the group."""
    kube.set_plan(_plan(last_runs=3600))
    client = Starverse(settings)
    backend = client.backend("kubernetes")
    job = backend.submit(_spec())
    _running(backend, job.id)  # type: ignore[arg-type]
    kube.evict(next(p for p in kube.objects("pods") if _node(p) == 1)["metadata"]["name"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sorted(_attempt(p) for p in kube.objects("pods")) != [1, 1]:
        assert client.keep_jobs() >= 1  # the keeper's look, not a reader of this job
        time.sleep(0.05)
    assert sorted(_attempt(p) for p in kube.objects("pods")) == [1, 1]  # the whole group, attempt 1


def test_eviction_is_a_preemption_not_a_failure(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(_plan())
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(max_restarts=0))  # a preemption does not spend max_restarts
    _running(backend, job.id)
    node0 = next(p for p in kube.objects("pods") if _node(p) == 0)
    kube.evict(node0["metadata"]["name"], reason="TerminationByKubelet")
    seen = [j for j in backend.watch_job(job.id, timeout=30)]  # what a follower of the job sees
    states = [j.state for j in seen]
    assert JobState.PREEMPTED in states and states[-1] is JobState.SUCCEEDED
    first = states.index(JobState.PREEMPTED)
    assert JobState.RUNNING not in states[first : states.index(JobState.RESUMING)]
    preempted = next(j for j in seen if j.state is JobState.PREEMPTED)
    assert "node 0" in (preempted.reason or "") and "disrupted" in (preempted.reason or "")
    assert seen[-1].restarts == 1


def test_script_failure_spends_max_restarts(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(_plan(fail={0: (1, 1)}))
    backend = KubernetesBackend(settings, kind="jobset")
    job = backend.submit(_spec(max_restarts=1))
    states, done = _states_until_finished(backend, job.id)
    assert done.state is JobState.SUCCEEDED and done.restarts == 1 and JobState.RESUMING in states
    (event,) = _record(done)["events"]
    assert event["kind"] == "failed" and "node 1" in event["cause"] and "exit code 1" in event["cause"]


def test_budgets_run_out_and_usage_errors_never_relaunch(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(_plan(fail={0: (0, 1), 1: (0, 1)}))
    backend = KubernetesBackend(settings)
    _, done = _states_until_finished(backend, backend.submit(_spec(max_restarts=1)).id)
    assert done.state is JobState.FAILED and done.restarts == 1
    assert "no restarts left (max_restarts=1 used)" in (done.reason or "")
    again = [backend.get(done.id) for _ in range(3)] + [j for j in backend.list() if j.id == done.id]
    assert {j.reason for j in again} == {done.reason}  # judged once: the same reason, no new events
    assert [e["action"] for e in _record(done)["events"]] == ["resumed", "final"]

    kube.set_plan(_plan(fail={0: (1, 2)}))
    _, done = _states_until_finished(backend, backend.submit(_spec(max_restarts=3)).id)
    assert done.state is JobState.FAILED and done.restarts == 0 and "usage error" in (done.reason or "")

    kube.set_plan(_plan())
    stingy = KubernetesBackend(settings, preempt_restarts=0)
    job = stingy.submit(_spec())
    _running(stingy, job.id)
    stingy.preempt(job.id, node=0)
    _, done = _states_until_finished(stingy, job.id)
    assert done.state is JobState.FAILED and "preemption budget 0/0 used" in (done.reason or "")
    with pytest.raises(ConflictError, match="only a running job"):
        stingy.preempt(job.id)


def test_a_relaunch_rbac_forbids_leaves_the_job_failed_saying_why(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(_plan())
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec())
    _running(backend, job.id)
    kube.forbid("delete", "jobs")
    node1 = next(p for p in kube.objects("pods") if _node(p) == 1)
    kube.evict(node1["metadata"]["name"])
    _, done = _states_until_finished(backend, job.id)
    assert done.state is JobState.FAILED and done.restarts == 0
    assert "could not relaunch" in (done.reason or "") and "forbidden" in (done.reason or "").lower(), done.reason
