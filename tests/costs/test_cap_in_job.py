"""The budget cap inside the job (Kubernetes has no supervisor beside the pods): the
backend exports the cap and the whole job's rate; ``runtime.steps`` stops every rank after
a checkpoint before the cap, and records the reason in ``cost.json``."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.costs import BUDGET_REASON_PREFIX, read_cost, write_cost
from jupyter_starverse.experiments import list_checkpoints
from jupyter_starverse.jobmodel import JobSpec, JobState
from jupyter_starverse.runtime._budget import BudgetGuard
from tests.costs._scripts import FOREVER as SCRIPT

CAP_VARS = ("STARVERSE_BUDGET", "STARVERSE_COST_PER_SECOND", "STARVERSE_COST_INFO")


def _pod_env(settings: Settings, spec: JobSpec) -> dict[str, Any]:
    pytest.importorskip("kubernetes")
    from jupyter_starverse.backends.kubernetes import KubernetesBackend
    from jupyter_starverse.backends.kubernetes._manifests import to_dict

    settings = settings.replace(namespace="team")
    _, objects = KubernetesBackend(settings).plan(spec, namespace="team")
    job = to_dict(objects[0])
    (container,) = [c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_kubernetes_pods_carry_the_cap_and_the_whole_jobs_rate(cost_settings: Settings) -> None:
    spec = JobSpec(name="big", code="pass", accelerator="rtx4090", nodes=2, procs_per_node=4, budget="10")
    env = _pod_env(cost_settings, spec)
    assert env["STARVERSE_BUDGET"] == "10"
    assert Decimal(env["STARVERSE_COST_PER_SECOND"]) == Decimal("1.8") * 8 / 3600  # 8 cards at 1.8 per card-hour
    info = json.loads(env["STARVERSE_COST_INFO"])
    assert info["nodes"] == 2 and info["units_per_node"] == 4 and info["currency"] == "CNY"
    assert info["user"] == "alice" and info["upper_bound"] is False

    spot = _pod_env(cost_settings, JobSpec(name="s", code="pass", accelerator="rtx4090", billing="spot", budget=5))
    assert Decimal(spot["STARVERSE_COST_PER_SECOND"]) >= Decimal("1.2") / 3600  # the high end of the spot range
    assert json.loads(spot["STARVERSE_COST_INFO"])["upper_bound"] is True

    plain = _pod_env(cost_settings, JobSpec(name="free", code="pass", accelerator="rtx4090"))
    assert not set(CAP_VARS) & set(plain)


def test_guard_counts_an_earlier_attempt_and_whole_packages(tmp_path: Path) -> None:
    env = {"STARVERSE_BUDGET": "1", "STARVERSE_COST_PER_SECOND": "0.001"}
    first = BudgetGuard.from_env(env, run_dir=tmp_path, job_id="j-1", now=1000.0)
    assert first is not None and first.prior_seconds == 0
    assert first.check(1100.0, lookahead=0) is None  # 100 s = 0.10
    write_cost(tmp_path, first.cost(1600.0))  # the attempt died after 600 s
    again = BudgetGuard.from_env(env, run_dir=tmp_path, job_id="j-1", now=5000.0)
    assert again is not None and again.prior_seconds == 600
    assert again.check(5300.0, lookahead=0) is None  # 900 s = 0.90
    reason = again.check(5300.0, lookahead=100)  # 1000 s = 1.00: stop now
    assert reason is not None and reason.startswith(BUDGET_REASON_PREFIX)
    other = BudgetGuard.from_env(env, run_dir=tmp_path, job_id="j-2", now=0.0)
    assert other is not None and other.prior_seconds == 0

    info = json.dumps({"package_seconds": 86400, "nodes": 2, "units_per_node": 1})
    daily = BudgetGuard.from_env({**env, "STARVERSE_COST_INFO": info}, run_dir=None, job_id=None, now=0.0)
    assert daily is not None and daily.cost(1.0).amount == Decimal("86.40")  # a whole day is bought at once
    assert BudgetGuard.from_env({"STARVERSE_BUDGET": "x"}, run_dir=None, job_id=None, now=0.0) is None


@pytest.mark.slow
def test_a_job_with_the_cap_in_its_env_stops_itself_after_a_checkpoint(cost_settings: Settings) -> None:
    # The env a Kubernetes pod gets, passed to a local job with no spec.budget: the supervisor
    # only meters, the cap is the runtime's own. 2 ranks: the stop is agreed by both.
    budget, per_second = Decimal("2"), Decimal("0.1")  # the budget lasts 20 s of job time
    cap = {"STARVERSE_BUDGET": str(budget), "STARVERSE_COST_PER_SECOND": str(per_second), "OMP_NUM_THREADS": "1"}
    client = Starverse(cost_settings)
    spec = JobSpec(name="self-capped", code=SCRIPT, accelerator="cpu", procs_per_node=2, steps=100_000, env=cap)
    job = client.launch(spec)
    done = client.backend().wait(job.id, timeout=240)

    assert done.state is JobState.SUCCEEDED, done.reason
    record = read_cost(done.experiment_dir)
    assert record.reason is not None and record.reason.startswith(BUDGET_REASON_PREFIX)
    assert "in the job" in record.reason
    checkpoints = list_checkpoints(Path(done.experiment_dir))
    assert len(checkpoints) == 1  # only the stop checkpoints (checkpoint_every=0)
    logs = "".join(line.text + "\n" for line in client.backend().logs(job.id))
    assert f"stopping after step {checkpoints[0].step}: checkpoint saved ({BUDGET_REASON_PREFIX}" in logs


def test_kubernetes_job_shows_the_reason_its_pods_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The test API server runs the pods; rank 0's guard is built from the env the pod got.
    pytest.importorskip("kubernetes")
    import threading

    from jupyter_starverse.backends.kubernetes import KubernetesBackend
    from tests.k8s.apiserver import PodPlan, serve_kube

    with serve_kube(tmp_path) as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        release = threading.Event()
        kube.set_plan(lambda pod: PodPlan(lines=("training",), run_seconds=0.05, until=release))
        backend = KubernetesBackend(Settings.from_env())
        job = backend.submit(JobSpec(name="capped", code="pass", accelerator="cpu", budget="1"))
        plain = backend.submit(JobSpec(name="plain", code="pass", accelerator="cpu"))
        (k8s_job,) = [j for j in kube.objects("jobs") if j["metadata"]["name"] == job.id]
        (container,) = k8s_job["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        guard = BudgetGuard.from_env(env, run_dir=Path(env["STARVERSE_EXPERIMENT_DIR"]), job_id=job.id, now=0.0)
        assert guard is not None and guard.job_id == job.id
        reason = guard.check(3600.0 * 11, lookahead=0)  # 11 node-hours at 0.1 > the cap of 1
        assert reason is not None
        guard.record(3600.0 * 11, reason=reason)
        release.set()
        done = backend.wait(job.id, timeout=30)
        assert done.state is JobState.SUCCEEDED and done.reason == reason
        assert backend.wait(plain.id, timeout=30).reason is None
