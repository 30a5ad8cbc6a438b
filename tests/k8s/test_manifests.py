"""Manifests: literal wire form for a small case, mode translation, and validation of every
rendered kind and size against the real Kubernetes schemas (strict) and the CRD schemas."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

from jupyter_starverse._settings import DEFAULT_IMAGE  # noqa: E402
from jupyter_starverse.backends.kubernetes._checks import BOOT  # noqa: E402
from jupyter_starverse.backends.kubernetes._manifests import (  # noqa: E402
    ClusterConfig,
    KubeLaunch,
    make_job,
    make_manifests,
    make_mode,
    make_service,
    pool_for,
    to_dict,
)
from jupyter_starverse.jobmodel import JobSpec  # noqa: E402
from jupyter_starverse.kube._pools import default_pools  # noqa: E402

SCHEMAS = Path(__file__).parent / "schemas"
K8S_VERSION = "1.32.0"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
POOLS = default_pools()


def _launch(nodes: int = 1, accelerator: str = "cpu", ppn: int = 1, **spec: Any) -> KubeLaunch:
    js = JobSpec(name="demo", script="/exp/train.py", nodes=nodes, procs_per_node=ppn, accelerator=accelerator, **spec)
    return KubeLaunch(
        job_id="demo-1",
        spec=js,
        run_dir="/exp/demo/runs/demo-1",
        pool=pool_for(js, POOLS),
        cpu_pool=POOLS.get("cpu"),
        script="/exp/train.py",
        hf_cache="/store/hub",
        user="ann",
    )


def _cluster(kind: str = "job", **kw: Any) -> ClusterConfig:
    return ClusterConfig(namespace="team", store="/store", experiments="/exp", kind=kind, **kw)


def test_service_wire_form_is_exactly_this() -> None:
    assert to_dict(make_service(_launch(), _cluster())) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "demo-1",
            "namespace": "team",
            "labels": {
                "app.kubernetes.io/managed-by": "jupyter-starverse",
                "starverse.io/job-id": "demo-1",
                "starverse.io/experiment": "demo",
                "starverse.io/role": "service",
            },
        },
        "spec": {
            "clusterIP": "None",
            "selector": {"starverse.io/job-id": "demo-1", "starverse.io/role": "node"},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": 29500, "targetPort": 29500}],
        },
    }


def test_indexed_job_wire_form_for_one_cpu_node() -> None:
    job = to_dict(make_job(_launch(), _cluster()))
    pod = job["spec"].pop("template")
    assert job["spec"] == {
        "completionMode": "Indexed",
        "completions": 1,
        "parallelism": 1,
        "backoffLimitPerIndex": 0,  # JobSpec.max_restarts: failures of the script
        "maxFailedIndexes": 0,
        "podFailurePolicy": {  # preemptions recreate the pod without counting; a usage error ends it
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "Ignore", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]}},
                {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2]}},
                # a node preempted past the budget: the pod command's refusal ends the job
                {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [86]}},
            ]
        },
        "ttlSecondsAfterFinished": 604800,
    }
    (container,) = pod["spec"].pop("containers")
    assert pod["spec"] == {
        "restartPolicy": "Never",
        "subdomain": "demo-1",
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "store", "persistentVolumeClaim": {"claimName": "starverse-store"}},
            {"name": "experiments", "persistentVolumeClaim": {"claimName": "starverse-experiments"}},
        ],
        "nodeSelector": {"starverse.io/pool": "cpu"},
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 60,
    }
    env_list = container.pop("env")
    env = {e["name"]: e.get("value") for e in env_list}
    assert container == {
        "name": "trainer",
        "image": DEFAULT_IMAGE,
        "command": [
            "python",
            "-c",
            BOOT,
            "torch,jupyter_starverse",
            "torch.distributed.run",
            "--nnodes=1",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",  # elastic: a recreated pod joins the next rendezvous round
            "--rdzv-endpoint=demo-1-0.demo-1:29500",
            "--rdzv-id=demo-1",
            "--max-restarts=3",  # max_restarts + the preemption budget
            "-m",
            "jupyter_starverse.backends._worker",
            "/exp/train.py",
        ],
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "1", "memory": "4Gi"}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "store", "mountPath": "/store", "readOnly": True},
            {"name": "experiments", "mountPath": "/exp"},
        ],
        "ports": [{"containerPort": 29500, "name": "rendezvous"}],
        "workingDir": "/exp/demo/runs/demo-1",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    assert env["STARVERSE_DIST_BACKEND"] == "gloo" and env["STARVERSE_DEVICE"] == "cpu"
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == "/store/hub"
    assert env["STARVERSE_EXPERIMENT_DIR"] == "/exp/demo/runs/demo-1"
    # a SIGTERM ends the attempt with 143 after the checkpoint, before the pod's grace period ends
    assert (env["STARVERSE_PREEMPT_EXIT"], env["STARVERSE_STOP_GRACE"], env["STARVERSE_ATTEMPT"]) == ("143", "60", "0")
    assert env["STARVERSE_PREEMPT_RESTARTS"] == "3" and env["STARVERSE_NODE_PREEMPTIONS"] is None  # a fieldRef:
    (seen,) = [e for e in env_list if e["name"] == "STARVERSE_NODE_PREEMPTIONS"]
    path = "metadata.annotations['batch.kubernetes.io/job-index-ignored-failure-count']"
    assert seen["valueFrom"] == {"fieldRef": {"fieldPath": path}}


def test_one_spec_two_translations() -> None:
    cpu = make_mode(_launch(2, "cpu", 4), _cluster(cpu_image="starverse/cpu:1"))
    gpu = make_mode(_launch(2, "a100-80g", 8, cpu="32", memory="256Gi"), _cluster(cpu_image="starverse/cpu:1"))
    assert (cpu.dist_backend, cpu.device, cpu.image) == ("gloo", "cpu", "starverse/cpu:1")
    assert to_dict(cpu.resources) == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "4", "memory": "16Gi"},
    }
    assert cpu.tolerations == () and cpu.shm_size == "4Gi"
    assert cpu.node_selector == {"starverse.io/pool": "cpu"}
    assert (gpu.dist_backend, gpu.device, gpu.image) == ("nccl", "cuda", DEFAULT_IMAGE)
    assert to_dict(gpu.resources) == {
        "requests": {"cpu": "32", "memory": "256Gi"},
        "limits": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
    }
    assert gpu.shm_size == "64Gi"
    assert gpu.node_selector == {"starverse.io/pool": "a100-80g"}
    assert [to_dict(t) for t in gpu.tolerations] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_secrets_by_reference_and_kueue_label() -> None:
    launch = _launch(secrets={"HF_TOKEN": "hf-secret/token"})
    job = to_dict(make_job(launch, _cluster(kueue_queue="team-queue")))
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "token"}}} in env
    assert not any("token" in str(e.get("value", "")) for e in env)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"


def test_unknown_gpu_type_is_bad_input() -> None:
    from jupyter_starverse.errors import BadInputError

    with pytest.raises(BadInputError, match="no node pool for 'tpu-v5'"):
        pool_for(JobSpec(name="x", script="t.py", accelerator="tpu-v5"), POOLS)


# -- validation of every kind and size -------------------------------------------------
@functools.cache
def _crd_validator(filename: str) -> Any:
    """A validator for the stored version's openAPIV3Schema (x-kubernetes-* keys are ignored)."""
    crd = yaml.load((SCHEMAS / filename).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema = version["schema"]["openAPIV3Schema"]
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate_pod_template(template: dict[str, Any]) -> None:
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
        K8S_VERSION,
        strict=True,
    )


