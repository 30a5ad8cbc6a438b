"""Recovery inside the cluster, driven only by the test API server's controllers.

A preempted pod (an eviction with ``DisruptionTarget``, or ``jobs preempt``: a graceful delete)
checkpoints and exits 143; the Indexed Job's pod failure policy ``Ignore``s it and the Job
controller recreates the pod, which joins the elastic rendezvous and resumes. A failure of the
script counts against ``backoffLimitPerIndex`` (``max_restarts``); a usage error fails the Job.
A JobSet restarts its whole gang (``failurePolicy.maxRestarts``); a TrainJob runs as the JobSet of
its own TrainingRuntime (the test server plays Kubeflow Trainer's controller). The backend only
reads: restarts and their lost work come from the pods.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.kubernetes import KubernetesBackend
from jupyter_starverse.backends.kubernetes._checks import BOOT
from jupyter_starverse.experiments import read_json
from jupyter_starverse.jobmodel import Job, JobSpec, JobState
from tests.k8s._controllers import container_env
from tests.k8s.apiserver import KubeServer, PodPlan, serve_kube


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    with serve_kube(tmp_path, crds=("jobset", "trainjob", "pytorchjob")) as server:
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


def _done(kube: KubeServer, plural: str, name: str) -> str | None:
    for obj in kube.objects(plural):
        if obj["metadata"]["name"] == name:
            for c in obj.get("status", {}).get("conditions", []):
                if c["type"] in ("Complete", "Failed") and c["status"] == "True":
                    return str(c["type"])
    return None


def test_a_preempted_trainjob_pod_recovers_with_no_client_running(kube: KubeServer, settings: Settings) -> None:
    """A TrainJob recovers in the cluster too: its own TrainingRuntime carries the restart rules,
    the Trainer controller makes the JobSet from it, and the evicted node's pod is recreated by the
    Job controller (``Ignore``) with no client; the JobSet's gang was not restarted."""
    plan = _Plan()
    kube.set_plan(plan)
    backend = KubernetesBackend(settings, kind="trainjob")
    job = backend.submit(_spec(max_restarts=0))
    _running(backend, job.id)
    calls = kube.count()
    first = {_node(p): p for p in kube.objects("pods")}
    env = container_env(first[1])
    assert env["PET_MASTER_ADDR"] == f"{job.id}-node-0-0.{job.id}" and env["PET_NODE_RANK"] == "1"
    assert f"--rdzv-endpoint={env['PET_MASTER_ADDR']}:29500" in first[1]["spec"]["containers"][0]["command"]
    kube.evict(first[1]["metadata"]["name"], reason="PreemptionByScheduler")
    _until(lambda: plan.started.get(1) == 2, "node 1 recreated by the Job controller")
    plan.release.set()
    assert _until(lambda: _done(kube, "trainjobs", job.id), "the TrainJob finished") == "Complete"
    assert kube.count() == calls  # no client (no Jupyter server, no `jobs` command) took part
    (trainjob,) = kube.objects("trainjobs")
    (runtime,) = kube.objects("trainingruntimes")
    (jobset,) = kube.objects("jobsets")
    for owned in (runtime, jobset):  # both go when the TrainJob is deleted
        assert owned["metadata"]["ownerReferences"][0]["uid"] == trainjob["metadata"]["uid"]
    assert not (jobset.get("status") or {}).get("restarts")  # one pod came back, not the gang
    assert first[0]["metadata"]["name"] in {p["metadata"]["name"] for p in kube.objects("pods")}

    done = backend.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.restarts == 1
    (event,) = _record(done)["events"]
    assert event["kind"] == "preempted" and event["action"] == "resumed" and "node 1" in event["cause"]


def test_a_trainjob_past_its_script_budget_fails_in_the_cluster(kube: KubeServer, settings: Settings) -> None:
    """A script failure fails the child Job (``backoffLimitPerIndex`` 0); the JobSet restarts the
    gang ``maxRestarts`` times (here: max_restarts 0 + preemption budget 1 = 1) and then fails,
    and the TrainJob with it, with no client; a reader sees why."""
    plan = _Plan(fail={1: 1}, times=5)
    kube.set_plan(plan)
    backend = KubernetesBackend(settings, kind="trainjob", preempt_restarts=1)
    job = backend.submit(_spec(max_restarts=0))
    calls = kube.count()
    assert _until(lambda: _done(kube, "trainjobs", job.id), "the TrainJob ended") == "Failed"
    assert kube.count() == calls
    (jobset,) = kube.objects("jobsets")
    assert jobset["status"]["restarts"] == 1 and plan.started[1] == 2
    done = backend.get(job.id)
    assert done.state is JobState.FAILED and done.restarts == 1
    assert "node 1 (" in (done.reason or "") and "failed with exit code 1" in (done.reason or "")
    assert "no restarts left (the JobSet's failurePolicy.maxRestarts=1" in (done.reason or ""), done.reason


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


