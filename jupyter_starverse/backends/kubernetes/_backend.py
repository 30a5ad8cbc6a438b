"""``KubernetesBackend``: the LaunchBackend contract on a cluster, with the official client.

The cluster is the job's truth (labels and the spec annotation); the run folder keeps the
code, a small record (``kubernetes.json``) and copies of the pod logs, so a job can be shown
after its objects are gone. Every call is synchronous: front doors run it in a thread.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends._restarts import PREEMPT_RESTARTS, archive_attempt, lost_work
from jupyter_starverse.costs import budget_stop_reason
from jupyter_starverse.errors import (
    BackendUnavailableError,
    BadInputError,
    ConflictError,
    NotFoundError,
    StarverseError,
)
from jupyter_starverse.experiments import ExperimentPaths, RunPaths, plan_resume, read_json, write_json
from jupyter_starverse.jobmodel import EndpointSpec, Job, JobSpec, JobState, LaunchBackend, LogLine
from jupyter_starverse.kube import KubeConnection, connect, require_kubernetes, resolve_namespace

from ._api import ClusterApi, WireList
from ._checks import check_image, check_warmup_source
from ._crds import CRD_INFO, TrainingRuntime
from ._inputs import (
    ANNOTATION_SPEC,
    CONTAINER,
    LABEL_JOB,
    LABEL_MANAGED,
    LABEL_ROLE,
    MANAGER,
    ClusterConfig,
    KubeLaunch,
)
from ._logs import PodStream, fan_in, saved_logs
from ._manifests import STARTS, TRAINER_NODE, make_manifests, make_mode, pool_for, to_dict, warmup_image
from ._names import is_dns_label, make_job_id
from ._restart import (
    AttemptEnd,
    attempt_end,
    budget_of,
    current_pods,
    index_restarts,
    pod_restarts,
    recovers_in_cluster,
    start_restarts,
    stopping_node,
)
from ._status import job_state, latest_per_node, parse_time
from ._watch import resuming, watch_job

__all__ = ["RECORD", "KubernetesBackend"]

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


class KubernetesBackend(LaunchBackend):
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
    def submit(self, spec: JobSpec, *, dry_run: bool = False) -> Job:
        launch, objects = self.plan(spec, namespace=None if dry_run else self.conn.namespace)
        now = time.time()
        if dry_run:
            return Job(launch.job_id, self.name, spec, JobState.PENDING, launch.run_dir, now, reason="dry run")
        self.api.check_kind(self.kind)
        ns, run_dir = self.conn.namespace, Path(launch.run_dir)
        self._check_cluster(ns)
        self._write_run(launch, run_dir, ns, now)
        try:
            created = self._create(launch.job_id, objects, ns, self.kind)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return self._job_from(created, [])  # just created: no pods yet, no need to ask again

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

    def get(self, job_id: str) -> Job:
        """The job now. A Job, JobSet, TrainJob (on its own TrainingRuntime) or PyTorchJob restarts
        in the cluster: this only reads it (restarts and their lost work from the pods). For a
        TrainJob on a shared ClusterTrainingRuntime (an older submit), whose runtime owns its failure
        policy, whole-group restarts happen here (see ``_restart``): a failed attempt with budget
        left is deleted, and once its pods are gone attempt N + 1 is created."""
        run_dir, record = self._record(job_id)
        kind, ns = record.get("kind", self.kind), record.get("namespace") or self.conn.namespace
        cancelled = run_dir is not None and (run_dir / "cancel.json").is_file()
        relaunch = record.get("relaunch") if run_dir is not None and not cancelled else None
        try:
            with self.api.errors("read", f"job {job_id!r}", ns):
                obj = self.api.get_main(kind, job_id, ns)
                pods, _ = self.api.pods(ns, self._selector(job_id))
        except NotFoundError:
            if run_dir is None:
                raise NotFoundError(
                    f"no Kubernetes job {job_id!r} in namespace {ns!r}",
                    hint=f"list jobs with `starverse jobs ls`; `kubectl get jobs -n {ns}`",
                ) from None
            if relaunch:
                return self._relaunch(job_id, run_dir, record, kind, ns)
            return self._gone(job_id, run_dir, record)
        gang = self._gang(obj, kind, ns)
        job = self._job_from(obj, pods, gang)
        if not job.state.finished and kind == "job" and len(job.nodes) < job.spec.nodes:
            job = self._why_no_pods(job, ns)  # short of pods: the group cannot start (or re-form)
        if cancelled and run_dir is not None and not job.state.finished:
            return self._gone(job_id, run_dir, record)  # foreground deletion still removing pods
        if relaunch and run_dir is not None:
            if job.restarts >= int(relaunch["attempt"]):  # another reader created it already
                record["relaunch"] = None
                write_json(run_dir / RECORD, record)
            else:  # the old attempt's pods are still stopping (checkpoint)
                return dataclasses.replace(job, state=JobState.PREEMPTED, reason=relaunch["reason"], finished=None)
        if run_dir is not None and recovers_in_cluster(obj):
            self._note_restarts(job, pods, run_dir, record)
        if job.state is JobState.FAILED and run_dir is not None and not cancelled:
            final = record.get("final")
            if isinstance(final, dict) and final.get("state") == JobState.FAILED.value:
                job = dataclasses.replace(job, reason=final.get("reason") or job.reason)  # judged once already
            elif recovers_in_cluster(obj):
                job = self._judge_final(job, obj, pods, kind, ns, gang)
            else:
                job = self._after_failure(job, obj, pods, run_dir, record, kind, ns)
        if job.state.finished and run_dir is not None and not record.get("final"):
            record["final"] = job.to_json()
            write_json(run_dir / RECORD, record)
        return job

    def _why_no_pods(self, job: Job, ns: str) -> Job:
        """A job short of pods: the Job controller's newest ``FailedCreate`` event says why
        (a ResourceQuota, a missing PriorityClass, Pod Security), with what to do."""
        try:
            with self.api.errors("list", f"events of {job.id!r}", ns):
                events = self.api.events(ns, job.id)
        except StarverseError:
            return job  # events are a courtesy: a Role without them still shows the job
        failed = [e for e in events if e.get("reason") == "FailedCreate"]
        if not failed:
            return job
        message = str(failed[-1].get("message") or "")
        reason = f"FailedCreate: {message}; {failed_create_hint(message, ns)}"
        return dataclasses.replace(job, state=JobState.PENDING, reason=reason)  # the rendezvous waits for all

    # -- restarts the cluster made (Job, JobSet, TrainJob, PyTorchJob): watched and reported --
    def _note_restarts(self, job: Job, pods: WireList, run_dir: Path, record: dict[str, Any]) -> None:
        """A restart event (kind, cause, lost steps and money) for every pod the cluster replaced,
        once each: the run folder's record of what the cluster did, by whoever reads the job."""
        seen = set(record.get("seen_pods") or [])
        new = [(name, end) for name, end in pod_restarts(pods) if name not in seen]
        if not new:
            return
        per_second, currency = self._rate(job.spec)
        events = list(record.get("events") or [])
        for name, end in new:
            event = lost_work(
                RunPaths(run_dir),
                attempt=len(seen),
                started=job.started or job.created,
                when=end.time or time.time(),
                per_second=per_second,
                currency=currency,
            )
            events.append(dataclasses.replace(event, kind=end.kind, cause=end.cause, action="resumed").to_json())
            seen.add(name)
        record["events"], record["seen_pods"] = events, sorted(seen)
        write_json(run_dir / RECORD, record)

    def _gang(self, obj: dict[str, Any], kind: str, ns: str) -> dict[str, Any] | None:
        """The JobSet that restarts this job's gang: a JobSet itself, a TrainJob's (one GET: the
        Trainer controller made it from the job's runtime, under the same name); else None."""
        if kind == "jobset":
            return obj
        if kind != "trainjob" or not recovers_in_cluster(obj):
            return None
        name = (obj.get("metadata") or {}).get("name", "")
        try:
            with self.api.errors("read", f"the JobSet of {name!r}", ns):
                return self.api.get_main("jobset", name, ns)
        except NotFoundError:  # not made yet, or gone after its TTL
            return None

    def _judge_final(
        self, job: Job, obj: dict[str, Any], pods: WireList, kind: str, ns: str, gang: dict[str, Any] | None = None
    ) -> Job:
        """A job the cluster gave up on: say what ended it and which limit was spent."""
        jobs: WireList = [obj] if kind == "job" else []
        if kind in ("jobset", "trainjob"):  # the child Jobs carry the pod failure policy's verdict
            with self.api.errors("list", f"jobs of {job.id!r}", ns):
                jobs = self.api.list_main("job", ns, self._selector(job.id))
        end = attempt_end(jobs, current_pods(pods)) or AttemptEnd("failed", job.reason or "the job failed")
        if end.kind == "usage":
            return dataclasses.replace(job, reason=f"usage: {end.cause}")
        if end.kind == "preempted":  # a node past its budget (the pod command's BUDGET_EXIT)
            limit = f"preemption budget {self.preempt_restarts} per node used"
        elif kind == "job":
            limit = f"backoffLimitPerIndex={job.spec.max_restarts}"
        elif gang is not None:
            most = ((gang.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts", 0)
            limit = f"the JobSet's failurePolicy.maxRestarts={most}"
        else:
            limit = "the restart limit"
        return dataclasses.replace(
            job, reason=f"{end.kind}: {end.cause}; no restarts left ({limit}, {job.restarts} restarts made)"
        )

    # -- whole-group restarts by the backend (a TrainJob on a ClusterTrainingRuntime) -------
    def _after_failure(
        self,
        job: Job,
        obj: dict[str, Any],
        pods: WireList,
        run_dir: Path,
        record: dict[str, Any],
        kind: str,
        ns: str,
    ) -> Job:
        """A failed attempt: relaunch it (``preempted``) when its budget allows, else say why it is final."""
        jobs: WireList = [obj] if kind == "job" else []
        if kind == "jobset":  # its child Jobs carry the failure policy's verdict
            with self.api.errors("list", f"jobs of {job.id!r}", ns):
                jobs = self.api.list_main("job", ns, self._selector(job.id))
        end = attempt_end(jobs, pods) or AttemptEnd("failed", job.reason or "the job failed")
        budget = budget_of(obj)
        limits = {"max_restarts": job.spec.max_restarts, "preempt_restarts": self.preempt_restarts}
        now = time.time()
        per_second, currency = self._rate(job.spec)
        event = lost_work(
            RunPaths(run_dir),
            attempt=budget.restarts,
            started=job.started or job.created,
            when=end.time or now,
            per_second=per_second,
            currency=currency,
        )
        event = dataclasses.replace(event, kind=end.kind, cause=end.cause)
        again = end.kind != "usage" and budget.allows(end.kind, **limits)
        head = f"{end.kind}: {end.cause}; {event.lost_text()}"
        record["events"] = [
            *record.get("events", []),
            dataclasses.replace(event, action="resumed" if again else "final").to_json(),
        ]
        if not again:
            why = "" if end.kind == "usage" else f"; no restarts left ({budget.limit_text(end.kind, **limits)})"
            write_json(run_dir / RECORD, record)
            return dataclasses.replace(job, reason=f"{head}{why}")
        after = budget.after(end.kind)
        resume_at = (event.checkpoint_step + 1) if event.checkpoint_step is not None else 0
        reason = f"{head}; resuming from step {resume_at} (restart {after.restarts})"
        record["relaunch"] = {
            "attempt": after.restarts,
            "preemptions": after.preemptions,
            "reason": reason,
            "time": now,
        }
        write_json(run_dir / RECORD, record)
        try:  # foreground: the object goes only once its pods stopped (and checkpointed)
            with self.api.errors("delete", f"job {job.id!r}", ns):
                self.api.delete_main(kind, job.id, ns)
        except NotFoundError:
            pass
        except StarverseError as e:  # e.g. RBAC forbids delete: the attempt stays failed, saying why
            record["relaunch"] = None
            write_json(run_dir / RECORD, record)
            return dataclasses.replace(job, reason=f"{head}; could not relaunch: {e.message}")
        return dataclasses.replace(job, state=JobState.PREEMPTED, reason=reason, finished=None)

    def _rate(self, spec: JobSpec) -> tuple[Decimal | None, str | None]:
        """The whole job's rate per second and its currency, when the job has a priced budget."""
        if spec.budget is None:
            return None, None
        from jupyter_starverse.costs import cap_env, load_price_table

        table = load_price_table(self.settings)
        try:
            return Decimal(cap_env(spec, table)["STARVERSE_COST_PER_SECOND"]), table.currency
        except (BadInputError, KeyError):
            return None, None

    def _relaunch(self, job_id: str, run_dir: Path, record: dict[str, Any], kind: str, ns: str) -> Job:
        """The failed attempt is gone: create attempt N + 1 under the same name (it resumes)."""
        relaunch = dict(record["relaunch"])
        attempt = int(relaunch["attempt"])
        spec = JobSpec.from_json(record["spec"])
        _, objects = self.plan(
            spec, job_id=job_id, namespace=ns, attempt=attempt, preemptions=int(relaunch["preemptions"])
        )
        archive_attempt(RunPaths(run_dir), attempt - 1)
        try:
            created = self._create(job_id, objects, ns, kind)
        except ConflictError:  # another reader relaunched it a moment ago
            created = None
        record["relaunch"] = None
        write_json(run_dir / RECORD, record)
        if created is None:
            return self.get(job_id)
        job = self._job_from(created, [])
        return dataclasses.replace(job, state=JobState.RESUMING, reason=relaunch["reason"])

    def _gone(self, job_id: str, run_dir: Path, record: dict[str, Any]) -> Job:
        """A job whose objects are gone (cancelled, or removed after its TTL): from the record."""
        spec = JobSpec.from_json(record["spec"])
        cancel = read_json(run_dir / "cancel.json")
        final = record.get("final") or {}
        if cancel:
            state, reason, finished = JobState.CANCELLED, cancel.get("reason"), cancel.get("time")
        elif final:
            state, reason, finished = JobState(final["state"]), final.get("reason"), final.get("finished")
        else:
            state, reason, finished = JobState.FAILED, "its Kubernetes objects were deleted", None
        return Job(
            job_id,
            self.name,
            spec,
            state,
            str(run_dir),
            float(record.get("created", 0.0)),
            started=final.get("started"),
            finished=finished,
            reason=reason,
            restarts=int(final.get("restarts") or 0),
        )

    def list(self) -> list[Job]:
        ns = self.conn.namespace
        with self.api.errors("list", "jobs", ns):
            objs = self.api.list_main(self.kind, ns, f"{LABEL_MANAGED}={MANAGER},{LABEL_ROLE}=node")
            pods, _ = self.api.pods(ns, self._selector())
            # a TrainJob's gang restarts are its JobSet's (made from its runtime, same labels)
            sets = self.api.list_main("jobset", ns, self._selector()) if self.kind == "trainjob" else []
        by_job: dict[str, WireList] = {}
        for pod in pods:
            by_job.setdefault((pod["metadata"].get("labels") or {}).get(LABEL_JOB, ""), []).append(pod)
        gangs = {js["metadata"]["name"]: js for js in sets}
        if self.kind == "jobset":
            gangs = {o["metadata"]["name"]: o for o in objs}
        jobs = [
            self._job_from(o, by_job.get(o["metadata"]["name"], []), gangs.get(o["metadata"]["name"]))
            for o in objs
            if ANNOTATION_SPEC in (o["metadata"].get("annotations") or {})
        ]
        # a failed attempt may be relaunched: the full read decides (and acts, as any reader does)
        jobs = [self.get(j.id) if j.state is JobState.FAILED else j for j in jobs]
        return sorted(jobs, key=lambda j: (j.created, j.id), reverse=True)

    # -- watching -------------------------------------------------------------------
    def watch_job(self, job_id: str, *, timeout: float | None = None) -> Iterator[Job]:
        """The job now, then again on every change of its pods, until it finished or ``timeout``."""
        return watch_job(
            self.api, self.get, job_id, namespace=self.conn.namespace, selector=self._selector(job_id), timeout=timeout
        )

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        last = None
        for job in self.watch_job(job_id, timeout=timeout):
            last = job
        assert last is not None
        return last

    # -- logs -----------------------------------------------------------------------
    def logs(self, job_id: str, *, follow: bool = False, rank: int | None = None) -> Iterator[LogLine]:
        job = self.get(job_id)
        run_dir = Path(job.experiment_dir)
        ns, ppn = self.conn.namespace, job.spec.procs_per_node
        if follow:  # pods must have started before their logs can be followed
            told: set[tuple[int, str]] = set()
            for job in self.watch_job(job_id):
                for node in job.nodes:  # say why nothing prints yet (Unschedulable, ImagePullBackOff)
                    if node.state is JobState.PENDING and node.reason and (node.index, node.reason) not in told:
                        told.add((node.index, node.reason))
                        yield LogLine(node.index, None, f"pending: {node.reason}")
                if job.state.finished or (
                    job.nodes
                    and all(n.state is not JobState.PENDING for n in job.nodes)
                    and len(job.nodes) >= job.spec.nodes
                ):
                    break
        if not job.nodes or all(n.state is JobState.PENDING for n in job.nodes):
            yield from saved_logs(run_dir, procs_per_node=ppn, rank=rank)  # pods gone (or not started)
            yield from self._rank_files(job, False, rank, finished=lambda: True) or ()
            return
        streams = [
            PodStream(n.name, n.index, run_dir / "logs" / "pods" / f"{n.name}.node{n.index}.log")
            for n in job.nodes
            if n.state is not JobState.PENDING
        ]

        kind = self._record(job_id)[1].get("kind", self.kind)
        container = {"trainjob": TRAINER_NODE, "pytorchjob": "pytorch"}.get(kind, CONTAINER)

        def open_stream(pod: PodStream) -> Iterator[bytes]:
            return self.api.pod_log(pod.name, ns, follow=follow, container=container)

        pods_done = threading.Event()
        extra = self._rank_files(job, follow, rank, finished=pods_done.is_set)
        yield from fan_in(streams, open_stream, procs_per_node=ppn, rank=rank, extra=extra, pods_done=pods_done)

    def _rank_files(
        self, job: Job, follow: bool, rank: int | None, *, finished: Callable[[], bool]
    ) -> Iterator[LogLine] | None:
        """The rank logs the workers write into the run folder, when this machine sees it."""
        from jupyter_starverse.experiments import RunPaths
        from jupyter_starverse.watch import follow_logs

        run = RunPaths(Path(job.experiment_dir))
        if not run.logs.is_dir() or job.spec.command:
            return None
        lines = follow_logs(
            run,
            world_size=job.spec.world_size,
            nodes=job.spec.nodes,
            rank=rank,
            follow=follow,
            finished=finished,
        )
        return (line for line in lines if line.rank is not None)  # node lines come from the pods

    # -- cancel ---------------------------------------------------------------------
    def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.state.finished:
            return job
        run_dir, record = self._record(job_id)
        ns = record.get("namespace") or self.conn.namespace
        if run_dir is not None:
            write_json(run_dir / "cancel.json", {"time": time.time(), "reason": "cancelled by user"})
        with self.api.errors("delete", f"job {job_id!r}", ns):
            self.api.delete_main(record.get("kind", self.kind), job_id, ns)
        if run_dir is None:
            return Job(
                job.id,
                self.name,
                job.spec,
                JobState.CANCELLED,
                job.experiment_dir,
                job.created,
                started=job.started,
                finished=time.time(),
                reason="cancelled by user",
                nodes=job.nodes,
            )
        return self.get(job_id)

    # -- preemption drill ---------------------------------------------------------------
    def preempt(self, job_id: str, *, node: int | None = None) -> Job:
        """The drill: delete one node's pod with its grace period, as a provider's preemption would.

        The kubelet sends SIGTERM; the ranks checkpoint and exit 143, the pod failure policy ends the
        attempt, and the backend relaunches the whole group from that checkpoint
        (``preempted -> resuming -> running``). ``node`` defaults to the last one.
        """
        job = self.get(job_id)
        if not job.state.active or job.state is not JobState.RUNNING:
            raise ConflictError(
                f"job {job_id} is {job.state.value}: only a running job can be preempted",
                hint="run the drill while every node of the job runs (`starverse jobs show ID`)",
            )
        running = {n.index: n for n in job.nodes if n.state is JobState.RUNNING}
        if node is not None and not 0 <= node < job.spec.nodes:
            raise BadInputError(f"node {node} is not a node of {job_id} (0..{job.spec.nodes - 1})", field="node")
        target = running.get(node if node is not None else max(running, default=-1))
        if target is None:
            raise ConflictError(f"node {node} of {job_id} is not running", hint="pick a running node")
        _, record = self._record(job_id)
        ns = record.get("namespace") or self.conn.namespace
        with self.api.errors("delete", f"pod {target.name!r}", ns):
            self.api.delete_pod(target.name, ns, grace=self.grace)
        return self.get(job_id)


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
