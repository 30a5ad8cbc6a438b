"""One JobSpec, two translations; --smoke runs a CPU rehearsal locally before the real launch."""

from __future__ import annotations

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, ConflictError
from jupyter_starverse.jobmodel import JobSpec, JobState
from jupyter_starverse.modes import Mode, ModeService, make_smoke_spec, translate_spec
from tests.k8s.apiserver import KubeServer, kube_server

__all__ = ["kube_server"]

GPU = Mode("gpu", "a100-80g", 1)


def _spec(**changes: object) -> JobSpec:
    base: dict[str, object] = {"name": "llm", "script": "train.py", "nodes": 2, "procs_per_node": 4,
                               "env": {"LR": "3e-4"}, "steps": 1000, "image": "ghcr.io/acme/train:cuda"}
    base.update(changes)
    return JobSpec(**base)  # type: ignore[arg-type]


def test_cpu_translation_uses_gloo_cpu_and_the_cpu_image() -> None:
    out = translate_spec(_spec(accelerator="h100-80g"), Mode("cpu"), cpu_image="ghcr.io/acme/train:cpu")
    assert out.accelerator == "cpu" and not out.is_gpu
    assert out.image == "ghcr.io/acme/train:cpu"
    assert dict(out.env) == {"LR": "3e-4", "STARVERSE_MODE": "cpu", "STARVERSE_DIST_BACKEND": "gloo",
                             "STARVERSE_DEVICE": "cpu"}
    assert (out.nodes, out.procs_per_node, out.steps) == (2, 4, 1000)  # topology untouched
    assert translate_spec(_spec(), Mode("cpu")).image == "ghcr.io/acme/train:cuda"  # no variant configured


def test_gpu_translation_uses_nccl_and_the_mode_gpu() -> None:
    out = translate_spec(_spec(), GPU)
    assert out.accelerator == "a100-80g"
    assert out.env["STARVERSE_DIST_BACKEND"] == "nccl" and out.env["STARVERSE_DEVICE"] == "cuda"
    assert translate_spec(_spec(accelerator="h100-80g"), GPU).accelerator == "h100-80g"  # the spec's own type wins
    # translating twice is stable (no growth, no drift)
    assert translate_spec(out, GPU) == out
    assert translate_spec(translate_spec(out, Mode("cpu")), GPU).env == out.env


def test_smoke_spec_is_small_and_separate() -> None:
    spec = _spec(template="tp", tensor_parallel=2, budget="50", billing="spot", checkpoint_every=100,
                 resume=True, secrets={"HF_TOKEN": "hf/token"}, max_restarts=3)
    smoke = make_smoke_spec(spec, steps=3)
    assert (smoke.nodes, smoke.procs_per_node, smoke.world_size) == (1, 4, 4)  # tp=2 x two data-parallel ranks
    assert smoke.accelerator == "cpu" and smoke.env["STARVERSE_DIST_BACKEND"] == "gloo"
    assert smoke.env["STARVERSE_SMOKE"] == "1" and smoke.env["LR"] == "3e-4"
    assert (smoke.name, smoke.experiment) == ("llm-smoke", "llm-smoke")
    assert (smoke.steps, smoke.checkpoint_every, smoke.max_restarts) == (3, None, 0)
    assert (smoke.budget, smoke.billing, smoke.resume, dict(smoke.secrets)) == (None, "on_demand", False, {})
    assert make_smoke_spec(_spec(nodes=1, procs_per_node=1)).procs_per_node == 1
    assert len(make_smoke_spec(_spec(name="x" * 63)).name) == 63
    with pytest.raises(BadInputError, match="smoke steps"):
        make_smoke_spec(spec, steps=0)


def test_smoke_passes_then_the_gpu_job_is_submitted(
    settings: Settings, kube_server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kube_server.kubeconfig))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    client = Starverse(settings)
    client.modes.record(GPU)
    # what every front door does: a job that names no GPU type runs on the workspace mode's
    spec = JobSpec(name="tiny", code="import os\nprint('device', os.environ['STARVERSE_DEVICE'])\n", steps=50,
                   accelerator=client.default_accelerator())
    result = client.launch(spec, backend="kubernetes", smoke=True, smoke_steps=2, smoke_timeout=300)
    assert result.smoke.state is JobState.SUCCEEDED
    assert result.smoke.spec.accelerator == "cpu" and result.smoke.spec.steps == 2
    assert result.job.backend == "kubernetes" and result.job.spec.accelerator == "a100-80g"
    [job] = kube_server.objects("jobs")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["STARVERSE_DIST_BACKEND"] == "nccl"


def test_failing_smoke_stops_the_expensive_launch(
    settings: Settings, kube_server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kube_server.kubeconfig))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    client = Starverse(settings)
    client.modes.record(GPU)
    spec = JobSpec(name="broken", code="print('loading')\nraise SystemExit('shape mismatch in layer 3')\n",
                   accelerator=client.default_accelerator())
    with pytest.raises(ConflictError, match=r"smoke run .* failed") as err:
        client.launch(spec, backend="kubernetes", smoke=True, smoke_timeout=300)
    assert "the real job was not submitted" in str(err.value)
    assert "shape mismatch in layer 3" in str(err.value)  # the last log lines say why
    assert kube_server.objects("jobs") == []


def test_running_jobs_are_not_touched_by_a_workspace_switch(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from jupyter_starverse.backends.local._local import LocalBackend

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    backend = LocalBackend(settings)
    job = backend.submit(JobSpec(name="long", code="import time\ntime.sleep(60)\n"))
    try:
        for _ in range(300):
            before = backend.get(job.id)
            if before.state is JobState.RUNNING and before.nodes and all(n.pid for n in before.nodes):
                break
            time.sleep(0.1)
        assert before.state is JobState.RUNNING
        service = ModeService(settings)
        service.switch("cpu")
        service.switch("gpu", gpu_type="h100-80g")
        after = backend.get(job.id)
        assert after.state is JobState.RUNNING
        assert after.spec == before.spec and [n.pid for n in after.nodes] == [n.pid for n in before.nodes]
    finally:
        assert backend.cancel(job.id).state.finished