def _boot(pod: dict[str, Any]) -> tuple[int, str]:
    """The pod command's own start (``_checks.BOOT``) in the environment the kubelet gives the pod
    (downward API included): its exit code, and what it wrote for the termination message."""
    env = {"PATH": os.environ.get("PATH", ""), **container_env(pod)}
    done = subprocess.run([sys.executable, "-c", BOOT, "json", "platform"], env=env, capture_output=True, text=True)
    said = [line.removeprefix("starverse: ") for line in done.stderr.splitlines() if line.startswith("starverse: ")]
    return done.returncode, (said[-1] if said else "")


class _UntilReleased:
    """Every pod first runs the pod command's start (a refusal ends it with that code), then runs
    until :attr:`release`; node 1's first pod ends as its agent does when node 0's rendezvous store
    is gone (once :attr:`store_lost` is set: exit 143 with BOOT's message)."""

    def __init__(self) -> None:
        self.release, self.store_lost = threading.Event(), threading.Event()
        self.started: dict[int, int] = {}
        self.exits: list[tuple[int, int, str]] = []
        self.lock = threading.Lock()

    def __call__(self, pod: dict[str, Any]) -> PodPlan:
        node = _node(pod)
        with self.lock:
            n = self.started[node] = self.started.get(node, 0) + 1
        code, said = _boot(pod)
        if code:
            with self.lock:
                self.exits.append((node, code, said))
            return PodPlan(lines=(f"[boot]:{said}",), exit_code=code, run_seconds=0, message=said)
        if node == 1 and n == 1:
            said = "the rendezvous store of node 0 is gone (its pod ended): this pod ends too (exit 143)"
            return PodPlan(
                lines=("[default0]:step",), exit_code=143, run_seconds=0, until=self.store_lost, message=said
            )
        return PodPlan(lines=("[default0]:step",), run_seconds=0, until=self.release)


def _pod_of(kube: KubeServer, node: int, nth: int) -> dict[str, Any]:
    pods = sorted(
        (p for p in kube.objects("pods") if _node(p) == node), key=lambda p: p["metadata"]["creationTimestamp"]
    )
    return pods[nth - 1] if len(pods) >= nth else {}


def _phase(kube: KubeServer, name: str) -> str:
    return next((p["status"]["phase"] for p in kube.objects("pods") if p["metadata"]["name"] == name), "")


def test_preemptions_past_the_budget_fail_the_job_with_no_client(kube: KubeServer, settings: Settings) -> None:
    """``Ignore`` has no limit: each recreated pod compares its node's ignored-failure count (its own
    annotation, through the downward API) with the budget and exits 86, which the policy fails the Job on."""
    plan = _UntilReleased()  # store_lost stays unset: node 1's first pod runs until it is evicted
    kube.set_plan(plan)
    backend = KubernetesBackend(settings, preempt_restarts=1)
    job = backend.submit(_spec(max_restarts=0))
    _running(backend, job.id)
    calls = kube.count()
    for n in (1, 2):  # the second preemption of node 1 is one more than the budget of 1
        pod = _until(
            lambda n=n: _pod_of(kube, 1, n).get("status", {}).get("phase") == "Running" and _pod_of(kube, 1, n),
            f"pod {n} of node 1 runs",
        )
        kube.evict(pod["metadata"]["name"])
        _until(lambda n=n: plan.started.get(1) == n + 1, f"node 1 recreated ({n})")
    assert _until(lambda: _job_done(kube, job.id), "the Job ended") == "Failed"
    assert kube.count() == calls  # the cluster alone stopped it
    (k8s_job,) = [j for j in kube.objects("jobs") if j["metadata"]["name"] == job.id]
    (failed,) = [c for c in k8s_job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "PodFailurePolicy" and "exit code 86" in failed["message"]
    assert plan.exits == [(1, 86, plan.exits[0][2])] and "preempted 2 times" in plan.exits[0][2]
    done = backend.get(job.id)
    assert done.state is JobState.FAILED and done.restarts == 2
    assert "preempted more often than the preemption budget allows" in (done.reason or "")
    assert "preemption budget 1 per node used" in (done.reason or ""), done.reason


def test_node_0_preempted_the_group_re_forms_at_its_dns_name(kube: KubeServer, settings: Settings) -> None:
    """Node 0's agent hosts the c10d store: when its pod goes, node 1's agent loses the store and its
    pod ends 143 (``test_boot_exit``); both are recreated uncounted, and the rendezvous endpoint
    ``<job>-0.<job>`` resolves to the recreated node 0 (the headless Service's DNS record)."""
    plan = _UntilReleased()
    kube.set_plan(plan)
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(max_restarts=0))
    _running(backend, job.id)
    endpoint = f"{job.id}-0.{job.id}"
    first0 = _pod_of(kube, 0, 1)
    assert kube.resolve(endpoint) == [first0["status"]["podIP"]]
    assert f"--rdzv-endpoint={endpoint}:29500" in _pod_of(kube, 1, 1)["spec"]["containers"][0]["command"]
    kube.evict(first0["metadata"]["name"])
    _until(lambda: _phase(kube, first0["metadata"]["name"]) == "Failed", "node 0's pod ended")
    plan.store_lost.set()
    _until(lambda: plan.started.get(0) == 2 and plan.started.get(1) == 2, "both nodes recreated")
    again0 = _until(lambda: _pod_of(kube, 0, 2).get("status", {}).get("podIP") and _pod_of(kube, 0, 2), "node 0 back")
    assert kube.resolve(endpoint) == [again0["status"]["podIP"]] != [first0["status"]["podIP"]]
    assert again0["spec"]["hostname"] == f"{job.id}-0" and again0["spec"]["subdomain"] == job.id
    plan.release.set()
    assert _until(lambda: _job_done(kube, job.id), "the Job finished") == "Complete"
    (k8s_job,) = [j for j in kube.objects("jobs") if j["metadata"]["name"] == job.id]
    assert k8s_job["status"].get("failed", 0) == 0  # nothing counted against backoffLimitPerIndex
    done = backend.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.restarts == 2
    causes = sorted(e["cause"] for e in _record(done)["events"])
    assert "node 0" in causes[0] and "disrupted" in causes[0]
    assert "node 1" in causes[1] and "lost the rendezvous store of node 0" in causes[1], causes


