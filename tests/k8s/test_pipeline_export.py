"""A pipeline's Kubernetes export applies as it is: every object passes the strict schemas and the
restricted Pod Security profile, scripts reach the pods in ConfigMaps, and each step's pods wait
(an init container reading the API) for the Jobs before it; the wait itself against a tiny API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline
from jupyter_starverse.pipelines._kube import WAIT_CODE

from ._psa import violations

kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S_VERSION = "1.32.0"


def _pipeline() -> Pipeline:
    mask = {"email": "mask", "person": "placeholder"}
    return Pipeline.from_json({
        "version": 1, "name": "corpus", "backend": "kubernetes",
        "nodes": [
            {"id": "raw", "kind": "dataset", "params": {"ref": "raw@v1"}},
            {"id": "clean", "kind": "prep", "params": {"step": "clean", "options": {"actions": mask}}},
            {"id": "dedup", "kind": "prep", "params": {"step": "dedup", "shards": 2}},
            {"id": "first", "kind": "train", "params": {"script": "steps/first.py"}},
            {"id": "train", "kind": "train", "params": {"script": "steps/train.py", "nodes": 2}},
        ],
        "edges": [{"source": "raw", "target": "clean"}, {"source": "clean", "target": "dedup"},
                  {"source": "first", "target": "train"}],
    })  # fmt: skip


def test_the_yaml_export_applies_as_it_is(client: Starverse, tmp_path: Path) -> None:
    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.jsonl").write_text('{"text": "hello"}\n')
    client.catalog.add_dataset("raw", str(src), version="v1")
    client.catalog.pull("raw@v1")
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "first.py").write_text("print('first step')\n")
    (tmp_path / "steps" / "train.py").write_text("print('second step')\n")
    text = client.pipelines.export(_pipeline(), "yaml", base_dir=tmp_path).main.text
    objs = [o for o in yaml.safe_load_all(text) if o]
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    jobs = {o["metadata"]["labels"]["starverse.io/experiment"].removeprefix("corpus-"): o
            for o in objs if o["kind"] == "Job"}  # fmt: skip
    assert set(jobs) == {"clean", "dedup", "first", "train"}
    names = {node: job["metadata"]["name"] for node, job in jobs.items()}

    def pod(node: str) -> dict[str, Any]:
        return jobs[node]["spec"]["template"]

    for node in jobs:
        assert violations(pod(node)) == [], node
        assert pod(node)["spec"].get("automountServiceAccountToken") is False  # the trainer gets no token
    waits = {node: [c for c in pod(node)["spec"]["initContainers"] if c["name"] == "wait-for-steps"] for node in jobs}
    assert not waits["clean"] and not waits["first"]
    assert waits["dedup"][0]["command"][-1:] == [f"job/{names['clean']}"]  # dedup's pods start after clean completed
    assert waits["train"][0]["command"][-1:] == [f"job/{names['first']}"]
    (role,) = [o for o in objs if o["kind"] == "Role"]
    assert role["rules"] == [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"],
                              "resourceNames": sorted(names.values())}]  # fmt: skip
    (binding,) = [o for o in objs if o["kind"] == "RoleBinding"]
    assert pod("train")["spec"]["serviceAccountName"] == binding["subjects"][0]["name"]
    # the scripts reach the pods; nothing runs a runs/<id>/train.py that nobody writes
    maps = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
    assert maps[f"{names['train']}-script"] == {"train.py": "print('second step')\n"}
    assert maps[f"{names['first']}-script"] == {"first.py": "print('first step')\n"}
    for node, script in (("first", "first.py"), ("train", "train.py")):
        command = pod(node)["spec"]["containers"][0]["command"]
        assert f"/starverse/script/{script}" in command and not any(a.endswith("/train.py") and "runs/" in a
                                                                    for a in command)  # fmt: skip
    # a prep step runs the image's entry point and may write the store; a training step may not
    dedup = pod("dedup")["spec"]["containers"][0]
    assert dedup["command"][dedup["command"].index("-m", 10) :][:3] == ["-m", "jupyter_starverse.data._job", "dedup"]
    assert any(a.startswith("raw@clean-") for a in dedup["command"])  # reads the version clean writes
    assert not next(m for m in dedup["volumeMounts"] if m["name"] == "store").get("readOnly")
    assert next(m for m in pod("train")["spec"]["containers"][0]["volumeMounts"] if m["name"] == "store")["readOnly"]


class _Api(BaseHTTPRequestHandler):
    answers: dict[str, list[dict[str, Any] | None]] = {}
    seen: list[str] = []
    paths: list[str] = []

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[-1]
        self.seen.append(self.headers.get("Authorization", ""))
        self.paths.append(self.path)
        queue = self.answers[name]
        status = queue.pop(0) if len(queue) > 1 else queue[0]
        body = json.dumps({"kind": "Job", "status": status or {}}).encode()
        self.send_response(404 if status is None else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _cond(kind: str) -> dict[str, Any]:
    return {"conditions": [{"type": kind, "status": "True"}]}


def test_the_wait_container_waits_for_completion_and_fails_after_a_failure(api: str, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("secret-token\n")
    env = {**os.environ, "WAIT_API": api, "WAIT_TOKEN_DIR": str(tmp_path), "WAIT_POLL": "0.01"}

    def wait(*names: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", WAIT_CODE, "ns", *names], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    # a: not created yet, then running, then complete; b (a JobSet): complete at once
    _Api.answers = {"a": [None, {}, _cond("Complete")], "b": [_cond("Completed")]}
    done = wait("job/a", "jobset/b")
    assert done.returncode == 0, done.stderr
    assert "waiting for job/a (not created yet)" in done.stdout and "job/a, jobset/b complete" in done.stdout
    assert set(_Api.seen) == {"Bearer secret-token"}
    assert set(_Api.paths) == {
        "/apis/batch/v1/namespaces/ns/jobs/a",
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/b",
    }
    _Api.answers = {"a": [{}, _cond("Failed")], "b": [_cond("Completed")]}
    failed = wait("job/a", "jobset/b")
    assert failed.returncode == 1 and "job/a failed" in failed.stderr


def test_on_a_jobset_cluster_the_steps_wait_for_jobsets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_starverse._settings import Settings

    from .test_manifests import _crd_validator

    monkeypatch.setenv("STARVERSE_KUBE_KIND", "jobset")
    client = Starverse(Settings.from_env())
    (tmp_path / "steps").mkdir()
    for name in ("first.py", "train.py"):
        (tmp_path / "steps" / name).write_text("print('step')\n")
    doc = _pipeline().to_json()
    doc["nodes"] = [n for n in doc["nodes"] if n["kind"] == "train"]
    doc["edges"] = [e for e in doc["edges"] if e["source"] == "first"]
    objs = [o for o in yaml.safe_load_all(client.pipelines.export(Pipeline.from_json(doc), "yaml",
                                                                    base_dir=tmp_path).main.text) if o]  # fmt: skip
    sets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "JobSet"}
    assert len(sets) == 2
    for obj in objs:
        if obj["kind"] == "JobSet":
            _crd_validator("jobset.x-k8s.io_jobsets.yaml").validate(obj)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    (first,) = [n for n in sets if "first" in n]
    (train,) = [o for n, o in sets.items() if "first" not in n]
    pod = train["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert violations(pod) == []
    (wait,) = [c for c in pod["spec"]["initContainers"] if c["name"] == "wait-for-steps"]
    assert wait["command"][-1] == f"jobset/{first}"
    (role,) = [o for o in objs if o["kind"] == "Role"]
    assert role["rules"][0]["apiGroups"] == ["jobset.x-k8s.io"] and role["rules"][0]["resources"] == ["jobsets"]
