"""The pod level of every job object: what one pod of a job is, built by pure ``make_*`` functions.

Owns the accelerator translation (:func:`make_mode`), node affinity, the Pod Security Standards
``restricted`` contexts, labels and annotations, the container environment and ``torchrun``
command, the volumes (workdir, ``/dev/shm``, store mounts, secrets), the init containers and the
pod template. The workload objects that wrap these templates (Indexed Job, Service, JobSet,
TrainJob, PyTorchJob, warm-up Job) are built in ``_manifests``, which re-exports every name here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_starverse.backends._restarts import PREEMPT_EXIT
from jupyter_starverse.backends._secrets import kube_secret_refs
from jupyter_starverse.backends._torchrun import WORKER_MODULE, job_env

from ._checks import BOOT

if TYPE_CHECKING:
    from kubernetes.client import (
        V1Affinity,
        V1Container,
        V1EnvVar,
        V1PodSecurityContext,
        V1PodTemplateSpec,
        V1SecurityContext,
        V1Toleration,
        V1Volume,
        V1VolumeMount,
    )

    from jupyter_starverse._settings import NodeTerm
    from jupyter_starverse.kube import NodePool, Toleration

from ._inputs import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_PREEMPTIONS,
    ANNOTATION_SPEC,
    CONTAINER,
    LABEL_EXPERIMENT,
    LABEL_JOB,
    LABEL_KUEUE,
    LABEL_MANAGED,
    LABEL_ROLE,
    MANAGER,
    PORT,
    ClusterConfig,
    KubeLaunch,
    ModeTranslation,
)

#: where the init step unpacks the job's working folder (an emptyDir the trainer mounts read-only)
WORKDIR_MOUNT = "/starverse/workdir"
WORKDIR_SIZE = "1Gi"


def make_mode(launch: KubeLaunch, cluster: ClusterConfig) -> ModeTranslation:
    """Translate the spec for its accelerator (see the module docstring).

    CPU and memory: the spec's, else the pool's per-GPU (per-process on CPU) size capped by the
    pool's node size; limits equal requests (Guaranteed QoS, accepted by quotas that require
    limits). GPU pods also get the extra device resources and the required node affinity
    (the pool's, else the workspace default).
    """
    from kubernetes import client as c

    from jupyter_starverse.kube import format_memory, parse_quantity

    spec, pool = launch.spec, launch.pool
    cpu, memory = pool.requests(spec.procs_per_node)
    cpu, memory = spec.cpu or cpu, spec.memory or memory
    requests = {"cpu": cpu, "memory": memory}
    limits = dict(requests)
    if spec.is_gpu:
        limits[pool.resource or "nvidia.com/gpu"] = str(spec.procs_per_node)
        limits.update(dict(cluster.extra_resources))
        limits.update(dict(pool.extra_resources))
        terms = pool.node_affinity or cluster.node_affinity
        image, backend, device = spec.image or pool.image or cluster.image, "nccl", "cuda"
    else:
        limits.update(dict(pool.extra_resources))
        terms = pool.node_affinity
        image = spec.image or pool.image or cluster.cpu_image or cluster.image
        backend, device = "gloo", "cpu"
    shm = pool.shm_size or cluster.shm_size or format_memory(parse_quantity(memory) / 4)
    if parse_quantity(shm) > parse_quantity(memory):  # tmpfs pages count against the memory limit
        shm = memory
    tolerations = tuple(_toleration(t) for t in pool.tolerations)
    return ModeTranslation(
        image=image,
        dist_backend=backend,
        device=device,
        resources=c.V1ResourceRequirements(requests=requests, limits=limits),
        node_selector=dict(pool.node_selector),
        tolerations=tolerations,
        affinity=make_affinity(terms),
        shm_size=shm,
    )


def make_affinity(terms: tuple[NodeTerm, ...]) -> V1Affinity | None:
    """Required node affinity whose terms are alternatives (any one may match): e.g. an A100
    SXM node *or* an A100 PCIe node."""
    from kubernetes import client as c

    if not terms:
        return None
    selector = c.V1NodeSelector(
        node_selector_terms=[
            c.V1NodeSelectorTerm(
                match_expressions=[
                    c.V1NodeSelectorRequirement(key=k, operator=op, values=list(v) or None) for k, op, v in term
                ]
            )
            for term in terms
        ]
    )
    return c.V1Affinity(node_affinity=c.V1NodeAffinity(required_during_scheduling_ignored_during_execution=selector))


def make_pod_security(cluster: ClusterConfig) -> V1PodSecurityContext:
    """Pod-level security of every pod (Pod Security Standards ``restricted``)."""
    from kubernetes import client as c

    return c.V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=cluster.run_as_user,
        run_as_group=cluster.run_as_group,
        fs_group=cluster.fs_group,
        # only a mismatched volume root is re-owned: a large shared volume is not walked at every start
        fs_group_change_policy="OnRootMismatch" if cluster.fs_group is not None else None,
        supplemental_groups=list(cluster.supplemental_groups) or None,
        seccomp_profile=c.V1SeccompProfile(type="RuntimeDefault"),
    )


def make_container_security(cluster: ClusterConfig) -> V1SecurityContext:
    """Container-level security of every container (``restricted``: no escalation, no capabilities)."""
    from kubernetes import client as c

    return c.V1SecurityContext(
        allow_privilege_escalation=False,
        capabilities=c.V1Capabilities(drop=["ALL"]),
        run_as_non_root=True,
        seccomp_profile=c.V1SeccompProfile(type="RuntimeDefault"),
    )


def _pod_options(pool: NodePool, cluster: ClusterConfig) -> dict[str, Any]:
    """Pod spec fields of one pool: the pool's value, else the workspace default (pull secrets: both)."""
    from kubernetes import client as c

    secrets = list(dict.fromkeys((*cluster.image_pull_secrets, *pool.image_pull_secrets)))
    return {
        "security_context": make_pod_security(cluster),
        "automount_service_account_token": cluster.automount_token,
        "service_account_name": pool.service_account or cluster.service_account,
        "priority_class_name": pool.priority_class or cluster.priority_class,
        "image_pull_secrets": [c.V1LocalObjectReference(name=n) for n in secrets] or None,
    }


def _pod_annotations(pool: NodePool, cluster: ClusterConfig) -> dict[str, str] | None:
    return {**dict(cluster.annotations), **dict(pool.annotations)} or None


def _toleration(t: Toleration) -> V1Toleration:
    from kubernetes import client as c

    return c.V1Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)


