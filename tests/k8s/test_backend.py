"""KubernetesBackend end to end: the official client over real HTTP against the test API server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends import make_backend
from jupyter_starverse.backends.kubernetes import KubernetesBackend
from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
)
from jupyter_starverse.jobmodel import JobSpec, JobState
from jupyter_starverse.kube._config import resolve_namespace
from tests.k8s.apiserver import KubeServer, Node, PodPlan, serve_kube, write_kubeconfig

TEE = ("[default0]:loss 1.0", "[default1]:loss 0.9", "agent: done")


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    with serve_kube(tmp_path, crds=("jobset",)) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        server.set_plan(lambda pod: PodPlan(lines=TEE, run_seconds=0.05))
        yield server


def _spec(nodes: int = 2, **kw: object) -> JobSpec:
    return JobSpec(**{"name": "demo", "code": "print('hi')", "nodes": nodes, "procs_per_node": 2, **kw})  # type: ignore[arg-type]


def test_make_backend_builds_it(settings: Settings) -> None:
    assert isinstance(make_backend("kubernetes", settings), KubernetesBackend)


def test_life_cycle_submit_watch_logs_list(kube: KubeServer, settings: Settings) -> None:
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(3))
    assert job.backend == "kubernetes" and job.spec.nodes == 3
    (k8s_job,) = kube.objects("jobs")
    (svc,) = kube.objects("services")
    assert svc["metadata"]["ownerReferences"][0]["uid"] == k8s_job["metadata"]["uid"]
    assert k8s_job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "jupyter-starverse"
    states = [j.state for j in backend.watch_job(job.id, timeout=30)]
    assert states[-1] is JobState.SUCCEEDED
    done = backend.get(job.id)
    assert [n.index for n in done.nodes] == [0, 1, 2] and all(n.exit_code == 0 for n in done.nodes)
    lines = list(backend.logs(job.id))
    assert sorted(line.render() for line in lines if line.rank is not None) == [
        "[0] loss 1.0",
        "[1] loss 0.9",
        "[2] loss 1.0",
        "[3] loss 0.9",
        "[4] loss 1.0",
        "[5] loss 0.9",
    ]
    assert [line.rank for line in backend.logs(job.id, rank=3)] == [3]
    assert [j.id for j in backend.list()] == [job.id]
    run = Path(done.experiment_dir)
    assert (run / "train.py").read_text() == "print('hi')"
    copies = sorted(p.name.rsplit(".", 2)[1] for p in (run / "logs" / "pods").iterdir())
    assert copies == ["node0", "node1", "node2"]
    # the pods and the Job go away (TTL): the job and its logs are still there
    kube.store.delete(kube.resources["jobs"], "default", job.id, "Background", kube.resources)
    assert kube.objects("pods") == [] and kube.objects("services") == []
    gone = backend.get(job.id)
    assert gone.state is JobState.SUCCEEDED
    assert len([line for line in backend.logs(job.id) if line.rank is not None]) == 6


def test_follow_streams_while_running(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(lambda pod: PodPlan(lines=tuple(f"[default0]:step {i}" for i in range(30)), run_seconds=0.3))
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(2, procs_per_node=1))
    lines = list(backend.logs(job.id, follow=True))
    assert sorted(line.text for line in lines if line.rank == 1) == sorted(f"step {i}" for i in range(30))
    assert backend.wait(job.id, timeout=30).state is JobState.SUCCEEDED  # conditions follow the pods


def test_failure_is_reported_with_node_and_exit_code(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(lambda pod: PodPlan(exit_code=1 if "-1-" in pod["metadata"]["name"] else 0))
    backend = KubernetesBackend(settings)
    job = backend.wait(backend.submit(_spec(2)).id, timeout=30)
    assert job.state is JobState.FAILED
    assert job.reason is not None and "node 1" in job.reason and "exit code 1" in job.reason


def test_unschedulable_and_image_pull_are_surfaced(kube: KubeServer, settings: Settings) -> None:
    kube.set_nodes([Node("cpu-1", labels={"starverse.io/pool": "cpu"})])
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(1, accelerator="a100-80g"))
    stuck = next(j for j in backend.watch_job(job.id, timeout=10) if j.reason)
    assert stuck.state is JobState.PENDING and "Unschedulable" in (stuck.reason or "")
    assert stuck.nodes[0].reason is not None and stuck.nodes[0].reason.startswith("Unschedulable")
    first = next(iter(backend.logs(job.id, follow=True)))  # following says why nothing prints yet
    assert first.render().startswith("[node0] pending: Unschedulable: 0/1 nodes are available")
    kube.controllers.unpullable_images.add("ghcr.io/none/missing:1")
    job = backend.submit(_spec(1, image="ghcr.io/none/missing:1"))
    stuck = next(j for j in backend.watch_job(job.id, timeout=10) if j.reason)
    assert "ImagePullBackOff" in (stuck.reason or "")


def test_watch_reconnects_after_410(kube: KubeServer, settings: Settings) -> None:
    release = threading.Event()
    kube.set_plan(lambda pod: PodPlan(lines=("x",), until=release))
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(2))
    kube.expire_watches = 2  # the next two watches find their resourceVersion expired
    result: list[JobState] = []
    waiter = threading.Thread(target=lambda: result.append(backend.wait(job.id, timeout=60).state))
    waiter.start()
    deadline = time.monotonic() + 30
    while kube.expire_watches and time.monotonic() < deadline:
        time.sleep(0.02)
    release.set()
    waiter.join(60)
    assert result == [JobState.SUCCEEDED] and kube.expire_watches == 0
    relists = [c for c in kube.calls if c.path.endswith("/pods") and "watch=true" not in c.query]
    assert len(relists) >= 3  # the first list, then one per expiry


def test_cancel_deletes_in_foreground_and_is_idempotent(kube: KubeServer, settings: Settings) -> None:
    kube.set_plan(lambda pod: PodPlan(lines=("x",), run_seconds=60))
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(2))
    next(j for j in backend.watch_job(job.id, timeout=10) if j.state is JobState.RUNNING)
    cancelled = backend.cancel(job.id)
    assert cancelled.state is JobState.CANCELLED
    deletes = [c for c in kube.calls if c.method == "DELETE"]
    assert len(deletes) == 1
    assert kube.objects("jobs") == [] and kube.objects("pods") == [] and kube.objects("services") == []
    assert backend.cancel(job.id).state is JobState.CANCELLED
    assert backend.get(job.id).state is JobState.CANCELLED


def test_jobset_kind_end_to_end(kube: KubeServer, settings: Settings) -> None:
    backend = KubernetesBackend(settings, kind="jobset")
    job = backend.submit(_spec(2))
    assert [o["kind"] for o in kube.objects("jobsets")] == ["JobSet"]
    assert backend.wait(job.id, timeout=30).state is JobState.SUCCEEDED
    assert len([line for line in backend.logs(job.id) if line.rank is not None]) == 4


def test_dry_run_and_render_create_nothing(kube: KubeServer, settings: Settings) -> None:
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(16), dry_run=True)
    assert job.state is JobState.PENDING and job.reason == "dry run"
    import yaml

    docs = list(yaml.safe_load_all(backend.render(_spec(16), output="yaml")))
    assert [d["kind"] for d in docs] == ["Job", "Service"]
    assert json.loads(backend.render(_spec(2), output="json"))[0]["spec"]["completions"] == 2
    assert kube.count("POST") == 0 and not Path(job.experiment_dir).exists()


def test_warmup_job_for_mounts_not_yet_pulled(kube: KubeServer, settings: Settings, tmp_path: Path) -> None:
    from jupyter_starverse.catalog import Catalog

    data = Path(settings.store) / "incoming" / "data"  # a source the warm-up pod reaches: inside the store
    data.mkdir(parents=True)
    (data / "a.txt").write_text("hello")
    Catalog(settings).add_dataset("tiny", str(data))
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(2, mounts=("tiny",)))
    jobs = {j["metadata"]["name"]: j for j in kube.objects("jobs")}
    warm = jobs[f"{job.id}-warmup"]
    assert warm["metadata"]["ownerReferences"][0]["name"] == job.id
    assert warm["spec"]["template"]["spec"]["containers"][0]["command"][-3:] == ["store", "pull", "tiny"]
    init = jobs[job.id]["spec"]["template"]["spec"]["initContainers"][0]
    assert init["command"][-2:] == ["jupyter_starverse.backends.kubernetes._storewait", "tiny"]
    assert all(m["readOnly"] for m in init["volumeMounts"])  # only the warm-up pod writes the store


# -- bad input: clear errors, nothing half-created --------------------------------------
def _nothing_left(kube: KubeServer, settings: Settings) -> None:
    assert kube.objects("jobs") == [] and kube.objects("services") == []
    assert not list(Path(settings.experiments).glob("*/runs/*"))


def test_forbidden_by_rbac(kube: KubeServer, settings: Settings) -> None:
    kube.forbid("create", "jobs")
    with pytest.raises(PermissionDeniedError, match="forbidden to create job") as err:
        KubernetesBackend(settings).submit(_spec())
    assert "kubectl auth can-i" in (err.value.hint or "")
    _nothing_left(kube, settings)


def test_failure_after_the_first_object_deletes_it(kube: KubeServer, settings: Settings) -> None:
    kube.forbid("create", "services")
    with pytest.raises(PermissionDeniedError, match="service"):
        KubernetesBackend(settings).submit(_spec())
    _nothing_left(kube, settings)


def test_quota_exceeded(kube: KubeServer, settings: Settings) -> None:
    kube.quotas["jobs"] = 0
    with pytest.raises(ConflictError, match="quota exceeded") as err:
        KubernetesBackend(settings).submit(_spec())
    assert "kubectl describe resourcequota" in (err.value.hint or "")
    _nothing_left(kube, settings)


def test_namespace_that_does_not_exist(kube: KubeServer, settings: Settings) -> None:
    with pytest.raises(NotFoundError, match="namespace 'nope' does not exist") as err:
        KubernetesBackend(settings.replace(namespace="nope")).submit(_spec())
    assert "kubectl create namespace nope" in (err.value.hint or "")
    _nothing_left(kube, settings)


def test_missing_crd(kube: KubeServer, settings: Settings) -> None:
    with pytest.raises(BadInputError, match="no TrainJob CRD") as err:
        KubernetesBackend(settings, kind="trainjob").submit(_spec())
    assert "kubectl get crd trainjobs.trainer.kubeflow.org" in (err.value.hint or "")
    _nothing_left(kube, settings)


def test_unknown_gpu_type(kube: KubeServer, settings: Settings) -> None:
    with pytest.raises(BadInputError, match="no node pool for 'tpu-v5'"):
        KubernetesBackend(settings).submit(_spec(accelerator="tpu-v5"))
    assert kube.count() == 0


def test_unknown_job(kube: KubeServer, settings: Settings) -> None:
    with pytest.raises(NotFoundError, match="no Kubernetes job 'nope-1'"):
        KubernetesBackend(settings).get("nope-1")
    for bad in ("../x", "*", "a/b", "Job_1"):  # never a path or a glob under the experiments
        with pytest.raises(NotFoundError):
            KubernetesBackend(settings).cancel(bad)
    assert kube.count() == 1


def test_no_kubeconfig(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(BackendUnavailableError, match="no Kubernetes configuration") as err:
        KubernetesBackend(settings).list()
    assert "KUBECONFIG" in (err.value.hint or "")


def test_unreachable_api_server(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")))
    with pytest.raises(BackendUnavailableError, match="cannot reach the Kubernetes API server") as err:
        KubernetesBackend(settings).submit(_spec())
    assert "kubectl cluster-info" in (err.value.hint or "")
    assert not list(Path(settings.experiments).glob("*/runs/*"))


def test_namespace_resolution_order(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    sa = tmp_path / "sa-namespace"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert resolve_namespace(settings, sa_file=sa) == "default"
    sa.write_text("from-sa\n")
    assert resolve_namespace(settings, sa_file=sa) == "from-sa"
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", "http://x", namespace="from-context")))
    assert resolve_namespace(settings, sa_file=sa) == "from-context"
    assert resolve_namespace(settings.replace(namespace="explicit"), sa_file=sa) == "explicit"


def test_calls_run_off_the_caller_thread(kube: KubeServer, settings: Settings) -> None:
    """The API is synchronous; a front door runs it in a worker thread, as here."""
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(KubernetesBackend(settings).list()))
    t.start()
    t.join(30)
    assert out == [[]]


def test_rank_logs_written_by_workers_into_the_run_folder_are_merged(kube: KubeServer, settings: Settings) -> None:
    release = threading.Event()
    kube.set_plan(lambda pod: PodPlan(lines=("agent up",), until=release))
    backend = KubernetesBackend(settings)
    job = backend.submit(_spec(2, procs_per_node=1))
    logs = Path(job.experiment_dir) / "logs"
    for rank in (0, 1):  # what the workers write on the shared experiments volume
        (logs / f"rank{rank}.log").parent.mkdir(parents=True, exist_ok=True)
        (logs / f"rank{rank}.log").write_text(f"rank {rank} step 1\nrank {rank} step 2\n")
    got: list[str] = []
    follower = threading.Thread(target=lambda: got.extend(x.render() for x in backend.logs(job.id, follow=True)))
    follower.start()
    release.set()
    follower.join(60)
    assert sorted(got) == sorted(
        [
            "[node0] agent up",
            "[node1] agent up",
            "[0] rank 0 step 1",
            "[0] rank 0 step 2",
            "[1] rank 1 step 1",
            "[1] rank 1 step 2",
        ]
    )
    assert [x.text for x in backend.logs(job.id, rank=1)] == ["rank 1 step 1", "rank 1 step 2"]


def test_missing_kubernetes_package_gives_the_install_hint(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from jupyter_starverse.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if not installed
    with pytest.raises(MissingDependencyError) as err:
        KubernetesBackend(settings).render(_spec())
    assert err.value.hint == "pip install jupyter_starverse[kubernetes]"


def test_mixed_gpu_pools_from_the_shipped_table(kube: KubeServer, settings: Settings) -> None:
    """A 4090 job and an A100 job land on their own pools; the table is the shipped example."""
    from jupyter_starverse.backends.kubernetes import GPU_POOLS_EXAMPLE

    kube.set_nodes(
        [
            Node(
                "g4090",
                labels={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"},
                taints=(("nvidia.com/gpu", ""),),
                gpus=8,
            ),
            Node(
                "a100",
                labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                taints=(("nvidia.com/gpu", ""), ("pool", "a100")),
                gpus=8,
            ),
        ]
    )
    backend = KubernetesBackend(settings.replace(gpu_pools_file=GPU_POOLS_EXAMPLE))
    for gpu in ("rtx4090", "a100-80g"):
        job = backend.wait(backend.submit(_spec(2, accelerator=gpu, name=f"on-{gpu}", procs_per_node=8)).id, timeout=30)
        assert job.state is JobState.SUCCEEDED, job.reason
    too_big = backend.submit(_spec(1, accelerator="a100-80g", name="too-big", procs_per_node=16))
    stuck = next(j for j in backend.watch_job(too_big.id, timeout=10) if j.reason)
    assert "Unschedulable" in (stuck.reason or "")