class _BootThenRun:
    """Every pod (by name) first runs the pod command's start (a refusal ends it with that code),
    then runs until :attr:`release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exits: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()

    def __call__(self, pod: dict[str, Any]) -> PodPlan:
        code, said = _boot(pod)
        if code:
            with self.lock:
                self.exits.append((pod["metadata"]["name"], code, said))
            return PodPlan(lines=(f"[boot]:{said}",), exit_code=code, run_seconds=0, message=said)
        return PodPlan(lines=("[default0]:step",), run_seconds=0, until=self.release)


def _running_pod(kube: KubeServer, name: str, not_uid: str = "") -> dict[str, Any] | None:
    for pod in kube.objects("pods"):
        meta = pod["metadata"]
        if meta["name"] == name and meta["uid"] != not_uid and pod["status"]["phase"] == "Running":
            return pod
    return None


def test_a_preempted_pytorchjob_worker_restarts_in_the_cluster_until_the_budget_ends_it(
    kube: KubeServer, settings: Settings
) -> None:
    """The training-operator deletes a pod that ended with a retryable code (143 after SIGTERM) and
    recreates it under its name, with no client; its ``backoffLimit`` cannot bound that (it counts
    container restarts of ``Never`` pods: 0), so the pod command counts its pod's starts on the run
    folder's volume and, past the preemption budget, exits 86: a permanent code (1-127) for the
    operator, which fails the job, and ``cleanPodPolicy: Running`` stops the master."""
    plan = _BootThenRun()
    kube.set_plan(plan)
    backend = KubernetesBackend(settings, kind="pytorchjob", preempt_restarts=1)
    job = backend.submit(_spec(max_restarts=0))
    worker = f"{job.id}-worker-0"
    pod = _until(lambda: _running_pod(kube, worker), "the worker runs")
    _until(lambda: _running_pod(kube, f"{job.id}-master-0"), "the master runs")
    calls = kube.count()
    for n in (1, 2):  # the second preemption is one more than the budget of 1
        kube.evict(worker)
        if n == 1:
            pod = _until(lambda old=pod["metadata"]["uid"]: _running_pod(kube, worker, old), "worker recreated")
    assert _until(lambda: _done(kube, "pytorchjobs", job.id), "the PyTorchJob ended") == "Failed"
    assert kube.count() == calls  # the cluster alone restarted it, then stopped it
    (pj,) = kube.objects("pytorchjobs")
    (failed,) = [c for c in pj["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["message"] == f'job "{job.id}" is failing because "Worker" replica(s) failed.'
    assert [(name, code) for name, code, _ in plan.exits] == [(worker, 86)]
    assert "preempted 2 times" in plan.exits[0][2]
    restarting = [e for e in kube.objects("events") if e["reason"] == "PyTorchJobRestarting"]
    assert restarting and restarting[0]["count"] == 2
    master = _until(
        lambda: next((p for p in kube.objects("pods") if p["metadata"]["name"] == f"{job.id}-master-0"
                      and p["status"]["phase"] == "Failed"), None),
        "the master stopped (cleanPodPolicy Running)",
    )  # fmt: skip
    assert _exit(master) == 143
    done = backend.get(job.id)
    assert done.state is JobState.FAILED and done.restarts == 2
    assert "preempted more often than the preemption budget allows" in (done.reason or ""), done.reason
    assert "preemption budget 1 per node used" in (done.reason or ""), done.reason


def _exit(pod: dict[str, Any]) -> int | None:
    for cs in pod["status"].get("containerStatuses") or []:
        if "terminated" in (cs.get("state") or {}):
            return int(cs["state"]["terminated"]["exitCode"])
    return None