def make_labels(
    launch: KubeLaunch, cluster: ClusterConfig, *, role: str = "node", queue: bool = False
) -> dict[str, str]:
    """Labels of every object and pod of the job (the cluster is the job's truth).

    The Kueue queue label goes only on top-level workloads (``queue=True``): on pods it would
    make Kueue's pod integration queue them a second time.
    """
    from ._names import label_value

    labels = {
        LABEL_MANAGED: MANAGER,
        LABEL_JOB: launch.job_id,
        LABEL_EXPERIMENT: label_value(launch.spec.experiment_name),
        LABEL_ROLE: role,
    }
    if queue and cluster.kueue_queue:
        labels[LABEL_KUEUE] = cluster.kueue_queue
    return labels


def _annotations(launch: KubeLaunch) -> dict[str, str]:
    import json

    spec = launch.spec.to_json()
    if spec.get("code") and len(spec["code"]) > 64 * 1024:  # annotations are capped at 256 KiB in all
        spec["code"] = f"# {len(launch.spec.code or '')} characters: see {launch.run_dir}/train.py\n"
    return {
        ANNOTATION_SPEC: json.dumps(spec, sort_keys=True, separators=(",", ":")),
        "starverse.io/run-dir": launch.run_dir,
        "starverse.io/user": launch.user,
        ANNOTATION_ATTEMPT: str(launch.attempt),
        ANNOTATION_PREEMPTIONS: str(launch.preemptions),
    }


#: the Job controller's count, on each pod, of its index's failures the pod failure policy ignored
#: (https://kubernetes.io/docs/reference/labels-annotations-taints/ ; k8s.io/api batch/v1
#: ``JobIndexIgnoredFailureCountAnnotation``): the preemptions of that node so far
IGNORED_FAILURES = "batch.kubernetes.io/job-index-ignored-failure-count"
#: the run folder's record of each PyTorchJob pod's starts (one file per pod name, a count)
STARTS = "starts"


