"""Pod options (settings and pool table) render where expected; image checks; warm-up sources;
the runtime guard of every command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_starverse._settings import DEFAULT_IMAGE, Settings
from jupyter_starverse.backends.kubernetes import KubernetesBackend
from jupyter_starverse.backends.kubernetes._checks import (
    BOOT,
    check_image,
    check_warmup_source,
    image_is_known_bad,
)
from jupyter_starverse.backends.kubernetes._manifests import (
    KubeLaunch,
    make_job,
    make_manifests,
    make_mode,
    pool_for,
    to_dict,
)
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.kube import PoolTable
from tests.k8s.test_manifests import _cluster

POOLS = {
    "cpu": {"node_selector": {"pool": "cpu"}, "image": "reg.example.com/starverse-cpu:0.1.0", "max_memory": "8Gi"},
    "a100-80g": {
        "node_selector": {"pool": "a100"},
        "image": "reg.example.com/starverse-torch:0.1.0-cu124",
        "cpu_per_proc": "12",
        "memory_per_proc": "100Gi",
        "max_cpu": "90",
        "max_memory": "900Gi",
        "shm_size": "128Gi",
        "image_pull_secrets": ["pool-cred"],
        "service_account": "gpu-trainer",
        "priority_class": "gpu-high",
        "annotations": {"example.com/pool": "a100"},
        "extra_resources": {"rdma/hca": "1"},
        "node_affinity": [
            {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            {"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB", "example.com/nic": {"operator": "Exists"}},
        ],
    },
}


def _launch(pools: PoolTable, accelerator: str = "a100-80g", nodes: int = 2, **spec: Any) -> KubeLaunch:
    js = JobSpec(name="demo", script="/exp/t.py", nodes=nodes, procs_per_node=8 if accelerator != "cpu" else 2,
                 accelerator=accelerator, **spec)  # fmt: skip
    return KubeLaunch("demo-1", js, "/exp/demo/runs/demo-1", pool_for(js, pools), pools.get("cpu"), "/exp/t.py",
                      warmup=("tiny",))  # fmt: skip


def test_pool_table_options_render_on_the_gpu_pods() -> None:
    pools = PoolTable.parse(POOLS, source="test")
    job, _svc, warm = [to_dict(o) for o in make_manifests(_launch(pools), _cluster(image_pull_secrets=("ws-cred",)))]
    pod = job["spec"]["template"]
    spec, (c,) = pod["spec"], pod["spec"]["containers"]
    assert c["image"] == "reg.example.com/starverse-torch:0.1.0-cu124"
    # 8 GPUs x 12 CPU = 96 capped at 90; 8 x 100Gi = 800Gi under the 900Gi cap
    assert c["resources"]["requests"] == {"cpu": "90", "memory": "800Gi"}
    assert c["resources"]["limits"] == {"cpu": "90", "memory": "800Gi", "nvidia.com/gpu": "8", "rdma/hca": "1"}
    assert spec["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}}
    assert spec["imagePullSecrets"] == [{"name": "ws-cred"}, {"name": "pool-cred"}]
    assert spec["serviceAccountName"] == "gpu-trainer" and spec["priorityClassName"] == "gpu-high"
    assert spec["automountServiceAccountToken"] is False
    assert pod["metadata"]["annotations"] == {"example.com/pool": "a100"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}
            ]
        },
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-PCIE-80GB"]},
                {"key": "example.com/nic", "operator": "Exists"},
            ]
        },
    ]
    # the warm-up pod is on the CPU pool: its image, no GPU devices, no GPU affinity
    wspec = warm["spec"]["template"]["spec"]
    assert wspec["containers"][0]["image"] == "reg.example.com/starverse-cpu:0.1.0"
    assert "affinity" not in wspec and "rdma/hca" not in wspec["containers"][0]["resources"]["limits"]
    assert wspec["imagePullSecrets"] == [{"name": "ws-cred"}]


def test_workspace_defaults_render_when_the_pool_sets_nothing() -> None:
    from jupyter_starverse.kube._pools import default_pools

    cluster = _cluster(
        service_account="sa", priority_class="pc", annotations=(("a", "1"),), extra_resources=(("rdma/hca", "2"),),
        node_affinity=((("gpu", "In", ("sxm", "pcie")),),), automount_token=True, run_as_user=2000, run_as_group=3000,
        fs_group=None, supplemental_groups=(4000,), shm_size="2Gi",
    )  # fmt: skip
    pod = to_dict(make_job(_launch(default_pools()), cluster))["spec"]["template"]
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    assert spec["serviceAccountName"] == "sa" and spec["priorityClassName"] == "pc"
    assert spec["automountServiceAccountToken"] is True and pod["metadata"]["annotations"] == {"a": "1"}
    assert c["resources"]["limits"]["rdma/hca"] == "2"
    assert c["resources"]["requests"] == {"cpu": "80", "memory": "960Gi"}  # 8 x an A100 host share (10 + 120Gi)
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 2000, "runAsGroup": 3000, "supplementalGroups": [4000],
        "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    assert spec["volumes"][0]["emptyDir"]["sizeLimit"] == "2Gi"
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["sxm", "pcie"]}]}]
    }
    # CPU jobs get neither the GPU device resources nor the GPU affinity
    cpu = make_mode(_launch(default_pools(), "cpu"), cluster)
    assert cpu.affinity is None and "rdma/hca" not in cpu.resources.limits


def test_spec_sizes_win_and_shm_never_exceeds_memory() -> None:
    pools = PoolTable.parse(POOLS, source="test")
    mode = make_mode(_launch(pools, cpu="16", memory="64Gi"), _cluster())
    assert mode.resources.requests == {"cpu": "16", "memory": "64Gi"} and mode.shm_size == "64Gi"
    cpu = make_mode(_launch(pools, "cpu"), _cluster())
    assert cpu.resources.requests == {"cpu": "2", "memory": "8Gi"} and cpu.shm_size == "2Gi"


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({"node_selector": {"a": "b"}, "max_cpu": "lots"}, "not a Kubernetes quantity"),
        ({"node_selector": {"a": "b"}, "extra_resources": {"memory": "1"}}, "not an extended resource"),
        ({"node_selector": {"a": "b"}, "node_affinity": [{"k": {"operator": "Exists", "values": ["x"]}}]}, "no values"),
        ({"node_selector": {"a": "b"}, "imagee": "x:1"}, "unknown field"),
        ({"node_selector": {"a": "b"}, "image_pull_secrets": "cred"}, "list of secret names"),
    ],
)
def test_bad_pool_options_are_refused(raw: dict[str, Any], match: str) -> None:
    with pytest.raises(BadInputError, match=match):
        PoolTable.parse({"cpu": raw}, source="test")


def test_pool_options_round_trip_through_to_json() -> None:
    pools = PoolTable.parse(POOLS, source="test")
    again = PoolTable.parse({n: p.to_json() for n, p in pools.pools.items()}, source="again")
    assert again == pools


def test_settings_read_every_new_variable(tmp_path: Path) -> None:
    env = {
        "STARVERSE_HOME": str(tmp_path),
        "STARVERSE_POD_UID": "2000",
        "STARVERSE_POD_GID": "3000",
        "STARVERSE_POD_FS_GROUP": "none",
        "STARVERSE_AUTOMOUNT_TOKEN": "true",
        "STARVERSE_IMAGE_PULL_SECRETS": "a, b",
        "STARVERSE_SERVICE_ACCOUNT": "sa",
        "STARVERSE_PRIORITY_CLASS": "pc",
        "STARVERSE_POD_ANNOTATIONS": "x=1,y=2",
        "STARVERSE_EXTRA_RESOURCES": '{"rdma/hca": "1"}',
        "STARVERSE_NODE_AFFINITY": json.dumps([{"gpu": "sxm"}, {"gpu": "pcie"}]),
        "STARVERSE_SHM_SIZE": "16Gi",
    }
    s = Settings.from_env(env)
    assert (s.pod_uid, s.pod_gid, s.pod_fs_group, s.automount_token) == (2000, 3000, None, True)
    assert s.image_pull_secrets == ("a", "b") and s.pod_annotations == (("x", "1"), ("y", "2"))
    assert s.extra_resources == (("rdma/hca", "1"),) and s.shm_size == "16Gi"
    assert s.node_affinity == ((("gpu", "In", ("sxm",)),), (("gpu", "In", ("pcie",)),))
    assert Settings.from_env(s.to_env()) == s and hash(s)
    defaults = Settings.from_env({"STARVERSE_HOME": str(tmp_path)})
    assert (defaults.pod_uid, defaults.pod_fs_group, defaults.automount_token) == (1000, 1000, False)
    assert defaults.image == DEFAULT_IMAGE and not DEFAULT_IMAGE.endswith(":latest")
    cluster = KubernetesBackend(s.replace(namespace="team"))._cluster()
    assert (cluster.run_as_user, cluster.fs_group, cluster.service_account) == (2000, None, "sa")
    assert cluster.node_affinity == s.node_affinity and cluster.extra_resources == s.extra_resources


@pytest.mark.parametrize(
    ("name", "value"),
    [("STARVERSE_POD_UID", "0"), ("STARVERSE_POD_GID", "root"), ("STARVERSE_AUTOMOUNT_TOKEN", "maybe"),
     ("STARVERSE_EXTRA_RESOURCES", "rdma/hca"), ("STARVERSE_NODE_AFFINITY", "[{"), ("STARVERSE_SHM_SIZE", "big")],
)  # fmt: skip
def test_bad_new_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(BadInputError, match=name):
        Settings.from_env({name: value})


# -- images ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "image",
    ["pytorch/pytorch:latest", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "docker.io/pytorch/pytorch:2.4.0",
     "reg.example.com/starverse:latest", "reg.example.com/starverse", "localhost:5000/starverse"],
)  # fmt: skip
def test_known_bad_images_are_refused_with_the_fix(image: str) -> None:
    with pytest.raises(BadInputError) as err:
        check_image(image)
    assert "docs/image/Dockerfile" in (err.value.hint or "") and "STARVERSE_IMAGE" in (err.value.hint or "")


def test_good_images_pass() -> None:
    for image in (DEFAULT_IMAGE, "localhost:5000/starverse:0.1.0", "reg.example.com/s@sha256:" + "a" * 64):
        assert image_is_known_bad(image) is None
    assert image_is_known_bad("pytorch/pytorch:2.5.1", needs_package=False) is None  # a --command job


def test_launch_refuses_a_known_bad_image_before_anything(settings: Settings) -> None:
    backend = KubernetesBackend(settings.replace(namespace="team"))
    with pytest.raises(BadInputError, match="does not contain jupyter_starverse"):
        backend.render(JobSpec(name="demo", code="print(1)", image="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"))
    with pytest.raises(BadInputError, match="not pinned"):
        KubernetesBackend(settings.replace(namespace="team", image="pytorch/pytorch:latest")).render(
            JobSpec(name="demo", code="print(1)")
        )
    assert "kind: Job" in backend.render(JobSpec(name="demo", code="print(1)"))


def test_the_runtime_guard_fails_fast_with_the_fix() -> None:
    run = [sys.executable, "-c", BOOT, "json,no_such_module_xyz", "json.tool", "--help"]
    out = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no module no_such_module_xyz" in out.stderr
    assert "docs/image/Dockerfile" in out.stderr
    ok = subprocess.run([sys.executable, "-c", BOOT, "json", "json.tool", "--help"], capture_output=True, text=True,
                        timeout=60)  # fmt: skip
    assert ok.returncode == 0 and "usage:" in ok.stdout and "json.tool" in ok.stdout


def test_every_container_starts_through_the_guard() -> None:
    from jupyter_starverse.kube._pools import default_pools

    for kind in ("job", "jobset", "pytorchjob"):
        for obj in map(to_dict, make_manifests(_launch(default_pools()), _cluster(kind))):
            text = json.dumps(obj)
            assert '"-m", "torch.distributed.run"' not in text and '"-m", "jupyter_starverse.cli"' not in text
            assert text.count(json.dumps(BOOT)) >= 1 or obj["kind"] == "Service"


# -- warm-up ---------------------------------------------------------------------------
def test_warmup_refuses_a_workspace_path_source() -> None:
    with pytest.raises(BadInputError, match="path of this workspace") as err:
        check_warmup_source("tiny", "dataset", "/home/ann/data", store_path="/store")
    assert "starverse store pull tiny" in (err.value.hint or "")
    with pytest.raises(BadInputError):
        check_warmup_source("tiny", "dataset", "file:///home/ann/data", store_path="/store")
    with pytest.raises(BadInputError):
        check_warmup_source("tiny", "dataset", "memory://x", store_path="/store")
    for ok in ("s3://bucket/data", "https://example.com/d", "/store/incoming/d", "file:///store/incoming/d"):
        check_warmup_source("tiny", "dataset", ok, store_path="/store")
    check_warmup_source("m", "model", "/home/ann/model", store_path="/store")  # models come from the Hub


def test_launch_refuses_a_workspace_path_mount(settings: Settings, tmp_path: Path) -> None:
    from jupyter_starverse.catalog import Catalog

    data = tmp_path / "workspace-data"
    data.mkdir()
    (data / "a.txt").write_text("x")
    Catalog(settings).add_dataset("tiny", str(data))
    with pytest.raises(BadInputError, match="cannot read") as err:
        KubernetesBackend(settings.replace(namespace="team")).render(
            JobSpec(name="demo", code="print(1)", mounts=("tiny",))
        )
    assert "starverse store pull tiny" in (err.value.hint or "")


def test_only_the_warmup_container_mounts_the_store_read_write() -> None:
    from jupyter_starverse.kube._pools import default_pools

    for kind in ("job", "jobset", "pytorchjob", "trainjob"):
        for obj in map(to_dict, make_manifests(_launch(default_pools()), _cluster(kind))):
            from tests.k8s._psa import _containers, pods_of

            for _where, pod in pods_of(obj):
                role = pod["metadata"]["labels"]["starverse.io/role"]
                for _path, c in _containers(pod["spec"]):
                    for m in c.get("volumeMounts") or []:
                        if m["name"] == "store":
                            assert m.get("readOnly", False) is (role != "warmup"), (kind, c["name"])


def test_per_launch_pod_flags_render_into_the_manifests(settings: Settings) -> None:
    import yaml

    from jupyter_starverse.cli import parse
    from jupyter_starverse.client import Starverse

    args = parse(["launch", "--backend", "kubernetes", "--dry-run", "--gpu", "a100-80g", "--gpus-per-node", "8",
                  "--nodes", "2", "--pull-secret", "regcred", "--priority-class", "high", "--annotation", "team=nlp",
                  "--extra-resource", "rdma/hca=1", "--shm-size", "32Gi", "--service-account", "trainer"])
    preview = args.run(Starverse(settings), args)
    docs = [d for d in yaml.safe_load_all(preview.rendered) if d]
    [job] = [d for d in docs if d["kind"] == "Job"]
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"]["team"] == "nlp"
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert (spec["priorityClassName"], spec["serviceAccountName"]) == ("high", "trainer")
    [main] = [c for c in spec["containers"] if c["name"] != "store-wait"]
    assert main["resources"]["limits"]["rdma/hca"] == "1"
    assert {v["name"]: v for v in spec["volumes"]}["dshm"]["emptyDir"]["sizeLimit"] == "32Gi"
    with pytest.raises(BadInputError, match="STARVERSE_SHM_SIZE"):
        bad = parse(["launch", "--backend", "kubernetes", "--dry-run", "--shm-size", "lots"])
        bad.run(Starverse(settings), bad)


def test_gpu_pods_fit_the_typical_host_of_their_gpu_type() -> None:
    """An 8 x RTX 4090 pod fits a 64 vCPU / 256 GiB server (it asked 64 CPU / 512 GiB before);
    every default GPU pool's 8-GPU pod fits the smallest host of its table row."""
    from jupyter_starverse.kube import HOST_SHARE, parse_quantity
    from jupyter_starverse.kube._pools import default_pools

    smallest = {"rtx4090": (64, 256), "a100-40g": (96, 633), "a100-80g": (96, 1152), "h100-80g": (96, 1743),
                "l40s": (192, 1536)}  # fmt: skip  # vCPU, GiB
    pools = default_pools()
    for gpu, (vcpu, gib) in smallest.items():
        assert gpu in HOST_SHARE
        cpu, memory = pools.get(gpu).requests(8)
        assert parse_quantity(cpu) <= vcpu * 7 / 8 and parse_quantity(memory) <= gib * 2**30 * 7 / 8, gpu
    assert pools.get("rtx4090").requests(8) == ("48", "224Gi")
    table = {
        "cpu": {"node_selector": {"p": "cpu"}},
        "rtx4090": {"node_selector": {"p": "g"}, "resource": "nvidia.com/gpu", "cpu_per_proc": "12"},
    }
    custom = PoolTable.parse(table, source="t")
    assert custom.get("rtx4090").requests(8) == ("96", "224Gi")  # the pool's figure wins, the rest stays


