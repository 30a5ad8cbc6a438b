"""Typed custom resources the official client has no models for: JobSet, TrainJob, PyTorchJob.

Each is a frozen dataclass holding ``kubernetes.client`` models for its embedded templates;
``to_dict()`` serialises it to the CRD's wire shape (camelCase, ``None`` dropped) with the
client's own ``sanitize_for_serialization``, so nothing untyped is passed around.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kubernetes.client import (
        V1Affinity,
        V1EnvVar,
        V1JobTemplateSpec,
        V1LocalObjectReference,
        V1ObjectMeta,
        V1PodSecurityContext,
        V1PodTemplateSpec,
        V1ResourceRequirements,
        V1SecurityContext,
        V1Toleration,
        V1Volume,
        V1VolumeMount,
    )

__all__ = [
    "CRD_INFO",
    "CrdInfo",
    "JobSet",
    "JobSetReplicatedJob",
    "PyTorchJob",
    "PyTorchReplicaSpec",
    "RuntimePatch",
    "TrainJob",
    "TrainJobTrainer",
    "serialize",
]


def serialize(obj: Any) -> Any:
    """The wire form of a ``kubernetes.client`` model (``sanitize_for_serialization``)."""
    return _api_client().sanitize_for_serialization(obj)


@functools.cache
def _api_client() -> Any:
    # Only used to serialise: it never opens a connection.
    from kubernetes.client import ApiClient

    return ApiClient()


@dataclass(frozen=True)
class CrdInfo:
    """Where a custom resource lives in the API."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