def make_env(
    launch: KubeLaunch, cluster: ClusterConfig, mode: ModeTranslation, *, indexed: bool = False, counted: bool = False
) -> list[V1EnvVar]:
    """Environment of the trainer container: the local backend's job env + mode + secrets.

    ``indexed`` (a pod of an Indexed Job, as the default kind and JobSet make): the pod also reads
    its node's preemptions so far from its own annotation (downward API) and the budget, which
    the pod command (``_checks.BOOT``) compares before it starts anything. ``counted`` (a
    PyTorchJob's pod, recreated by the operator under the same name, with no count): the pod
    command counts the starts of its pod name in the run folder (:data:`STARTS`) instead."""
    from kubernetes import client as c

    spec = launch.spec
    base = {
        "STARVERSE_MODE": mode.device if mode.device == "cpu" else "gpu",
        "STARVERSE_DIST_BACKEND": mode.dist_backend,
        "STARVERSE_DEVICE": mode.device,
        # a SIGTERM (preemption, eviction, `jobs preempt`): checkpoint, then exit 143, which the
        # pod failure policy turns into a whole-group relaunch by the backend (see _restart)
        "STARVERSE_PREEMPT_EXIT": str(PREEMPT_EXIT),
        "STARVERSE_STOP_GRACE": str(launch.grace),
        "STARVERSE_ATTEMPT": str(launch.attempt),
    }
    env = job_env(
        spec,
        job_id=launch.job_id,
        run_dir=launch.run_dir,
        checkpoint_dir=f"{launch.run_dir}/checkpoints",
        store=cluster.store,
        hf_cache=launch.hf_cache or f"{cluster.store}/hf",
        mounts=launch.mounts,
        resume_from=launch.resume_from,
    )
    if "STARVERSE_WORKDIR" in env:  # unpacked by the init step into the pod's own read-only folder
        env["STARVERSE_WORKDIR"] = WORKDIR_MOUNT
    if indexed or counted:
        base["STARVERSE_PREEMPT_RESTARTS"] = str(launch.preempt_restarts)
    if counted:
        base["STARVERSE_STARTS_DIR"] = f"{launch.run_dir}/{STARTS}"
    out = [c.V1EnvVar(name=k, value=v) for k, v in {**base, **env, **launch.cost_env}.items()]
    if indexed:
        field = c.V1ObjectFieldSelector(field_path=f"metadata.annotations['{IGNORED_FAILURES}']")
        out.append(c.V1EnvVar(name="STARVERSE_NODE_PREEMPTIONS", value_from=c.V1EnvVarSource(field_ref=field)))
    if counted:
        field = c.V1ObjectFieldSelector(field_path="metadata.name")
        out.append(c.V1EnvVar(name="STARVERSE_POD_NAME", value_from=c.V1EnvVarSource(field_ref=field)))
    for name, (secret, key) in kube_secret_refs(spec).items():  # env:/file: refused with a kubectl hint
        source = c.V1EnvVarSource(secret_key_ref=c.V1SecretKeySelector(name=secret, key=key))
        out.append(c.V1EnvVar(name=name, value_from=source))
    return out


def _entry(launch: KubeLaunch) -> tuple[list[str], bool]:
    from jupyter_starverse.backends.templates import framework_args

    spec = launch.spec
    extra = framework_args(spec, run_dir=launch.run_dir)
    if spec.command:
        return [_literal(a) for a in (*spec.command, *extra)], True
    script = launch.script or f"{launch.run_dir}/train.py"
    if spec.workdir_id and spec.workdir and spec.script and _under(spec.script, spec.workdir):
        script = spec.script  # the worker runs the packed copy of it, in the unpacked working folder
    return ["-m", WORKER_MODULE, *(_literal(a) for a in (script, *spec.args, *extra))], False


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def _literal(arg: str) -> str:
    """``arg`` as the container sees it: the kubelet expands ``$(VAR)`` in commands, so user text
    is escaped (``$$(``) and cannot read the pod's environment (secrets included) into argv."""
    return arg.replace("$(", "$$(")


def agent_restarts(launch: KubeLaunch) -> int:
    """Worker-group restarts torchrun's agent may make in one pod: one per failure and preemption
    the job may survive (a peer's loss makes every surviving agent restart its workers once)."""
    return launch.spec.max_restarts + launch.preempt_restarts


