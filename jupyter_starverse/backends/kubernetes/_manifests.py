"""Every Kubernetes object a job becomes, built only here (and in ``_pods``), by pure ``make_*`` functions.

Input: a :class:`KubeLaunch` (the JobSpec plus what the backend resolved: job id, run
folder, node pool, mount paths) and a :class:`ClusterConfig`. Output: ``kubernetes.client``
``V1*`` models, or the typed CRD dataclasses of ``_crds``. Nothing here talks to a cluster.

One spec, two translations (:func:`make_mode`): ``accelerator == "cpu"`` runs gloo with no
GPU request on the CPU pool (CPU image variant when configured); a GPU type runs nccl and
requests ``procs_per_node`` GPUs of the pool's resource, with its selector and tolerations.

Default kind: an Indexed Job (completions = parallelism = nodes) plus a headless Service;
``torchrun`` in every pod with a static rendezvous whose node rank is the completion
index and whose master is ``<job>-0.<service>``. Alternatives: JobSet, Kubeflow TrainJob
and PyTorchJob (their operators set torchrun's ``PET_*`` variables). A TrainJob comes with its own
namespaced TrainingRuntime (the JobSet with our restart rules), created first.

Every pod meets the Pod Security Standards ``restricted`` profile (:func:`make_pod_security`,
:func:`make_container_security`): non-root uid/gid from the settings, no privilege escalation,
all capabilities dropped, ``RuntimeDefault`` seccomp, only PVC and emptyDir volumes, no
service-account token unless asked. Every container requests CPU and memory
(``NodePool.requests``, or the spec's ``cpu``/``memory``) with equal limits; ``/dev/shm`` is a
memory emptyDir with a ``sizeLimit``. Every command starts as ``python -c BOOT`` (``_checks``),
which fails at once with the fix when the image lacks this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_starverse.backends._restarts import PREEMPT_EXIT, USAGE_EXIT
from jupyter_starverse.jobmodel import JobSpec

from ._checks import BUDGET_EXIT
from ._crds import (
    TRAINER_ANCESTOR,
    JobSet,
    JobSetReplicatedJob,
    PyTorchJob,
    PyTorchReplicaSpec,
    TrainingRuntime,
    TrainJob,
    TrainJobTrainer,
)

if TYPE_CHECKING:
    from kubernetes.client import (
        V1Job,
        V1JobSpec,
        V1OwnerReference,
        V1Service,
    )

    from jupyter_starverse.kube import NodePool, PoolTable

__all__ = [
    "LABEL_JOB",
    "STARTS",
    "WORKDIR_MOUNT",
    "TRAINER_NODE",
    "LABEL_MANAGED",
    "ClusterConfig",
    "KubeLaunch",
    "ModeTranslation",
    "make_affinity",
    "make_container",
    "make_container_security",
    "make_env",
    "make_job",
    "make_jobset",
    "make_labels",
    "make_manifests",
    "make_mode",
    "make_pod_security",
    "make_pod_template",
    "make_pytorchjob",
    "make_service",
    "make_trainjob",
    "make_warmup_job",
    "warmup_image",
    "owner_reference",
    "pool_for",
    "to_dict",
]

from ._inputs import (
    CONTAINER,
    LABEL_JOB,
    LABEL_MANAGED,
    LABEL_ROLE,
    PORT,
    ClusterConfig,
    KubeLaunch,
    ModeTranslation,
)
from ._pods import (
    STARTS,
    WORKDIR_MOUNT,
    _annotations,
    _pod_annotations,
    _pod_options,
    _pull_argv,
    _small_resources,
    _toleration,
    _volumes,
    agent_restarts,
    make_affinity,
    make_container,
    make_container_security,
    make_env,
    make_labels,
    make_mode,
    make_pod_security,
    make_pod_template,
)


def _meta(launch: KubeLaunch, cluster: ClusterConfig, name: str, *, role: str = "node", owner: Any = None) -> Any:
    from kubernetes import client as c

    return c.V1ObjectMeta(
        name=name,
        namespace=cluster.namespace,
        labels=make_labels(launch, cluster, role=role, queue=role not in ("service", "runtime")),
        annotations=_annotations(launch) if role == "node" else None,
        owner_references=[owner] if owner is not None else None,
    )


def _indexed_job_spec(launch: KubeLaunch, template: Any, *, ttl: int | None) -> Any:
    """The Indexed Job that recovers in the cluster, with no client running.

    The Job controller recreates a pod whose end the rules ``Ignore`` (a preemption, eviction or
    node drain: ``DisruptionTarget``; SIGTERM then checkpoint: exit 143) without counting it
    towards the back-off, but on the pod's ``job-index-ignored-failure-count``: a recreated pod
    past ``preempt_restarts`` of them exits ``BUDGET_EXIT`` at once, which fails the Job;
    a usage error (exit 2) fails the Job; any other failure counts against its index's
    ``backoffLimitPerIndex`` (``JobSpec.max_restarts``) and one index past it fails the Job
    (``maxFailedIndexes: 0``). The recreated pod joins the elastic rendezvous (:func:`make_command`).
    Needs Kubernetes 1.29+ (``backoffLimitPerIndex``, ``podFailurePolicy`` GA in 1.31).
    """
    from kubernetes import client as c

    spec = launch.spec

    def on_exit(code: int, action: str) -> Any:
        return c.V1PodFailurePolicyRule(
            action=action,
            on_exit_codes=c.V1PodFailurePolicyOnExitCodesRequirement(
                container_name=container, operator="In", values=[code]
            ),
        )

    container = template.spec.containers[0].name
    rules = [
        # a preemption, eviction or node drain: recreated, not counted (the ranks checkpointed on SIGTERM)
        c.V1PodFailurePolicyRule(
            action="Ignore",
            on_pod_conditions=[c.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")],
        ),
        # SIGTERM, checkpoint, exit 143 (`jobs preempt`, a provider's notice, a plain delete): the same
        on_exit(PREEMPT_EXIT, "Ignore"),
        # a usage error (bad arguments): recreating cannot help
        on_exit(USAGE_EXIT, "FailJob"),
        # a node preempted more than the budget allows (the pod command checks its ignored-failure
        # count at start): Ignore has no limit of its own, this rule is the limit
        on_exit(BUDGET_EXIT, "FailJob"),
    ]
    return c.V1JobSpec(
        completion_mode="Indexed",
        completions=spec.nodes,
        parallelism=spec.nodes,
        backoff_limit_per_index=spec.max_restarts,
        max_failed_indexes=0,
        pod_failure_policy=c.V1PodFailurePolicy(rules=rules),
        ttl_seconds_after_finished=ttl,
        template=template,
    )


def make_job(launch: KubeLaunch, cluster: ClusterConfig) -> V1Job:
    """The default kind: an Indexed Job, one pod per node, rank from the completion index."""
    from kubernetes import client as c

    name = launch.job_id
    template = make_pod_template(launch, cluster, master=f"{name}-0.{name}", subdomain=name, wait_for_store=True)
    return c.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=_meta(launch, cluster, name),
        spec=_indexed_job_spec(launch, template, ttl=cluster.ttl_seconds),
    )


def owner_reference(obj: Any) -> V1OwnerReference:
    """An owner reference to a created object, so deleting it deletes its dependents."""
    from kubernetes import client as c

    return c.V1OwnerReference(
        api_version=obj.api_version,
        kind=obj.kind,
        name=obj.metadata.name,
        uid=obj.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def make_service(launch: KubeLaunch, cluster: ClusterConfig, *, owner: V1OwnerReference | None = None) -> V1Service:
    """Headless Service giving every pod the DNS name ``<job>-<index>.<job>``."""
    from kubernetes import client as c

    return c.V1Service(
        api_version="v1",
        kind="Service",
        metadata=_meta(launch, cluster, launch.job_id, role="service", owner=owner),
        spec=c.V1ServiceSpec(
            cluster_ip="None",
            selector={LABEL_JOB: launch.job_id, LABEL_ROLE: "node"},
            publish_not_ready_addresses=True,  # rendezvous starts before any pod is ready
            ports=[c.V1ServicePort(name="rendezvous", port=PORT, target_port=PORT)],
        ),
    )


def _warmup_job_spec(launch: KubeLaunch, cluster: ClusterConfig, *, ttl: int | None) -> V1JobSpec:
    from kubernetes import client as c

    pool = launch.cpu_pool
    volumes, _, _ = _volumes(launch, cluster)
    env = [c.V1EnvVar(name="STARVERSE_STORE", value=cluster.store)]
    # The one pod that writes the store: its container pulls, so it mounts the store read-write.
    pull_mounts = [c.V1VolumeMount(name="store", mount_path=cluster.store_path)] if cluster.store_path else None
    pod = c.V1PodTemplateSpec(
        metadata=c.V1ObjectMeta(
            labels=make_labels(launch, cluster, role="warmup"), annotations=_pod_annotations(pool, cluster)
        ),
        spec=c.V1PodSpec(
            restart_policy="Never",
            containers=[
                c.V1Container(
                    name="store-pull",
                    image=warmup_image(launch, cluster),
                    command=_pull_argv(launch, cluster),
                    env=env,
                    volume_mounts=pull_mounts,
                    resources=_small_resources(pool),
                    security_context=make_container_security(cluster),
                )
            ],
            volumes=[v for v in volumes if v.name == "store"] or None,
            node_selector=dict(pool.node_selector) or None,
            tolerations=[_toleration(t) for t in pool.tolerations] or None,
            affinity=make_affinity(pool.node_affinity),
            enable_service_links=False,
            **_pod_options(pool, cluster),
        ),
    )
    return c.V1JobSpec(backoff_limit=2, ttl_seconds_after_finished=ttl, template=pod)


def warmup_image(launch: KubeLaunch, cluster: ClusterConfig) -> str:
    """The warm-up pod's image: the CPU pool's, else the CPU image, else the image."""
    return launch.cpu_pool.image or cluster.cpu_image or cluster.image


def make_warmup_job(launch: KubeLaunch, cluster: ClusterConfig, *, owner: V1OwnerReference | None = None) -> V1Job:
    """One CPU pod that pulls the job's mounts into the shared store before training."""
    from kubernetes import client as c

    return c.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=_meta(launch, cluster, f"{launch.job_id}-warmup", role="warmup", owner=owner),
        spec=_warmup_job_spec(launch, cluster, ttl=cluster.ttl_seconds),
    )


