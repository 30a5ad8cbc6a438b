"""The configuration and creation half of the Kubernetes backend (``KubeCore``).

Owns the connection and API plumbing, the cluster config a launch renders with, the mounts and
script a spec resolves to, :meth:`KubeCore.plan` and the dry renders, the checks before a submit
(server version), the creation of a job's objects with the undo on a failed create, the run
folder's record (``kubernetes.json``), and the translation of a cluster object and its pods into a
:class:`Job`. ``KubernetesBackend`` (``_backend``) adds the lifecycle: submit, status and
recovery, logs, cancel and preempt.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends._restarts import PREEMPT_RESTARTS
from jupyter_starverse.costs import budget_stop_reason
from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    ConflictError,
    NotFoundError,
)
from jupyter_starverse.experiments import ExperimentPaths, plan_resume, read_json, write_json
from jupyter_starverse.jobmodel import EndpointSpec, Job, JobSpec, JobState, LaunchBackend
from jupyter_starverse.kube import KubeConnection, connect, require_kubernetes, resolve_namespace

from ._api import ClusterApi, WireList
from ._checks import check_image, check_warmup_source
from ._crds import CRD_INFO, TrainingRuntime
from ._inputs import (
    ANNOTATION_SPEC,
    LABEL_JOB,
    LABEL_MANAGED,
    LABEL_ROLE,
    MANAGER,
    ClusterConfig,
    KubeLaunch,
)
from ._manifests import STARTS, make_manifests, make_mode, pool_for, to_dict, warmup_image
from ._names import is_dns_label, make_job_id
from ._restart import (
    budget_of,
    current_pods,
    index_restarts,
    pod_restarts,
    recovers_in_cluster,
    start_restarts,
    stopping_node,
)
from ._status import job_state, latest_per_node, parse_time
from ._watch import resuming

__all__ = ["MIN_KUBERNETES", "RECORD", "KubeCore", "failed_create_hint"]

RECORD = "kubernetes.json"
#: the oldest API server a job runs on: ``backoffLimitPerIndex`` (on by default since 1.29) and
#: ``podFailurePolicy`` (on since 1.26, GA in 1.31) make the Indexed Job recover by itself
MIN_KUBERNETES = (1, 29)


def _gang_restarts(jobset: dict[str, Any] | None) -> int:
    """Gang restarts a JobSet made (``status.restarts``; 0 without one)."""
    return int(((jobset or {}).get("status") or {}).get("restarts") or 0)


def _kind_of(obj: Any) -> str:
    """``kind`` of a V1 model or of a CRD dataclass (``info.kind``), without serialising it."""
    return str(getattr(obj, "kind", None) or obj.info.kind)


class KubeCore(LaunchBackend):
    """Jobs as Kubernetes objects (Indexed Job + Service, JobSet, TrainJob or PyTorchJob).

    Parameters
    ----------
    settings
        Namespace, context, kind, image, Kueue queue, pool table, store and experiments.
    kind
        Overrides ``settings.kube_kind`` (``job``, ``jobset``, ``trainjob``, ``pytorchjob``).
    connection
        A ready connection (tests); by default loaded once on first use.
    preempt_restarts
        Whole-group relaunches after preemptions (``DisruptionTarget``, exit 143); failures of the
        script are relaunched ``JobSpec.max_restarts`` times (see ``_restart``).
    grace
        Seconds between SIGTERM and SIGKILL of every pod (``terminationGracePeriodSeconds``).
    """

    name = "kubernetes"

    def __init__(
        self,
        settings: Settings,
        *,
        kind: str | None = None,
        connection: KubeConnection | None = None,
        preempt_restarts: int = PREEMPT_RESTARTS,
        grace: int = 60,
    ) -> None:
        self.settings = settings
        self.preempt_restarts = max(0, preempt_restarts)
        self.grace = max(1, int(grace))
        self.kind = kind or settings.kube_kind
        if self.kind not in ("job", *CRD_INFO):
            raise BadInputError(
                f"unknown kind {self.kind!r}", field="kind", hint="use job, jobset, trainjob or pytorchjob"
            )
        self._conn = connection
        self._api: ClusterApi | None = None

    # -- plumbing -------------------------------------------------------------------
    @property
    def conn(self) -> KubeConnection:
        if self._conn is None:
            self._conn = connect(self.settings)
        return self._conn

    @property
    def api(self) -> ClusterApi:
        """The API calls, on the connection loaded once."""
        if self._api is None:
            self._api = ClusterApi(self.conn)
        return self._api

    def _cluster(self, namespace: str | None = None, kind: str | None = None) -> ClusterConfig:
        s = self.settings
        return ClusterConfig(
            namespace=namespace or (self._conn.namespace if self._conn else resolve_namespace(s)),
            store=s.store,
            experiments=str(s.experiments),
            image=s.image,
            cpu_image=s.cpu_image,
            kind=kind or self.kind,
            kueue_queue=s.kueue_queue,
            store_claim=s.store_claim or "starverse-store",
            experiments_claim=s.experiments_claim or "starverse-experiments",
            run_as_user=s.pod_uid,
            run_as_group=s.pod_gid,
            fs_group=s.pod_fs_group,
            # a numeric shared group (docs/sharing.md) lets every job write what the team shares
            supplemental_groups=(int(s.shared_group),) if s.shared_group and s.shared_group.isdigit() else (),
            automount_token=s.automount_token,
            image_pull_secrets=s.image_pull_secrets,
            service_account=s.service_account,
            priority_class=s.priority_class,
            annotations=s.pod_annotations,
            extra_resources=s.extra_resources,
            node_affinity=s.node_affinity,
            shm_size=s.shm_size,
        )

    # -- planning -------------------------------------------------------------------
    def _resolve_mounts(self, spec: JobSpec) -> tuple[dict[str, str], tuple[str, ...], str]:
        """(paths of pulled mounts, names to warm up, HF cache dir)."""
        from jupyter_starverse.catalog import Catalog

        catalog = Catalog(self.settings)
        hf_cache = catalog.job_env().get("HF_HUB_CACHE", f"{self.settings.store}/hub")
        paths: dict[str, str] = {}
        warm: list[str] = []
        for name in spec.mounts:
            try:
                paths[name] = str(catalog.mount(name))
            except ConflictError:
                # registered but not pulled: the warm-up job fills the store once, if it can reach the source
                entry = catalog.entry(name)
                check_warmup_source(name, entry.kind, entry.source, store_path=str(catalog.root))
                warm.append(name)
            except (NotFoundError, BadInputError) as e:
                raise BadInputError(f"mount {name!r}: {e.message}", field="mounts", hint=e.hint) from e
        return paths, tuple(warm), hf_cache

    def _script(self, spec: JobSpec, run_dir: Path) -> str | None:
        if spec.script is None:
            return None
        path = Path(spec.script).expanduser().absolute()
        if not path.is_file():
            raise BadInputError(
                f"script {str(path)!r} does not exist", field="script", hint="give the path of a Python file"
            )
        shared = [Path(self.settings.experiments)] + (
            [Path(self.settings.store)] if "://" not in self.settings.store else []
        )
        if any(path.is_relative_to(root) for root in shared):
            return str(path)
        return str(run_dir / "train.py")  # copied at submit: pods see only the shared volumes

    def plan(
        self,
        spec: JobSpec,
        *,
        job_id: str | None = None,
        namespace: str | None = None,
        attempt: int = 0,
        preemptions: int = 0,
    ) -> tuple[KubeLaunch, list[Any]]:
        """The resolved launch and its manifests, without any API call (``attempt``: a relaunch)."""
        from jupyter_starverse.kube import load_pools

        require_kubernetes()  # the builders use its models: fail here with the install hint

        pools = load_pools(self.settings)
        pool = pool_for(spec, pools)
        job_id = job_id or make_job_id(spec.name)
        exp = ExperimentPaths.of(self.settings.experiments, spec.experiment_name)
        run = exp.run(job_id)
        if attempt and spec.script and not Path(spec.script).expanduser().is_file():
            spec = dataclasses.replace(spec, script=str(run.root / "train.py"))  # the copy made at submit
        mounts, warm, hf_cache = self._resolve_mounts(spec)
        resume = (
            plan_resume(exp, new_world_size=spec.world_size, data_parallel=spec.data_parallel) if spec.resume else None
        )
        cost_env: dict[str, str] = {}
        if spec.budget is not None:  # costs: no supervisor beside a pod, so the job enforces its own cap
            from jupyter_starverse.costs import cap_env, load_price_table

            cost_env = cap_env(spec, load_price_table(self.settings), user=self.settings.user)
        cost_env["STARVERSE_NAN_STEPS"] = str(self.settings.nan_steps)  # runtime guard: a loss that stays NaN stops
        launch = KubeLaunch(
            job_id=job_id,
            spec=spec,
            run_dir=str(run.root),
            pool=pool,
            cpu_pool=pools.get("cpu"),
            script=self._script(spec, run.root),
            mounts=mounts,
            warmup=warm,
            hf_cache=hf_cache,
            resume_from=str(resume.checkpoint.path) if resume and resume.checkpoint else None,
            user=self.settings.user,
            cost_env=cost_env,
            attempt=attempt,
            preemptions=preemptions,
            grace=self.grace,
            preempt_restarts=self.preempt_restarts,
        )
        cluster = self._cluster(namespace)
        mode = make_mode(launch, cluster)
        check_image(mode.image, where="image", needs_package=not spec.command)
        if launch.warmup:
            check_image(warmup_image(launch, cluster), where="cpu_image")
        return launch, make_manifests(launch, cluster)

    def env_target(self, spec: JobSpec) -> str:
        """The pods' image (what the job env is diffed against): the spec's, else the CPU or GPU default."""
        s = self.settings
        return f"image:{spec.image or ((s.cpu_image or s.image) if not spec.is_gpu else s.image)}"

    def render_endpoint(self, spec: EndpointSpec, *, output: str = "yaml") -> str:
        """The endpoint's Deployment + Service (``_serving``), as YAML or JSON; nothing is sent."""
        from jupyter_starverse.kube import load_pools

        from ._serving import make_endpoint_manifests

        require_kubernetes()
        pool = load_pools(self.settings).get(spec.accelerator)
        docs = [to_dict(o) for o in make_endpoint_manifests(spec, self._cluster(), pool)]
        if output == "json":
            return json.dumps(docs, indent=2)
        if output != "yaml":
            raise BadInputError(f"unknown output {output!r}", field="output", hint="use yaml or json")
        import yaml

        return "---\n".join(yaml.safe_dump(d, sort_keys=False, width=200) for d in docs)

    def render(self, spec: JobSpec, *, output: str = "yaml") -> str:
        _, objects = self.plan(spec)
        docs = [to_dict(o) for o in objects]
        if output == "json":
            return json.dumps(docs if len(docs) > 1 else docs[0], indent=2)
        if output != "yaml":
            raise BadInputError(f"unknown output {output!r}", field="output", hint="use yaml or json")
        import yaml

        return "---\n".join(yaml.safe_dump(d, sort_keys=False, width=200) for d in docs)

    # -- submit ---------------------------------------------------------------------
    def _check_cluster(self, ns: str) -> None:
        """Refuse a submit the cluster cannot run: a server older than :data:`MIN_KUBERNETES`
        (``/version``, asked once) or a missing PersistentVolumeClaim (one GET each)."""
        if not getattr(self, "_version_ok", False):
            with self.api.errors("read", "the server version", ns):
                version = self.api.server_version()
            if version < MIN_KUBERNETES:
                have, need = ".".join(map(str, version)), ".".join(map(str, MIN_KUBERNETES))
                raise BackendUnavailableError(
                    f"the cluster runs Kubernetes {have}; jobs need {need} or newer "
                    "(backoffLimitPerIndex and podFailurePolicy let a job recover in the cluster)",
                    hint=f"upgrade the cluster to {need}+ (`kubectl version`), or use --backend slurm / local",
                )
            self._version_ok = True
        cluster = self._cluster(ns)
        claims = [(cluster.experiments_claim, "STARVERSE_EXPERIMENTS_CLAIM", "experiments")]
        if cluster.store_path:
            claims.append((cluster.store_claim, "STARVERSE_STORE_CLAIM", "store"))
        with self.api.errors("read", "persistent volume claims", ns):
            missing = [(name, env, what) for name, env, what in claims if not self.api.claim_exists(name, ns)]
        if missing and len(missing) == len(claims):  # none: perhaps no such namespace at all
            with self.api.errors("read", f"namespace {ns!r}", ns):
                exists = self.api.namespace_exists(ns)
            if exists is False:
                raise NotFoundError(
                    f"namespace {ns!r} does not exist (while trying to submit)",
                    hint=f"create it (`kubectl create namespace {ns}`) or set STARVERSE_NAMESPACE",
                )
        if missing:
            names = ", ".join(f"{name!r} ({what})" for name, _, what in missing)
            envs = " / ".join(env for _, env, _ in missing)
            raise NotFoundError(
                f"no PersistentVolumeClaim {names} in namespace {ns!r}: the pods could not mount it",
                hint=f"create it (docs/kubernetes.md; `kubectl get pvc -n {ns}`) or name an existing claim with {envs}",
            )

    def _create(self, job_id: str, objects: list[Any], ns: str, kind: str) -> dict[str, Any]:
        """Create the main object, then its dependents owned by it (deleting it deletes them).

        A TrainJob's own TrainingRuntime comes first (the TrainJob may only refer to an existing
        runtime) and is then given the TrainJob as its owner, so it goes with the TrainJob."""
        runtimes = [o for o in objects if isinstance(o, TrainingRuntime)]
        main, *dependents = [o for o in objects if not isinstance(o, TrainingRuntime)]
        for runtime in runtimes:
            with self.api.errors("create", f"trainingruntime {job_id!r}", ns):
                self.api.create_main("trainingruntime", runtime, ns)
        try:
            with self.api.errors("create", f"{_kind_of(main).lower()} {job_id!r}", ns):
                created = self.api.create_main(kind, main, ns)
        except BaseException:
            for runtime in runtimes:
                self._undo({"metadata": {"name": runtime.metadata.name}}, ns, "trainingruntime")
            raise
        try:
            owner = self.api.client().V1OwnerReference(
                api_version=created["apiVersion"],
                kind=created["kind"],
                name=created["metadata"]["name"],
                uid=created["metadata"]["uid"],
                controller=True,
                block_owner_deletion=True,
            )
            for runtime in runtimes:
                with self.api.errors("patch", f"trainingruntime {job_id!r}", ns):
                    self.api.set_owner("trainingruntime", str(runtime.metadata.name), ns, owner)
            for dep in dependents:
                dep.metadata.owner_references = [owner]
                with self.api.errors("create", f"{dep.kind.lower()} {dep.metadata.name!r}", ns):
                    self.api.create_dependent(dep, ns)
        except BaseException:
            self._undo(created, ns, kind)
            for runtime in runtimes:
                self._undo({"metadata": {"name": runtime.metadata.name}}, ns, "trainingruntime")
            raise
        return created

    def _write_run(self, launch: KubeLaunch, run_dir: Path, ns: str, now: float) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        spec = launch.spec
        if spec.code is not None:
            (run_dir / "train.py").write_text(spec.code)
        elif spec.script and launch.script == str(run_dir / "train.py"):
            shutil.copyfile(Path(spec.script).expanduser(), run_dir / "train.py")
        from jupyter_starverse.backends.templates import write_framework_files

        write_framework_files(spec, run_dir)
        write_json(
            run_dir / RECORD,
            {
                "job_id": launch.job_id,
                "kind": self.kind,
                "namespace": ns,
                "created": now,
                "spec": spec.to_json(),
                "final": None,
            },
        )

    def _undo(self, created: dict[str, Any], ns: str, kind: str) -> None:
        """A failed create removes the main object it made (cascading to what it owns)."""
        try:
            self.api.delete_main(kind, created["metadata"]["name"], ns)
        except Exception:  # noqa: S110 - the original error is the one to report
            pass

    # -- reading --------------------------------------------------------------------
    def _record(self, job_id: str) -> tuple[Path | None, dict[str, Any]]:
        if not is_dns_label(job_id):  # every id we make is one; anything else (paths, globs) is unknown
            raise NotFoundError(f"no Kubernetes job {job_id!r}", hint="list jobs with `starverse jobs ls`")
        root = Path(self.settings.experiments)
        for path in root.glob(f"*/runs/{job_id}/{RECORD}") if root.is_dir() else []:
            return path.parent, dict(read_json(path) or {})
        return None, {}

    def _job_from(self, obj: dict[str, Any], pods: WireList, gang: dict[str, Any] | None = None) -> Job:
        """The job as ``obj`` (its main object) and ``pods`` show it; ``gang``: its JobSet (a
        JobSet's, a TrainJob's), whose ``status.restarts`` counts the gang restarts (their pods are gone)."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        spec = JobSpec.from_json(json.loads(annotations[ANNOTATION_SPEC]))
        nodes = latest_per_node(pods)
        st = job_state(obj, nodes)
        run_dir = annotations.get("starverse.io/run-dir", "")
        in_cluster = recovers_in_cluster(obj)
        # in the cluster: every pod it replaced is a restart (read from the pods, not from memory)
        restarts = (
            _gang_restarts(gang) + max(len(pod_restarts(pods)), index_restarts(pods))
            if in_cluster
            else budget_of(obj).restarts
        )
        if obj.get("kind") == "PyTorchJob" and run_dir:  # its operator deletes the pods it replaces
            restarts = max(restarts, start_restarts(Path(run_dir) / STARTS))
        state = st.state
        reason = st.reason
        if restarts and resuming(state, nodes, spec.nodes):
            state = JobState.RESUMING  # a relaunched group until every node runs again
        stopping = stopping_node(current_pods(pods) if in_cluster else pods) if not state.finished else None
        if stopping is not None:  # SIGTERM'd (deleted, evicted): it checkpoints, then the attempt ends
            then = "the cluster recreates it" if in_cluster else "checkpointing before the relaunch"
            state, reason = JobState.PREEMPTED, f"{stopping}: {then}"
        return Job(
            id=meta["name"],
            backend=self.name,
            spec=spec,
            state=state,
            experiment_dir=run_dir,
            created=parse_time(meta.get("creationTimestamp")) or 0.0,
            started=st.started,
            finished=st.finished,
            reason=reason or (budget_stop_reason(run_dir) if st.state.finished and spec.budget else None),
            nodes=nodes,
            restarts=restarts,
        )

    def _selector(self, job_id: str | None = None) -> str:
        sel = f"{LABEL_MANAGED}={MANAGER},{LABEL_ROLE}=node"
        return f"{sel},{LABEL_JOB}={job_id}" if job_id else sel


def failed_create_hint(message: str, ns: str) -> str:
    """What to do about a pod the API server refused to create (the event's message)."""
    if "exceeded quota" in message or "failed quota" in message:
        return (
            f"the namespace's ResourceQuota refuses the pods: ask for fewer nodes or GPUs (or smaller "
            f"--cpu/--memory), cancel other jobs, or ask for more quota (`kubectl describe resourcequota -n {ns}`)"
        )
    if "PriorityClass" in message:
        return (
            "the pool's priority class does not exist: create it or set the pool's priority_class "
            "(STARVERSE_PRIORITY_CLASS) to one of `kubectl get priorityclasses`"
        )
    if "PodSecurity" in message:
        return (
            f"the namespace's Pod Security level refuses the pod: check its labels "
            f"(`kubectl get ns {ns} --show-labels`) and the pod options (pod uid/gid, annotations)"
        )
    return f"see `kubectl describe job -n {ns}` and `kubectl get events -n {ns}`"