def make_command(launch: KubeLaunch, cluster: ClusterConfig, *, master: str | None) -> list[str]:
    """``torchrun`` for one pod. With ``master`` an elastic c10d rendezvous hosted by node 0's
    agent: a recreated pod joins the next round, the other agents restart their workers
    (``--max-restarts``) and every rank resumes from the run's newest checkpoint
    (``runtime.find_resume_checkpoint``). Without, torchrun takes its ``PET_*`` variables from an
    operator."""
    entry, no_python = _entry(launch)
    spec = launch.spec
    needs = "torch" if no_python else "torch,jupyter_starverse"
    argv = [cluster.python, "-c", BOOT, needs, "torch.distributed.run"]
    if master is not None:
        argv += [
            f"--nnodes={spec.nodes}",
            f"--nproc-per-node={spec.procs_per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={master}:{PORT}",
            f"--rdzv-id={launch.job_id}",
        ]
    argv.append(f"--max-restarts={agent_restarts(launch)}")
    if no_python:
        argv += ["--no-python", "--tee=3"]
    return argv + entry


def _volumes(
    launch: KubeLaunch, cluster: ClusterConfig, *, shm_size: str = "1Gi"
) -> tuple[list[V1Volume], list[V1VolumeMount], list[V1VolumeMount]]:
    """Volumes, trainer mounts, and the init container's mounts (the store, read-only).

    The trainer sees the store read-only unless the job publishes into it (``spec.store_writes``:
    a data step's job, whose rank 0 adds the new version); the warm-up pod mounts it read-write
    too (:func:`_warmup_job_spec`). Which entries a writing pod may change is the store's own
    business (owner-only folders, read-only published files, a version is never overwritten)."""
    from kubernetes import client as c

    shm_source = c.V1EmptyDirVolumeSource(medium="Memory", size_limit=shm_size)
    volumes = [c.V1Volume(name="dshm", empty_dir=shm_source)]
    shm = "/dev/shm"  # noqa: S108 - shared memory for NCCL and data loaders, not a temp file
    mounts = [c.V1VolumeMount(name="dshm", mount_path=shm)]
    wait = []
    if cluster.store_path:
        claim = c.V1PersistentVolumeClaimVolumeSource(claim_name=cluster.store_claim)
        volumes.append(c.V1Volume(name="store", persistent_volume_claim=claim))
        writes = bool(launch.spec.store_writes)
        mounts.append(c.V1VolumeMount(name="store", mount_path=cluster.store_path, read_only=not writes or None))
        wait.append(c.V1VolumeMount(name="store", mount_path=cluster.store_path, read_only=True))
    claim = c.V1PersistentVolumeClaimVolumeSource(claim_name=cluster.experiments_claim)
    volumes.append(c.V1Volume(name="experiments", persistent_volume_claim=claim))
    mounts.append(c.V1VolumeMount(name="experiments", mount_path=cluster.experiments))
    if launch.spec.workdir_id:  # the job's working folder: the init step unpacks it, the trainer reads it
        volumes.append(c.V1Volume(name="workdir", empty_dir=c.V1EmptyDirVolumeSource(size_limit=WORKDIR_SIZE)))
        mounts.append(c.V1VolumeMount(name="workdir", mount_path=WORKDIR_MOUNT, read_only=True))
    return volumes, mounts, wait


def _env_argv(launch: KubeLaunch, cluster: ClusterConfig) -> list[str]:
    """The init step of the job's environment: check it is on the store, unpack the working folder."""
    spec = launch.spec
    module = "jupyter_starverse.envs._unpack"
    ids = [spec.env_id or "-", spec.workdir_id or "-"]
    return [cluster.python, "-c", BOOT, "jupyter_starverse", module, cluster.store, *ids, WORKDIR_MOUNT]


