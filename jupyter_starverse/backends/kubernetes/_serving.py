"""An endpoint as Kubernetes objects: a Deployment and a Service, built only here, by pure functions.

The pods run the project's OpenAI-compatible server (``transformers`` or ``onnxruntime``) or
vLLM's (``vllm``, GPUs), on port 8000, with readiness and liveness probes on ``/health`` (both
servers answer it without a token). The store is mounted read-only (the claim and the mount);
GPU endpoints request the pool's GPU resource with its selector and tolerations; every pod meets
Pod Security ``restricted`` (the same security contexts as training pods). The bearer token
comes from a Secret by reference (``secretKeyRef``): a manifest never holds its value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_starverse.backends._serving import TOKEN_ENV, serve_argv
from jupyter_starverse.jobmodel import EndpointSpec

from ._checks import BOOT
from ._inputs import LABEL_MANAGED, MANAGER, ClusterConfig
from ._manifests import make_affinity, make_container_security, make_pod_security

if TYPE_CHECKING:
    from jupyter_starverse.kube import NodePool

__all__ = ["LABEL_ENDPOINT", "VLLM_IMAGE", "make_endpoint_manifests"]

LABEL_ENDPOINT = "starverse.io/endpoint"
#: vLLM's OpenAI server image, pinned (the GPU engine; it reads its key from VLLM_API_KEY).
VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"


def _labels(spec: EndpointSpec) -> dict[str, str]:
    return {LABEL_MANAGED: MANAGER, LABEL_ENDPOINT: spec.name}


def make_endpoint_manifests(spec: EndpointSpec, cluster: ClusterConfig, pool: NodePool) -> list[Any]:
    """``[Deployment, Service]`` of ``spec`` (``kubernetes.client`` models)."""
    from kubernetes import client as c

    cpu, memory = pool.requests(spec.gpus if spec.is_gpu else 1)
    cpu, memory = spec.cpu or cpu, spec.memory or memory
    requests = {"cpu": cpu, "memory": memory}
    limits = dict(requests)
    if spec.is_gpu:
        limits[pool.resource or "nvidia.com/gpu"] = str(spec.gpus)
    image = spec.image or (VLLM_IMAGE if spec.engine == "vllm" else None)
    image = image or pool.image or (cluster.image if spec.is_gpu else (cluster.cpu_image or cluster.image))
    secret, _, key = spec.token_secret.partition("/")
    token = c.V1EnvVarSource(secret_key_ref=c.V1SecretKeySelector(name=secret, key=key))
    env = [
        c.V1EnvVar(name="VLLM_API_KEY" if spec.engine == "vllm" else TOKEN_ENV, value_from=token),
        c.V1EnvVar(name="HF_HUB_OFFLINE", value="1"),
        c.V1EnvVar(name="OMP_NUM_THREADS", value=str(cpu).rstrip("m") if str(cpu).isdigit() else "1"),
    ]
    volumes = [c.V1Volume(name="dshm", empty_dir=c.V1EmptyDirVolumeSource(medium="Memory", size_limit="1Gi"))]
    mounts = [c.V1VolumeMount(name="dshm", mount_path="/dev/shm")]  # noqa: S108 - shared memory, not a temp file
    if cluster.store_path:
        claim = c.V1PersistentVolumeClaimVolumeSource(claim_name=cluster.store_claim, read_only=True)
        volumes.append(c.V1Volume(name="store", persistent_volume_claim=claim))
        mounts.append(c.V1VolumeMount(name="store", mount_path=cluster.store_path, read_only=True))
    probe = c.V1HTTPGetAction(path="/health", port="http")
    container = c.V1Container(
        name="server",
        image=image,
        command=serve_argv(spec, cluster.python, head=[cluster.python, "-c", BOOT, "jupyter_starverse"]),
        env=env,
        ports=[c.V1ContainerPort(container_port=spec.port, name="http")],
        resources=c.V1ResourceRequirements(requests=requests, limits=limits),
        volume_mounts=mounts,
        readiness_probe=c.V1Probe(http_get=probe, period_seconds=5, failure_threshold=3),
        liveness_probe=c.V1Probe(http_get=probe, period_seconds=20, failure_threshold=3, timeout_seconds=5),
        startup_probe=c.V1Probe(http_get=probe, period_seconds=5, failure_threshold=120),  # a big model loads slowly
        security_context=make_container_security(cluster),
    )
    pod = c.V1PodSpec(
        containers=[container],
        volumes=volumes,
        security_context=make_pod_security(cluster),
        automount_service_account_token=False,
        node_selector=dict(pool.node_selector) or None,
        tolerations=[
            c.V1Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect) for t in pool.tolerations
        ]
        or None,
        affinity=make_affinity(pool.node_affinity or (cluster.node_affinity if spec.is_gpu else ())),
        image_pull_secrets=[c.V1LocalObjectReference(name=n) for n in cluster.image_pull_secrets] or None,
    )
    labels = _labels(spec)
    annotations = {"starverse.io/model": spec.model, "starverse.io/engine": spec.engine}
    meta = c.V1ObjectMeta(name=spec.name, namespace=cluster.namespace, labels=labels, annotations=annotations)
    deployment = c.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=meta,
        spec=c.V1DeploymentSpec(
            replicas=spec.replicas,
            selector=c.V1LabelSelector(match_labels=labels),
            template=c.V1PodTemplateSpec(metadata=c.V1ObjectMeta(labels=labels, annotations=annotations), spec=pod),
        ),
    )
    service = c.V1Service(
        api_version="v1",
        kind="Service",
        metadata=c.V1ObjectMeta(name=spec.name, namespace=cluster.namespace, labels=labels),
        spec=c.V1ServiceSpec(selector=labels, ports=[c.V1ServicePort(name="http", port=spec.port, target_port="http")]),
    )
    return [deployment, service]
