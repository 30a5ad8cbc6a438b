"""Typed custom resources the official client has no models for: JobSet, TrainingRuntime, TrainJob,
PyTorchJob.

Each is a frozen dataclass holding ``kubernetes.client`` models for its embedded templates;
``to_dict()`` serialises it to the CRD's wire shape (camelCase, ``None`` dropped) with the
client's own ``sanitize_for_serialization``, so nothing untyped is passed around.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kubernetes.client import (
        V1JobTemplateSpec,
        V1ObjectMeta,
        V1PodTemplateSpec,
        V1ResourceRequirements,
    )

__all__ = [
    "CRD_INFO",
    "TRAINER_ANCESTOR",
    "CrdInfo",
    "JobSet",
    "JobSetReplicatedJob",
    "PyTorchJob",
    "PyTorchReplicaSpec",
    "TrainJob",
    "TrainJobTrainer",
    "TrainingRuntime",
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

    def manifest(self, metadata: V1ObjectMeta, spec: dict[str, Any]) -> dict[str, Any]:
        """A whole object of this resource: its ``apiVersion`` and ``kind``, ``metadata`` serialised, ``spec``."""
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": serialize(metadata), "spec": spec}


CRD_INFO = {
    "jobset": CrdInfo("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    "trainjob": CrdInfo("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    "trainingruntime": CrdInfo("trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime"),
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

    def spec_dict(self) -> dict[str, Any]:
        """``spec`` alone (also a TrainingRuntime's ``spec.template.spec``)."""
        return _drop_none(
            {
                "replicatedJobs": [r.to_dict() for r in self.replicated_jobs],
                "network": {"enableDNSHostnames": True, "subdomain": self.subdomain},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": [self.replicated_jobs[-1].name]},
                "failurePolicy": {"maxRestarts": self.max_restarts, "restartStrategy": self.restart_strategy},
                "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return self.info.manifest(self.metadata, self.spec_dict())


@dataclass(frozen=True)
class TrainJobTrainer:
    """``TrainJob.spec.trainer``: how many nodes, processes per node and resources per node.

    The image, command and environment are the runtime's (its ``node`` container): the Trainer
    controller copies a trainer's ``image``/``command``/``env`` over them only when they are set.
    """

    num_nodes: int
    num_proc_per_node: int
    resources: V1ResourceRequirements | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_none(
            {
                "numNodes": self.num_nodes,
                "numProcPerNode": self.num_proc_per_node,
                "resourcesPerNode": serialize(self.resources) if self.resources is not None else None,
            }
        )


#: the label by which the Trainer controller finds the replicated job it puts the trainer into
TRAINER_ANCESTOR = ("trainer.kubeflow.org/trainjob-ancestor-step", "trainer")


@dataclass(frozen=True)
class TrainingRuntime:
    """``trainer.kubeflow.org/v1alpha1`` TrainingRuntime: the namespaced runtime one TrainJob refers to.

    Its ``spec.template`` is a whole JobSet (Kubeflow Trainer's ``JobSetTemplateSpec``), so the
    restart rules live in the cluster: the JobSet's ``failurePolicy`` (``maxRestarts``,
    ``restartStrategy: Recreate``) and each child Job's ``podFailurePolicy`` /
    ``backoffLimitPerIndex``, which a TrainJob's ``runtimePatches`` cannot reach (they patch pod
    templates only). ``mlPolicy.torch`` makes the controller set torchrun's ``PET_*`` variables.
    """

    metadata: V1ObjectMeta
    jobset: JobSet
    num_nodes: int
    info: ClassVar[CrdInfo] = CRD_INFO["trainingruntime"]

    def to_dict(self) -> dict[str, Any]:
        labels = (serialize(self.jobset.metadata) or {}).get("labels")
        template = {"metadata": _drop_none({"labels": labels}), "spec": self.jobset.spec_dict()}
        policy = {"numNodes": self.num_nodes, "torch": {}}
        return self.info.manifest(self.metadata, {"mlPolicy": policy, "template": template})


@dataclass(frozen=True)
class TrainJob:
    """``trainer.kubeflow.org/v1alpha1`` TrainJob on its own :class:`TrainingRuntime` (same name)."""

    metadata: V1ObjectMeta
    runtime: str
    trainer: TrainJobTrainer
    runtime_kind: str = "TrainingRuntime"
    info: ClassVar[CrdInfo] = CRD_INFO["trainjob"]

    def to_dict(self) -> dict[str, Any]:
        ref = {"name": self.runtime, "kind": self.runtime_kind, "apiGroup": self.info.group}
        return self.info.manifest(self.metadata, {"runtimeRef": ref, "trainer": self.trainer.to_dict()})


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
                "cleanPodPolicy": "Running",  # a job that ended stops its running pods (they checkpoint)
                "backoffLimit": self.backoff_limit,
                "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
                "schedulingPolicy": {"queue": self.queue} if self.queue else None,
            }
        )
        spec = {"pytorchReplicaSpecs": replicas, "nprocPerNode": str(self.nproc_per_node), "runPolicy": run_policy}
        return self.info.manifest(self.metadata, spec)