def _env_init(launch: KubeLaunch, cluster: ClusterConfig, image: str, store_mounts: list[Any]) -> list[Any]:
    from kubernetes import client as c

    if not (launch.spec.env_id or launch.spec.workdir_id):
        return []
    mounts = list(store_mounts)
    if launch.spec.workdir_id:
        mounts.append(c.V1VolumeMount(name="workdir", mount_path=WORKDIR_MOUNT))
    return [
        c.V1Container(
            name="job-env",
            image=image,
            command=_env_argv(launch, cluster),
            volume_mounts=mounts or None,
            resources=_small_resources(launch.pool),
            security_context=make_container_security(cluster),
        )
    ]


def _pull_argv(launch: KubeLaunch, cluster: ClusterConfig) -> list[str]:
    """The warm-up: ``store pull`` (writes the store)."""
    names = [_literal(n) for n in launch.warmup]
    return [cluster.python, "-c", BOOT, "jupyter_starverse", "jupyter_starverse.cli", "store", "pull", *names]


def _wait_argv(launch: KubeLaunch, cluster: ClusterConfig) -> list[str]:
    """The training pods' init container: wait, reading only, until the warm-up published the entries."""
    names = [_literal(n) for n in launch.warmup]
    module = "jupyter_starverse.backends.kubernetes._storewait"
    return [cluster.python, "-c", BOOT, "jupyter_starverse", module, *names]


def _small_resources(pool: NodePool) -> Any:
    """Requests = limits of the warm-up and init containers: one process of the pool's size."""
    from kubernetes import client as c

    cpu, memory = pool.requests(1)
    if pool.is_gpu:  # a GPU pool's per-GPU size is far more than a wait needs
        cpu, memory = "1", "1Gi"
    return c.V1ResourceRequirements(requests={"cpu": cpu, "memory": memory}, limits={"cpu": cpu, "memory": memory})


def make_container(
    launch: KubeLaunch, cluster: ClusterConfig, *, master: str | None, name: str = CONTAINER, counted: bool = False
) -> V1Container:
    """The trainer container of every node pod."""
    from kubernetes import client as c

    mode = make_mode(launch, cluster)
    _, mounts, _ = _volumes(launch, cluster, shm_size=mode.shm_size)
    return c.V1Container(
        name=name,
        image=mode.image,
        command=make_command(launch, cluster, master=master),
        env=make_env(launch, cluster, mode, indexed=master is not None, counted=counted),
        resources=mode.resources,
        volume_mounts=mounts,
        ports=[c.V1ContainerPort(container_port=PORT, name="rendezvous")] if master else None,
        working_dir=launch.run_dir,
        security_context=make_container_security(cluster),
    )


def make_pod_template(
    launch: KubeLaunch,
    cluster: ClusterConfig,
    *,
    master: str | None,
    subdomain: str | None,
    wait_for_store: bool,
    container_name: str = CONTAINER,
    counted: bool = False,
) -> V1PodTemplateSpec:
    """Pod template of a node: trainer, optional store init container, volumes, placement."""
    from kubernetes import client as c

    mode = make_mode(launch, cluster)
    volumes, _, wait_mounts = _volumes(launch, cluster, shm_size=mode.shm_size)
    init = None
    if wait_for_store and launch.warmup:
        # The warm-up job pulls (single-flight); the nodes wait for it, reading only, without a GPU busy.
        init = [
            c.V1Container(
                name="store-wait",
                image=mode.image,
                command=_wait_argv(launch, cluster),
                volume_mounts=wait_mounts or None,
                env=[c.V1EnvVar(name="STARVERSE_STORE", value=cluster.store)],
                resources=_small_resources(launch.pool),
                security_context=make_container_security(cluster),
            )
        ]
    init = [*(init or []), *_env_init(launch, cluster, mode.image, wait_mounts)] or None
    return c.V1PodTemplateSpec(
        metadata=c.V1ObjectMeta(
            labels=make_labels(launch, cluster), annotations=_pod_annotations(launch.pool, cluster)
        ),
        spec=c.V1PodSpec(
            restart_policy="Never",
            subdomain=subdomain,
            init_containers=init,
            containers=[make_container(launch, cluster, master=master, name=container_name, counted=counted)],
            volumes=volumes,
            node_selector=mode.node_selector or None,
            tolerations=list(mode.tolerations) or None,
            affinity=mode.affinity,
            enable_service_links=False,
            termination_grace_period_seconds=launch.grace,  # time for a checkpoint on SIGTERM
            **_pod_options(launch.pool, cluster),
        ),
    )