def make_jobset(launch: KubeLaunch, cluster: ClusterConfig, *, for_trainer: bool = False) -> JobSet:
    """JobSet: a ``node`` replicated Indexed Job, after a ``warmup`` one when mounts need a pull.

    ``for_trainer``: the JobSet of a :class:`TrainingRuntime`: the trainer container is named
    ``node`` and its replicated job carries the ``trainjob-ancestor-step: trainer`` label (what
    Kubeflow Trainer looks for), and the JobSet's labels carry no Kueue queue (the TrainJob has it).
    """
    from kubernetes import client as c

    name = launch.job_id
    template = make_pod_template(
        launch,
        cluster,
        master=f"{name}-node-0-0.{name}",
        subdomain=None,
        wait_for_store=False,
        container_name=TRAINER_NODE if for_trainer else CONTAINER,
    )
    node_labels = make_labels(launch, cluster)
    if for_trainer:
        node_labels[TRAINER_ANCESTOR[0]] = TRAINER_ANCESTOR[1]
    node_job = c.V1JobTemplateSpec(
        metadata=c.V1ObjectMeta(labels=node_labels), spec=_indexed_job_spec(launch, template, ttl=None)
    )
    jobs = []
    if launch.warmup:
        warm = c.V1JobTemplateSpec(
            metadata=c.V1ObjectMeta(labels=make_labels(launch, cluster, role="warmup")),
            spec=_warmup_job_spec(launch, cluster, ttl=None),
        )
        jobs.append(JobSetReplicatedJob("warmup", warm))
    depends = (("warmup", "Complete"),) if launch.warmup else ()
    jobs.append(JobSetReplicatedJob("node", node_job, depends_on=depends))
    meta = _meta(launch, cluster, name)
    if for_trainer:
        meta.labels = make_labels(launch, cluster)
    return JobSet(
        metadata=meta,
        replicated_jobs=tuple(jobs),
        subdomain=name,
        ttl_seconds_after_finished=cluster.ttl_seconds,
        # a child Job that fails (an index past its limit) restarts the whole gang
        max_restarts=agent_restarts(launch),
        restart_strategy="Recreate",
    )