def _server_rules(obj: dict[str, Any]) -> None:
    """What the API server checks beyond the schema: names, label values, enums."""
    meta = obj["metadata"]
    assert DNS1123_LABEL.match(meta["name"]) and len(meta["name"]) <= 63
    for value in meta.get("labels", {}).values():
        assert len(value) <= 63 and re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", value)
    replicas = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    for rs in replicas.values():  # the operator's replica policy (ExitCode: retry 128+ exits), not a pod's
        assert rs["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
    text = yaml.safe_dump({**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "pytorchReplicaSpecs"}})
    text += "".join(yaml.safe_dump(rs["template"]) for rs in replicas.values())
    for enum in re.findall(r"restartPolicy: (\w+)", text):
        assert enum in ("Never", "OnFailure")
    for enum in re.findall(r"completionMode: (\w+)", text):
        assert enum in ("Indexed", "NonIndexed")


@pytest.mark.parametrize("kind", ["job", "jobset", "trainjob", "pytorchjob"])
@pytest.mark.parametrize("accelerator", ["cpu", "a100-80g"])
@pytest.mark.parametrize("nodes", [1, 2, 16, 128, 512])
def test_every_rendered_manifest_validates(kind: str, accelerator: str, nodes: int) -> None:
    launch = _launch(
        nodes,
        accelerator,
        1 if accelerator == "cpu" else 8,
        mounts=("tiny-ds",),
        secrets={"WANDB_API_KEY": "wandb/key"},
    )
    launch = KubeLaunch(**{**launch.__dict__, "warmup": ("tiny-ds",)})
    objects = [to_dict(o) for o in make_manifests(launch, _cluster(kind, kueue_queue="q"))]
    _validate_objects(objects, nodes)