def test_spot_billing_places_pods_on_the_pools_spot_nodes() -> None:
    """``--billing spot`` changes the manifest, not only the price: the spot nodes' label and
    taint (the pool's ``spot`` entry, else ``starverse.io/capacity=spot``) and its priority class."""
    from jupyter_starverse.kube._pools import default_pools

    def pod(pools: PoolTable, billing: str) -> dict[str, Any]:
        return to_dict(make_job(_launch(pools, billing=billing), _cluster()))["spec"]["template"]["spec"]

    on_demand, spot = pod(default_pools(), "on_demand"), pod(default_pools(), "spot")
    assert "starverse.io/capacity" not in on_demand["nodeSelector"]
    assert spot["nodeSelector"] == {**on_demand["nodeSelector"], "starverse.io/capacity": "spot"}
    assert spot["tolerations"] == [
        *on_demand["tolerations"],
        {"key": "starverse.io/capacity", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
    ]
    table = {
        "cpu": {"node_selector": {"p": "cpu"}},
        "a100-80g": {
            "node_selector": {"p": "a100"},
            "priority_class": "training",
            "spot": {
                "node_selector": {"cloud.google.com/gke-spot": "true"},
                "tolerations": [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}],
                "priority_class": "spot-preemptible",
            },
        },
    }
    pools = PoolTable.parse(table, source="t")
    gke = pod(pools, "spot")
    assert gke["nodeSelector"] == {"p": "a100", "cloud.google.com/gke-spot": "true"}
    assert gke["priorityClassName"] == "spot-preemptible" and pod(pools, "daily")["priorityClassName"] == "training"
    assert pools.get("a100-80g").to_json()["spot"]["priority_class"] == "spot-preemptible"