#: the trainer container's name in a TrainingRuntime (Kubeflow Trainer's ``constants.Node``)
TRAINER_NODE = "node"


def make_trainjob(launch: KubeLaunch, cluster: ClusterConfig) -> tuple[TrainingRuntime, TrainJob]:
    """Kubeflow Trainer TrainJob on a TrainingRuntime of its own (same name and namespace).

    The runtime's template is :func:`make_jobset`'s JobSet: the Trainer controller creates it as
    the TrainJob's JobSet (https://www.kubeflow.org/docs/components/trainer/operator-guides/runtime/),
    so a preempted pod is recreated by the Job controller (``podFailurePolicy`` ``Ignore``, within
    the preemption budget) and a failed child Job restarts the gang (``failurePolicy.maxRestarts``),
    with no client. The TrainJob only sets the node count, processes per node and resources
    (``spec.trainer``); the runtime must exist before it (the Trainer webhook checks the reference).
    """
    mode = make_mode(launch, cluster)
    runtime = TrainingRuntime(
        metadata=_meta(launch, cluster, launch.job_id, role="runtime"),
        jobset=make_jobset(launch, cluster, for_trainer=True),
        num_nodes=launch.spec.nodes,
    )
    trainer = TrainJobTrainer(
        num_nodes=launch.spec.nodes, num_proc_per_node=launch.spec.procs_per_node, resources=mode.resources
    )
    return runtime, TrainJob(metadata=_meta(launch, cluster, launch.job_id), runtime=launch.job_id, trainer=trainer)


