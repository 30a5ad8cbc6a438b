"""A data step's job publishes into the store; every other job sees it read-only (``JobSpec.store_writes``).

The rendered objects pass the strict 1.32 schemas (as in test_manifests.py), and one data job goes
through ``client.data_job(backend="kubernetes")`` against the test API server.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse.backends.kubernetes._manifests import make_manifests, to_dict
from jupyter_starverse.client import Starverse
from jupyter_starverse.data._job import job_spec
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec
from tests.k8s.apiserver import KubeServer, PodPlan, serve_kube
from tests.k8s.test_manifests import _cluster, _launch, _validate_objects


def _pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        if obj["kind"] == "Job":
            out.append(obj["spec"]["template"]["spec"])
        elif obj["kind"] == "JobSet":
            out += [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]
    return out


def _store_mounts(pod: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(the trainer's store mounts' readOnly, the init containers')."""
    main = [m.get("readOnly") for c in pod["containers"] for m in c.get("volumeMounts") or [] if m["name"] == "store"]
    init = [m.get("readOnly") for c in pod.get("initContainers") or [] for m in c.get("volumeMounts") or []
            if m["name"] == "store"]  # fmt: skip
    return main, init


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_only_a_data_jobs_pods_get_the_store_writable(kind: str) -> None:
    data = job_spec("dedup", "raw@v1", to="raw@d", shards=(2, 1), backend="kubernetes")
    assert data.store_writes == ("reports", "raw@d")
    launch = _launch(2, mounts=("tiny",))  # a training job with a mount: its init container waits for it
    written = dataclasses.replace(launch, spec=data, script=None)
    for case, writes in ((launch, False), (written, True)):
        objects = [to_dict(o) for o in make_manifests(case, _cluster(kind))]
        _validate_objects(objects, 2)
        for pod in _pods(objects):
            main, init = _store_mounts(pod)
            assert main == ([None] if writes else [True])
            assert all(init)  # init containers read only, whoever the job is


def test_store_writes_is_narrow_and_round_trips() -> None:
    spec = job_spec("scan", "raw@v1", to=None, backend="local")
    assert spec.store_writes == ("reports",)  # scan publishes no version, only its report
    assert JobSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    cmd = ("python", "-m", "x")
    for bad, match in (
        ({"script": "t.py", "store_writes": ("raw@d",)}, "only a data step's command job"),
        ({"command": cmd, "store_writes": ("raw",)}, "is not NAME@VERSION"),
        ({"command": cmd, "store_writes": ("../x@y",)}, "is not NAME@VERSION"),
        ({"command": cmd, "store_writes": ("raw@v1",), "mounts": ("raw@v1",)}, "both mounted and written"),
        ({"command": cmd, "store_writes": ("raw@v1",), "mount_versions": {"raw": "raw@v1"}}, "never overwritten"),
    ):
        with pytest.raises(BadInputError, match=match) as e:
            JobSpec(name="j", **bad)  # type: ignore[arg-type]
        assert e.value.field == "store_writes" and e.value.hint
    with pytest.raises(BadInputError, match="list of strings"):
        JobSpec.from_json({"name": "j", "command": list(cmd), "store_writes": "raw@d"})


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    with serve_kube(tmp_path) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        server.set_plan(lambda pod: PodPlan(lines=("done",), run_seconds=0.05))
        yield server


def test_a_data_job_on_kubernetes_mounts_the_store_writable(kube: KubeServer, client: Starverse,
                                                             tmp_path: Path) -> None:  # fmt: skip
    src = Path(client.settings.store) / "incoming" / "raw"
    src.mkdir(parents=True)
    (src / "a.jsonl").write_text(json.dumps({"text": "one line of text"}) + "\n")
    client.catalog.add_dataset("raw", str(src), version="v1")
    job = client.data_job("clean", "raw@v1", shards=(2, 1), backend="kubernetes")
    assert job.backend == "kubernetes" and job.spec.store_writes == ("reports", "raw@v1-clean")
    (k8s_job,) = kube.objects("jobs")
    assert _store_mounts(k8s_job["spec"]["template"]["spec"])[0] == [None]
    # an ordinary training job of the same client keeps the store read-only
    client.launch(JobSpec(name="train", code="print(1)"), backend="kubernetes")
    train = next(j for j in kube.objects("jobs") if j["metadata"]["name"] != k8s_job["metadata"]["name"])
    assert _store_mounts(train["spec"]["template"]["spec"])[0] == [True]
