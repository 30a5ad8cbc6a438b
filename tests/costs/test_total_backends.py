"""``cost total`` counts every backend's spend: a Kubernetes job's run is metered and recorded too."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.kubernetes import KubernetesBackend
from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.client import Starverse
from jupyter_starverse.jobmodel import JobSpec, JobState
from tests.k8s.apiserver import PodPlan, serve_kube


def test_cost_total_includes_a_kubernetes_job(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_kube(tmp_path, crds=("jobset",)) as kube:
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        kube.set_plan(lambda pod: PodPlan(lines=("loss 1.0",), run_seconds=1.2))
        backend = KubernetesBackend(settings)
        spec = JobSpec(name="gpu-run", code="print('hi')", nodes=2, procs_per_node=8, accelerator="a100-80g")
        job = backend.submit(spec)
        assert [j.state for j in backend.watch_job(job.id, timeout=60)][-1] is JobState.SUCCEEDED
        run = Path(backend.get(job.id).experiment_dir)
        assert not (run / "cost.json").exists()  # nothing metered a cluster job before

        client = Starverse(settings)
        assert client.costs.total().records == ()  # the old total: only what the local supervisor wrote
        total = client.cost_total()
        (record,) = total.records
        assert record.cost.job_id == job.id and record.cost.user == settings.user
        assert record.cost.amount > Decimal(0)  # 2 nodes x 8 A100s for at least a started second
        assert (run / "cost.json").is_file()  # recorded: the next total needs no cluster

        assert cli_main(["cost", "total"]) == 0
        out = capsys.readouterr().out
        assert job.id in out and record.cost.figure in out