def make_pytorchjob(launch: KubeLaunch, cluster: ClusterConfig) -> PyTorchJob:
    """Kubeflow training-operator PyTorchJob: one Master and ``nodes - 1`` Workers, ``ExitCode`` replicas.

    The operator (https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/;
    kubeflow/training-operator ``pkg/controller.v1/common/pod.go``) recreates a pod under the same
    name when it ended with a retryable code (128+: 143 after SIGTERM and the checkpoint, 137) and
    fails the job on a permanent one (1-127: a script failure, a usage error, ``BUDGET_EXIT``).
    Its ``runPolicy.backoffLimit`` counts the container restarts of running pods, which are 0 for
    the ``Never`` pods it recreates, so it cannot bound preemptions: each pod counts its own starts
    on the run folder's volume and exits ``BUDGET_EXIT`` past ``preempt_restarts`` (``_checks.BOOT``).
    ``cleanPodPolicy: Running`` stops the other pods once the job ended.
    """
    # The operator finds the trainer by the container name "pytorch".
    template = make_pod_template(
        launch, cluster, master=None, subdomain=None, wait_for_store=True, container_name="pytorch", counted=True
    )
    workers = launch.spec.nodes - 1
    return PyTorchJob(
        metadata=_meta(launch, cluster, launch.job_id),
        master=PyTorchReplicaSpec(1, template, "ExitCode"),
        worker=PyTorchReplicaSpec(workers, template, "ExitCode") if workers else None,
        nproc_per_node=launch.spec.procs_per_node,
        # 0 fails the job at the first failed pod (the operator's exceedsBackoffLimit): then no
        # restart is allowed at all; any other value leaves the budget to the pod command
        backoff_limit=agent_restarts(launch),
        ttl_seconds_after_finished=cluster.ttl_seconds,
        queue=cluster.kueue_queue,
    )


def make_manifests(launch: KubeLaunch, cluster: ClusterConfig) -> list[Any]:
    """Everything ``submit`` creates for ``cluster.kind``, in creation order."""
    if cluster.kind == "jobset":
        return [make_jobset(launch, cluster)]
    if cluster.kind == "trainjob":  # the runtime first: a TrainJob may only refer to an existing one
        return list(make_trainjob(launch, cluster))
    if cluster.kind == "pytorchjob":
        out: list[Any] = [make_pytorchjob(launch, cluster)]
    else:
        out = [make_job(launch, cluster), make_service(launch, cluster)]
    if launch.warmup:
        out.append(make_warmup_job(launch, cluster))
    return out


def pool_for(spec: JobSpec, pools: PoolTable) -> NodePool:
    """The node pool of the spec's accelerator, placed for its billing (``spot``: the spot
    nodes, their toleration and priority class); unknown GPU types are bad input."""
    return pools.get("cpu" if not spec.is_gpu else spec.accelerator).for_billing(spec.billing)


def to_dict(obj: Any) -> dict[str, Any]:
    """The wire form of a built object (V1 model or CRD dataclass)."""
    from ._crds import serialize

    if isinstance(obj, (JobSet, TrainingRuntime, TrainJob, PyTorchJob)):
        return obj.to_dict()
    return dict(serialize(obj))