CRD_INFO = {
    "jobset": CrdInfo("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    "trainjob": CrdInfo("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    "pytorchjob": CrdInfo("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
}


def _drop_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


@dataclass(frozen=True)
class JobSetReplicatedJob:
    """``spec.replicatedJobs[]``: ``replicas`` copies of one Job template."""

    name: str
    template: V1JobTemplateSpec
    replicas: int = 1
    depends_on: tuple[tuple[str, str], ...] = ()  # (replicated job, "Ready" | "Complete")

    def to_dict(self) -> dict[str, Any]:
        return _drop_none(
            {
                "name": self.name,
                "replicas": self.replicas,
                "dependsOn": [{"name": n, "status": s} for n, s in self.depends_on] or None,
                "template": serialize(self.template),
            }
        )


@dataclass(frozen=True)
class JobSet:
    """``jobset.x-k8s.io/v1alpha2`` JobSet."""

    metadata: V1ObjectMeta
    replicated_jobs: tuple[JobSetReplicatedJob, ...]
    subdomain: str
    max_restarts: int = 0
    ttl_seconds_after_finished: int | None = None
    restart_strategy: str = "Recreate"  # every child Job is recreated on a restart (gang restart)
    info: ClassVar[CrdInfo] = CRD_INFO["jobset"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": self.info.api_version,
            "kind": self.info.kind,
            "metadata": serialize(self.metadata),
            "spec": _drop_none(
                {
                    "replicatedJobs": [r.to_dict() for r in self.replicated_jobs],
                    "network": {"enableDNSHostnames": True, "subdomain": self.subdomain},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": [self.replicated_jobs[-1].name]},
                    "failurePolicy": {"maxRestarts": self.max_restarts, "restartStrategy": self.restart_strategy},
                    "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
                }
            ),
        }


@dataclass(frozen=True)
class TrainJobTrainer:
    """``TrainJob.spec.trainer``: what every node runs and what it gets."""

    image: str
    command: tuple[str, ...]
    num_nodes: int
    num_proc_per_node: int
    env: tuple[V1EnvVar, ...] = ()
    resources: V1ResourceRequirements | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_none(
            {
                "image": self.image,
                "command": list(self.command),
                "numNodes": self.num_nodes,
                "numProcPerNode": self.num_proc_per_node,
                "env": [serialize(e) for e in self.env] or None,
                "resourcesPerNode": serialize(self.resources) if self.resources is not None else None,
            }
        )


@dataclass(frozen=True)
class RuntimePatch:
    """One ``TrainJob.spec.runtimePatches[]`` entry: pod-level changes to one replicated job."""

    manager: str
    replicated_job: str
    labels: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[V1Toleration, ...] = ()
    volumes: tuple[V1Volume, ...] = ()
    container: str = "node"
    volume_mounts: tuple[V1VolumeMount, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    affinity: V1Affinity | None = None
    security_context: V1PodSecurityContext | None = None
    container_security: V1SecurityContext | None = None
    service_account: str | None = None
    image_pull_secrets: tuple[V1LocalObjectReference, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        container = _drop_none(
            {
                "name": self.container,
                "volumeMounts": [serialize(m) for m in self.volume_mounts] or None,
                "securityContext": serialize(self.container_security) if self.container_security else None,
            }
        )
        pod_spec = _drop_none(
            {
                "nodeSelector": dict(self.node_selector) or None,
                "tolerations": [serialize(t) for t in self.tolerations] or None,
                "affinity": serialize(self.affinity) if self.affinity is not None else None,
                "securityContext": serialize(self.security_context) if self.security_context is not None else None,
                "serviceAccountName": self.service_account,
                "imagePullSecrets": [serialize(r) for r in self.image_pull_secrets] or None,
                "volumes": [serialize(v) for v in self.volumes] or None,
                "containers": [container] if len(container) > 1 else None,
            }
        )
        meta = _drop_none({"labels": dict(self.labels), "annotations": dict(self.annotations) or None})
        pod = {"metadata": meta, "spec": pod_spec}
        job = {"name": self.replicated_job, "template": {"spec": {"template": pod}}}
        return {"manager": self.manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}


@dataclass(frozen=True)
class TrainJob:
    """``trainer.kubeflow.org/v1alpha1`` TrainJob on a ClusterTrainingRuntime."""

    metadata: V1ObjectMeta
    runtime: str
    trainer: TrainJobTrainer
    patches: tuple[RuntimePatch, ...] = ()
    info: ClassVar[CrdInfo] = CRD_INFO["trainjob"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": self.info.api_version,
            "kind": self.info.kind,
            "metadata": serialize(self.metadata),
            "spec": _drop_none(
                {
                    "runtimeRef": {"name": self.runtime, "kind": "ClusterTrainingRuntime", "apiGroup": self.info.group},
                    "trainer": self.trainer.to_dict(),
                    "runtimePatches": [p.to_dict() for p in self.patches] or None,
                }
            ),
        }


@dataclass(frozen=True)
class PyTorchReplicaSpec:
    """``PyTorchJob.spec.pytorchReplicaSpecs.<Master|Worker>``."""

    replicas: int
    template: V1PodTemplateSpec
    restart_policy: str = "Never"

    def to_dict(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "restartPolicy": self.restart_policy, "template": serialize(self.template)}


@dataclass(frozen=True)
class PyTorchJob:
    """``kubeflow.org/v1`` PyTorchJob (Kubeflow training-operator v1)."""

    metadata: V1ObjectMeta
    master: PyTorchReplicaSpec
    worker: PyTorchReplicaSpec | None
    nproc_per_node: int
    backoff_limit: int = 0
    ttl_seconds_after_finished: int | None = None
    queue: str | None = None
    info: ClassVar[CrdInfo] = CRD_INFO["pytorchjob"]

    def to_dict(self) -> dict[str, Any]:
        replicas = {"Master": self.master.to_dict()}
        if self.worker is not None:
            replicas["Worker"] = self.worker.to_dict()
        run_policy = _drop_none(
            {
                "cleanPodPolicy": "None",
                "backoffLimit": self.backoff_limit,
                "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
                "schedulingPolicy": {"queue": self.queue} if self.queue else None,
            }
        )
        return {
            "apiVersion": self.info.api_version,
            "kind": self.info.kind,
            "metadata": serialize(self.metadata),
            "spec": {
                "pytorchReplicaSpecs": replicas,
                "nprocPerNode": str(self.nproc_per_node),
                "runPolicy": run_policy,
            },
        }
