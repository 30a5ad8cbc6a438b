"""What the manifest builders take: the cluster side, the resolved launch, and the names of
the labels and annotations every object carries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jupyter_starverse._settings import DEFAULT_IMAGE, NodeTerm
from jupyter_starverse.jobmodel import JobSpec

if TYPE_CHECKING:
    from kubernetes.client import V1Affinity, V1ResourceRequirements, V1Toleration

    from jupyter_starverse.kube import NodePool

__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_PREEMPTIONS",
    "ANNOTATION_SPEC",
    "CONTAINER",
    "LABEL_EXPERIMENT",
    "LABEL_JOB",
    "LABEL_KUEUE",
    "LABEL_MANAGED",
    "LABEL_ROLE",
    "MANAGER",
    "PORT",
    "ClusterConfig",
    "KubeLaunch",
    "ModeTranslation",
]

LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_JOB = "starverse.io/job-id"
LABEL_EXPERIMENT = "starverse.io/experiment"
LABEL_ROLE = "starverse.io/role"
LABEL_KUEUE = "kueue.x-k8s.io/queue-name"
ANNOTATION_SPEC = "starverse.io/spec"
#: relaunches of the whole group before this object (0: the first attempt), and how many were preemptions
ANNOTATION_ATTEMPT = "starverse.io/attempt"
ANNOTATION_PREEMPTIONS = "starverse.io/preemptions"
MANAGER = "jupyter-starverse"
CONTAINER = "trainer"
PORT = 29500


@dataclass(frozen=True)
class ClusterConfig:
    """What the cluster side looks like (from Settings and the resolved namespace)."""

    namespace: str
    store: str
    experiments: str
    image: str = DEFAULT_IMAGE
    cpu_image: str | None = None
    kind: str = "job"
    kueue_queue: str | None = None
    store_claim: str = "starverse-store"
    experiments_claim: str = "starverse-experiments"
    ttl_seconds: int = 7 * 24 * 3600
    python: str = "python"
    # -- pod security (Pod Security Standards "restricted") and workspace-wide pod defaults --
    run_as_user: int = 1000
    run_as_group: int = 1000
    fs_group: int | None = 1000
    supplemental_groups: tuple[int, ...] = ()
    automount_token: bool = False
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    priority_class: str | None = None
    annotations: tuple[tuple[str, str], ...] = ()
    #: extra device limits and required node affinity: training pods of GPU jobs only
    extra_resources: tuple[tuple[str, str], ...] = ()
    node_affinity: tuple[NodeTerm, ...] = ()
    shm_size: str | None = None

    @property
    def store_path(self) -> str | None:
        """The store's mount path (the notebook's path), or None for an object-store URL."""
        return None if "://" in self.store or self.store.startswith("memory:") else self.store


@dataclass(frozen=True)
class KubeLaunch:
    """One job as the backend resolved it, ready to become manifests."""

    job_id: str
    spec: JobSpec
    run_dir: str
    pool: NodePool
    cpu_pool: NodePool
    script: str | None = None
    mounts: Mapping[str, str] = field(default_factory=dict)
    warmup: tuple[str, ...] = ()
    hf_cache: str = ""
    resume_from: str | None = None
    user: str = "user"
    #: ``costs.cap_env``: lets a job with a budget stop itself (no supervisor runs beside it)
    cost_env: Mapping[str, str] = field(default_factory=dict)
    #: relaunches of the whole group so far (0: the first attempt); the backend owns them
    attempt: int = 0
    preemptions: int = 0  # how many of those relaunches followed a preemption (the rest: failures)
    #: seconds between SIGTERM and SIGKILL (terminationGracePeriodSeconds): time for a checkpoint
    grace: int = 60
    #: gang restarts after preemptions where the cluster counts them (JobSet, PyTorchJob, torchrun)
    preempt_restarts: int = 3


@dataclass(frozen=True)
class ModeTranslation:
    """The CPU or GPU side of one spec: image, backend, resources and placement."""

    image: str
    dist_backend: str
    device: str
    resources: V1ResourceRequirements
    node_selector: dict[str, str]
    tolerations: tuple[V1Toleration, ...]
    affinity: V1Affinity | None = None
    shm_size: str = "1Gi"