def _validate_objects(objects: list[dict[str, Any]], nodes: int) -> None:
    """Server rules, then the strict core schemas or the CRD schemas, of rendered objects."""
    assert len(objects) <= 3  # constant in the number of nodes
    for obj in objects:
        _server_rules(obj)
        if obj["kind"] in ("Job", "Service"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        elif obj["kind"] in ("JobSet", "TrainingRuntime"):
            if obj["kind"] == "JobSet":
                _crd_validator("jobset.x-k8s.io_jobsets.yaml").validate(obj)
                jobset = obj["spec"]
            else:  # the JobSet template is the JobSet's spec, as the Trainer controller creates it
                _crd_validator("trainer.kubeflow.org_trainingruntimes.yaml").validate(obj)
                jobset = obj["spec"]["template"]["spec"]
                _crd_validator("jobset.x-k8s.io_jobsets.yaml").validate(
                    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "x"},
                     "spec": jobset}
                )  # fmt: skip
            for rj in jobset["replicatedJobs"]:
                kubernetes_validate.validate(
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {"name": "x"},
                        "spec": rj["template"]["spec"],
                    },
                    K8S_VERSION,
                    strict=True,
                )
        elif obj["kind"] == "TrainJob":
            _crd_validator("trainer.kubeflow.org_trainjobs.yaml").validate(obj)
            assert obj["spec"]["trainer"]["numNodes"] == nodes
            assert obj["spec"]["runtimeRef"] == {
                "name": obj["metadata"]["name"], "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"
            }  # fmt: skip
        else:  # PyTorchJob: no CRD schema is kept; its pod templates are core PodTemplates
            replicas = obj["spec"]["pytorchReplicaSpecs"]
            assert replicas["Master"]["replicas"] == 1 and replicas.get("Worker", {}).get("replicas", 0) == nodes - 1
            for rs in replicas.values():
                _validate_pod_template(rs["template"])
                assert rs["template"]["spec"]["containers"][0]["name"] == "pytorch"


def test_strict_validation_catches_a_misspelt_field() -> None:
    job = to_dict(make_job(_launch(), _cluster()))
    job["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def test_crd_schema_rejects_a_wrong_shape() -> None:
    (js,) = [to_dict(o) for o in make_manifests(_launch(2), _cluster("jobset"))]
    js["spec"]["replicatedJobs"][0]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        _crd_validator("jobset.x-k8s.io_jobsets.yaml").validate(js)


def test_jobset_runs_warmup_before_nodes() -> None:
    launch = KubeLaunch(**{**_launch(4).__dict__, "warmup": ("tiny-ds",)})
    (js,) = [to_dict(o) for o in make_manifests(launch, _cluster("jobset"))]
    warm, node = js["spec"]["replicatedJobs"]
    assert warm["name"] == "warmup" and node["dependsOn"] == [{"name": "warmup", "status": "Complete"}]
    cmd = warm["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[-3:] == ["store", "pull", "tiny-ds"]
    assert (
        "--rdzv-endpoint=demo-1-node-0-0.demo-1:29500"
        in node["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    )


def test_user_arguments_cannot_expand_pod_variables() -> None:
    launch = _launch(args=("--tag", "$(HF_TOKEN)", "$$(x)"))
    command = to_dict(make_job(launch, _cluster()))["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-3:] == ["--tag", "$$(HF_TOKEN)", "$$$(x)"]
    assert "--rdzv-id=demo-1" in command


def test_kueue_label_only_on_workloads() -> None:
    launch = KubeLaunch(**{**_launch(2).__dict__, "warmup": ("tiny-ds",)})
    job, svc, warm = [to_dict(o) for o in make_manifests(launch, _cluster(kueue_queue="q"))]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert warm["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert "kueue.x-k8s.io/queue-name" not in svc["metadata"]["labels"]
    assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]


def test_shipped_rbac_manifest_is_valid_and_covers_what_the_backend_calls() -> None:
    from jupyter_starverse.backends.kubernetes import RBAC_MANIFEST

    role, binding = yaml.safe_load_all(RBAC_MANIFEST.read_text())
    for doc in (role, binding):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    allowed = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    needed = [("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")]
    needed += [("", "services", "create"), ("", "pods", "list"), ("", "pods", "watch"), ("", "pods/log", "get")]
    assert [n for n in needed if n not in allowed] == []
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_trainjob_comes_with_its_own_runtime_carrying_the_restart_rules() -> None:
    """Kubeflow Trainer finds the trainer in the replicated job labelled ``trainjob-ancestor-step:
    trainer`` and its container ``node``; the failure policy is the JobSet's and each child Job's."""
    runtime, trainjob = [to_dict(o) for o in make_manifests(_launch(4, "a100-80g", 8), _cluster("trainjob"))]
    assert [runtime["kind"], trainjob["kind"]] == ["TrainingRuntime", "TrainJob"]  # the runtime exists first
    assert runtime["metadata"]["name"] == trainjob["spec"]["runtimeRef"]["name"] == "demo-1"
    assert "kueue.x-k8s.io/queue-name" not in runtime["metadata"]["labels"]
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 4, "torch": {}}
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == {"maxRestarts": 3, "restartStrategy": "Recreate"}
    (node,) = jobset["replicatedJobs"]
    assert node["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    job = node["template"]["spec"]
    assert job["backoffLimitPerIndex"] == 0 and job["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    (container,) = job["template"]["spec"]["containers"]
    assert container["name"] == "node" and "--rdzv-endpoint=demo-1-node-0-0.demo-1:29500" in container["command"]
    assert {r["onExitCodes"]["containerName"] for r in job["podFailurePolicy"]["rules"][1:]} == {"node"}
    assert trainjob["spec"]["trainer"]["numProcPerNode"] == 8
    assert trainjob["spec"]["trainer"]["resourcesPerNode"] == container["resources"]
