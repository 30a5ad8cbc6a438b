"""Every rendered manifest (every kind, 1 to 512 nodes, CPU and GPU) against the Pod Security
Standards ``restricted`` and ``baseline`` profiles (``_psa``), the operational rules a cluster
administrator asks for, and the strict schemas."""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("kubernetes_validate")

from jupyter_starverse.backends.kubernetes._manifests import KubeLaunch, make_manifests, to_dict
from tests.k8s import _psa
from tests.k8s.test_manifests import _cluster, _launch, _validate_objects

OPTIONS: dict[str, Any] = {
    "image_pull_secrets": ("regcred",),
    "service_account": "trainer",
    "priority_class": "research",
    "annotations": (("example.com/team", "nlp"),),
    "extra_resources": (("rdma/hca", "1"),),
    "node_affinity": (
        (("nvidia.com/gpu.product", "In", ("NVIDIA-A100-SXM4-80GB",)),),
        (("nvidia.com/gpu.product", "In", ("NVIDIA-A100-PCIE-80GB",)),),
    ),
}


def _objects(kind: str, accelerator: str, nodes: int, **cluster: Any) -> list[dict[str, Any]]:
    launch = _launch(
        nodes, accelerator, 1 if accelerator == "cpu" else 8, mounts=("tiny-ds",), secrets={"K": "wandb/key"}
    )
    launch = KubeLaunch(**{**launch.__dict__, "warmup": ("tiny-ds",)})
    return [to_dict(o) for o in make_manifests(launch, _cluster(kind, kueue_queue="q", **cluster))]


def _operational(obj: dict[str, Any]) -> list[str]:
    problems = []
    for where, pod in _psa.pods_of(obj):
        spec = pod["spec"]
        if spec.get("automountServiceAccountToken") is not False:  # a TrainJob's too: its runtime is ours
            problems.append(f"{where}: automountServiceAccountToken is not false")
        for path, c in _psa._containers(spec):
            requests = (c.get("resources") or {}).get("requests") or {}
            limits = (c.get("resources") or {}).get("limits") or {}
            if not {"cpu", "memory"} <= set(requests) or "memory" not in limits:
                problems.append(f"{where}.{path}: no cpu/memory requests or no memory limit")
            image = c.get("image", "")
            if image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]:
                problems.append(f"{where}.{path}: image {image!r} is not pinned")
            if image.startswith("pytorch/pytorch"):
                problems.append(f"{where}.{path}: image {image!r} lacks jupyter_starverse")
        for v in spec.get("volumes") or []:
            if v["name"] == "dshm" and not v["emptyDir"].get("sizeLimit"):
                problems.append(f"{where}: /dev/shm has no sizeLimit")
    return problems


@pytest.mark.parametrize("options", [False, True], ids=["defaults", "all-options"])
@pytest.mark.parametrize("kind", ["job", "jobset", "trainjob", "pytorchjob"])
@pytest.mark.parametrize("accelerator", ["cpu", "a100-80g"])
@pytest.mark.parametrize("nodes", [1, 2, 64, 512])
def test_every_manifest_is_restricted_compliant_and_valid(
    kind: str, accelerator: str, nodes: int, options: bool
) -> None:
    objects = _objects(kind, accelerator, nodes, **(OPTIONS if options else {}))
    pods = [(o["kind"], w, p) for o in objects for w, p in _psa.pods_of(o)]
    assert pods, "no pod template found"
    found = [str(v) for k, w, p in pods for v in _psa.violations(p, level="restricted", where=f"{k}.{w}")]
    found += [str(v) for k, w, p in pods for v in _psa.violations(p, level="baseline", where=f"{k}.{w}")]
    assert found == []
    assert [p for o in objects for p in _operational(o)] == []
    _validate_objects(objects, nodes)


# -- the checker finds what it must find ------------------------------------------------
BAD: list[tuple[str, str, Any]] = [
    ("HostProcess", "spec.securityContext.windowsOptions", {"hostProcess": True}),
    ("Host Namespaces", "spec.hostNetwork", True),
    ("Host Namespaces", "spec.hostPID", True),
    ("Host Namespaces", "spec.hostIPC", True),
    ("Privileged Containers", "c.privileged", True),
    ("Capabilities (baseline)", "c.capabilities", {"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
    ("HostPath Volumes", "spec.volumes+", {"name": "h", "hostPath": {"path": "/"}}),
    ("Host Ports", "container.ports", [{"containerPort": 80, "hostPort": 80}]),
    ("AppArmor", "c.appArmorProfile", {"type": "Unconfined"}),
    ("AppArmor", "annotation", "unconfined"),
    ("SELinux", "c.seLinuxOptions", {"type": "spc_t"}),
    ("SELinux", "c.seLinuxOptions", {"user": "root"}),
    ("/proc Mount Type", "c.procMount", "Unmasked"),
    ("Seccomp (baseline)", "c.seccompProfile", {"type": "Unconfined"}),
    ("Sysctls", "spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
    ("Volume Types", "spec.volumes+", {"name": "n", "nfs": {"server": "x", "path": "/"}}),
    ("Privilege Escalation", "c.allowPrivilegeEscalation", True),
    ("Running as Non-root", "both.runAsNonRoot", None),
    ("Running as Non-root user", "c.runAsUser", 0),
    ("Seccomp (restricted)", "both.seccompProfile", None),
    ("Capabilities (restricted)", "c.capabilities", {"drop": ["NET_RAW"]}),
    ("Capabilities (restricted)", "c.capabilities", {"drop": ["ALL"], "add": ["CHOWN"]}),
]


def _compliant_pod() -> dict[str, Any]:
    (job, _svc, _warm) = _objects("job", "a100-80g", 2)
    return copy.deepcopy(job["spec"]["template"])


@pytest.mark.parametrize(("control", "where", "value"), BAD, ids=[f"{c}:{w}" for c, w, _ in BAD])
def test_the_checker_catches_each_control(control: str, where: str, value: Any) -> None:
    pod = _compliant_pod()
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    if where == "container.ports":
        c["ports"] = value
    elif where.startswith("c."):
        c["securityContext"][where[2:]] = value
    elif where.startswith("both."):
        field = where[5:]
        spec["securityContext"].pop(field)
        for x in (*spec.get("initContainers", []), *spec["containers"]):
            x["securityContext"].pop(field, None)
    elif where == "spec.volumes+":
        spec["volumes"].append(value)
    elif where == "annotation":
        pod["metadata"].setdefault("annotations", {})["container.apparmor.security.beta.kubernetes.io/trainer"] = value
    elif where.startswith("spec.securityContext."):
        spec["securityContext"][where.rsplit(".", 1)[1]] = value
    else:
        spec[where.split(".", 1)[1]] = value
    found = {v.control for v in _psa.violations(pod)}
    assert control in found
    if control in _psa.BASELINE:
        assert control in {v.control for v in _psa.violations(pod, level="baseline")}


def test_net_bind_service_is_the_one_capability_restricted_allows() -> None:
    pod = _compliant_pod()
    pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    assert _psa.violations(pod) == []


def test_the_checker_reads_every_kind() -> None:
    for kind, expected in (("job", 2), ("jobset", 2), ("pytorchjob", 3), ("trainjob", 2)):
        objects = _objects(kind, "a100-80g", 2)
        assert sum(1 for o in objects for _ in _psa.pods_of(o)) == expected, kind
