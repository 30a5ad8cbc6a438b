"""Controllers of the test API server: scheduler + kubelet, Indexed Job, JobSet, Kubeflow Trainer,
the training-operator's PyTorchJob.

They run in one background thread and reconcile every ``tick`` seconds, the way the real
controllers react to watch events. Pods move Pending -> Running -> Succeeded/Failed; a pod
whose node selector, tolerations or GPU request fit no node stays Pending with an
``Unschedulable`` condition; an image in ``unpullable_images`` waits in ``ImagePullBackOff``.
What a running pod prints and how it exits comes from a :class:`PodPlan`.

Terminations are modelled as the kubelet does them: a pod deleted with a grace period (or
evicted: :meth:`Controllers.terminate` with a ``DisruptionTarget`` condition), or a pod of a Job
that failed, gets SIGTERM and ends after ``PodPlan.term_seconds`` with ``PodPlan.on_sigterm``
(143: what the runtime exits with after its checkpoint). The Job controller applies the pod
failure policy to the pod that ended first (``onExitCodes``, ``onPodConditions``) with the real
controller's messages, honours ``backoffLimitPerIndex`` / ``maxFailedIndexes``, and terminates
the remaining pods of a failed Job.
"""

from __future__ import annotations

import copy
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ._store import BUILTIN, CRDS, ApiError, Obj, Resource, Store

POD = next(r for r in BUILTIN if r.plural == "pods")
SERVICE = next(r for r in BUILTIN if r.plural == "services")
JOB = next(r for r in BUILTIN if r.plural == "jobs")
EVENT = next(r for r in BUILTIN if r.plural == "events")
JOBSET = CRDS["jobset"]
TRAINJOB = CRDS["trainjob"]
PYTORCHJOB = CRDS["pytorchjob"]


@dataclass(frozen=True)
class PodPlan:
    """What a pod does once running: print ``lines`` over ``run_seconds``, then exit."""

    lines: tuple[str, ...] = ("hello",)
    exit_code: int = 0
    run_seconds: float = 0.05
    until: threading.Event | None = None  # when given, the pod also runs until the test sets it
    on_sigterm: int | None = 143  # exit code after SIGTERM (None: ignores it, SIGKILLed: 137)
    term_seconds: float = 0.05  # time from SIGTERM to that exit (the checkpoint)
    message: str = ""  # what the container wrote to /dev/termination-log (copied into its status)


@dataclass(frozen=True)
class Node:
    """A schedulable node: labels, ``NoSchedule`` taints and GPU capacity."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str], ...] = ()  # (key, value)
    gpus: int = 0
    gpu_resource: str = "nvidia.com/gpu"


def default_plan(pod: Obj) -> PodPlan:
    return PodPlan(lines=(f"hello from {pod['metadata']['name']}",))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _owner(obj: Obj) -> Obj:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owned_by(obj: Obj, owner: Obj) -> bool:
    return any(o.get("uid") == owner["metadata"]["uid"] for o in obj["metadata"].get("ownerReferences") or [])


@dataclass
class _PodRun:
    plan: PodPlan
    started: float = 0.0
    emitted: int = 0
    sigterm_at: float | None = None  # monotonic time of the SIGTERM


class Controllers:
    """Scheduler, kubelet, Job and JobSet controllers over one :class:`Store`."""

    def __init__(self, store: Store, *, tick: float = 0.02) -> None:
        self.store = store
        self.tick = tick
        self.plan: Callable[[Obj], PodPlan] = default_plan
        self.nodes: list[Node] | None = None  # None: every pod fits somewhere
        self.unpullable_images: set[str] = set()
        self.logs: dict[tuple[str, str], list[str]] = {}
        self._runs: dict[str, _PodRun] = {}
        self.errors: list[str] = []
        #: pod admission (the server's): a pod the Job controller creates passes it as a client's does
        self.admit: Callable[[str, Obj], None] | None = None
        self.create_retry = 0.2  # seconds before a refused pod creation is tried again
        self._ips = 0  # pods get 10.0.<n>: a recreated pod gets a new address, as on a cluster
        self._judged: dict[str, dict[str, str]] = {}  # job uid -> failed pod uid -> the policy's action
        self._retry_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="k8s-controllers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                self.reconcile()
            except Exception as exc:
                self.errors.append(repr(exc))

    def terminate(self, namespace: str, name: str, *, disruption: tuple[str, str] | None = None) -> None:
        """SIGTERM a running pod (a graceful delete); ``disruption``: (reason, message) of an eviction
        or preemption, recorded as the ``DisruptionTarget`` condition first, as the control plane does."""
        pod = self.store.get(POD, namespace, name)
        run = self._runs.get(pod["metadata"]["uid"])
        if run is not None and run.sigterm_at is None:
            run.sigterm_at = time.monotonic()

        def mark(o: Obj) -> None:
            o["metadata"].setdefault("deletionTimestamp", _now())
            if disruption is not None:
                reason, message = disruption
                o["status"].setdefault("conditions", []).append(
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": _now(),
                    }
                )

        self.store.mutate(POD, namespace, name, mark)

    def reconcile(self) -> None:
        self._pytorchjobs()
        self._trainjobs()
        self._jobsets()
        self._jobs()
        self._pods()

    # -- Kubeflow training-operator v1: PyTorchJob -> pods ------------------------------
    def _pytorchjobs(self) -> None:
        """The training-operator's PyTorchJob controller (v1.9: kubeflow/training-operator
        ``pkg/controller.v1/common/{job,pod}.go``, ``pkg/core/job.go``, ``pytorch/envvar.go``;
        https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/), per job:

        - ``runPolicy.backoffLimit`` first: the job fails ("has reached the specified backoff limit")
          when a new pod failure came while not all replicas are active and ``NumRequeues + 1 >
          backoffLimit`` (the operator's work queue always answers 0 requeues: only a limit of 0
          fires), or when the container ``restartCount``s of the running pods reach it
          (``PastBackoffLimit``; 0 for the ``Never`` pods an ``ExitCode`` replica gets);
        - each Failed pod: with ``restartPolicy: ExitCode`` a retryable exit code (128 and up,
          ``IsRetryableExitCode``) deletes the pod (it is recreated under its name, a
          ``PyTorchJobRestarting`` event and a ``Restarting`` condition), a permanent one (1-127)
          fails the job (``job "<name>" is failing because "<Type>" replica(s) failed.``);
          ``OnFailure``/``Always`` restart it too, ``Never`` fails the job;
        - every missing replica pod ``<job>-<type>-<index>`` is created from its template, with
          ``restartPolicy: Never`` for ``ExitCode``, the ``training.kubeflow.org/*`` labels and
          ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``/``PET_NODE_RANK``/
          ``PET_NPROC_PER_NODE``/``PET_NNODES``; it passes pod admission (``FailedCreate`` otherwise);
        - the job succeeds when its Master succeeded; once it ended, ``cleanPodPolicy`` ``Running``
          (``All``) stops its running (all) pods, ``None`` leaves them.
        """
        for pj in self.store.list(PYTORCHJOB, None)[0]:
            ns, name = pj["metadata"]["namespace"], pj["metadata"]["name"]
            mine = [p for p in self.store.list(POD, ns)[0] if _owned_by(p, pj)]
            if _finished(pj) or _condition(pj, "Succeeded") is not None:
                self._clean_pods(pj, mine)
                continue
            replicas = pj["spec"]["pytorchReplicaSpecs"]
            run_policy = pj["spec"].get("runPolicy") or {}
            total = sum(int(r.get("replicas", 1)) for r in replicas.values())
            failed = [p for p in mine if p["status"]["phase"] == "Failed"]
            active = [p for p in mine if p["status"]["phase"] in ("Pending", "Running")]
            limit = run_policy.get("backoffLimit")
            before = sum(
                int(st.get("failed") or 0) for st in ((pj.get("status") or {}).get("replicaStatuses") or {}).values()
            )
            if limit is not None:
                exceeds = len(failed) > before and len(active) != total and 0 + 1 > int(limit)
                restarted = sum(
                    int(cs.get("restartCount") or 0)
                    for p in active
                    if p["status"]["phase"] == "Running"
                    for cs in p["status"].get("containerStatuses") or []
                )
                past = restarted > 0 if int(limit) == 0 else restarted >= int(limit)
                if exceeds or past:
                    msg = f"Job {name} has failed because it has reached the specified backoff limit"
                    self._pytorch_condition(pj, "Failed", "PyTorchJobFailed", msg)
                    continue
            verdict: tuple[str, str] | None = None
            counts: dict[str, int] = {}
            gone: set[str] = set()
            for pod in failed:
                rtype = _replica_type(pod)
                counts[rtype] = counts.get(rtype, 0) + 1
                policy = (replicas.get(rtype) or {}).get("restartPolicy", "Never")
                code = _exit_code(pod) or 0
                if (policy == "ExitCode" and code >= 128) or policy in ("OnFailure", "Always"):
                    self.store.delete(POD, ns, pod["metadata"]["name"], "Background", {r.plural: r for r in BUILTIN})
                    gone.add(pod["metadata"]["name"])
                    msg = f"job {name} is restarting because {rtype} replica(s) failed."
                    self.event(pj, "Warning", "PyTorchJobRestarting", msg, component="pytorchjob-controller")
                    self._pytorch_condition(pj, "Restarting", "PyTorchJobRestarting", msg)
                elif verdict is None:
                    verdict = ("PyTorchJobFailed", f'job "{name}" is failing because "{rtype}" replica(s) failed.')
            self.store.mutate(
                PYTORCHJOB,
                ns,
                name,
                lambda o, c=counts: o.setdefault("status", {}).update(
                    replicaStatuses={t: {"failed": c.get(t, 0)} for t in replicas}
                ),
            )
            if verdict is not None:
                self._pytorch_condition(pj, "Failed", *verdict)
                continue
            master = [p for p in mine if _replica_type(p) == "Master" and p["status"]["phase"] == "Succeeded"]
            if "Master" in replicas and master:
                self._pytorch_condition(
                    pj, "Succeeded", "PyTorchJobSucceeded", f"PyTorchJob {name} is successfully completed."
                )
                continue
            self._pytorch_pods(pj, {p["metadata"]["name"] for p in mine} - gone, total)

    def _pytorch_condition(self, pj: Obj, type_: str, reason: str, message: str) -> None:
        def put(o: Obj) -> None:
            conds = o.setdefault("status", {}).setdefault("conditions", [])
            conds[:] = [c for c in conds if c["type"] != type_]
            conds.append(
                {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": _now()}
            )

        meta = pj["metadata"]
        self.store.mutate(PYTORCHJOB, meta["namespace"], meta["name"], put)

    def _pytorch_pods(self, pj: Obj, have: set[str], total: int) -> None:
        meta, spec = pj["metadata"], pj["spec"]
        ns, name = meta["namespace"], meta["name"]
        uid = meta["uid"]
        if time.monotonic() < self._retry_at.get(uid, 0.0):
            return
        for rtype, rs in spec["pytorchReplicaSpecs"].items():
            for index in range(int(rs.get("replicas", 1))):
                pod_name = f"{name}-{rtype.lower()}-{index}"
                if pod_name in have:
                    continue
                template = copy.deepcopy(rs["template"])
                pmeta = template.setdefault("metadata", {})
                pmeta["name"] = pod_name
                pmeta["labels"] = {
                    **(pmeta.get("labels") or {}),
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    "training.kubeflow.org/replica-type": rtype.lower(),
                    "training.kubeflow.org/replica-index": str(index),
                    **({"training.kubeflow.org/job-role": "master"} if rtype == "Master" else {}),
                }
                pmeta["ownerReferences"] = [_owner(pj)]
                if rs.get("restartPolicy") == "ExitCode":
                    template["spec"]["restartPolicy"] = "Never"
                else:
                    template["spec"]["restartPolicy"] = rs.get("restartPolicy", "Never")
                rank = index + (1 if rtype == "Worker" else 0)
                nproc = spec.get("nprocPerNode")
                env = [
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                    {"name": "MASTER_PORT", "value": "23456"},
                    {"name": "MASTER_ADDR", "value": f"{name}-master-0"},
                    {"name": "WORLD_SIZE", "value": str(total * int(nproc or 1))},
                    {"name": "RANK", "value": str(rank)},
                    {"name": "PET_NODE_RANK", "value": str(rank)},
                    *([{"name": "PET_NPROC_PER_NODE", "value": str(nproc)}] if nproc is not None else []),
                    {"name": "PET_NNODES", "value": str(total)},
                ]
                for c in template["spec"].get("containers") or []:
                    c["env"] = [*(c.get("env") or []), *env]
                template["status"] = {"phase": "Pending"}
                try:
                    if self.admit is not None:
                        self.admit(ns, template)
                    self.store.create(POD, ns, template)
                except ApiError as err:
                    self.event(
                        pj,
                        "Warning",
                        "FailedCreate",
                        f"Error creating: {err.message}",
                        component="pytorchjob-controller",
                    )
                    self._retry_at[uid] = time.monotonic() + self.create_retry
                    return

    def _clean_pods(self, pj: Obj, mine: list[Obj]) -> None:
        policy = (pj["spec"].get("runPolicy") or {}).get("cleanPodPolicy", "None")
        for pod in mine:
            running = pod["status"]["phase"] in ("Pending", "Running")
            if (policy == "Running" and running) or (policy == "All" and running):
                if not pod["metadata"].get("deletionTimestamp"):
                    self.terminate(pod["metadata"]["namespace"], pod["metadata"]["name"])

    # -- Kubeflow Trainer: TrainJob -> JobSet from its runtime ------------------------
    def _trainjobs(self) -> None:
        """Kubeflow Trainer's TrainJob controller, as its runtime guide documents it
        (https://www.kubeflow.org/docs/components/trainer/operator-guides/runtime/) and
        kubeflow/trainer ``pkg/runtime/framework/plugins/{jobset,torch}`` implement it: a TrainJob
        without a JobSet gets one (same name and namespace, owned by it) built from its runtime's
        ``spec.template`` (:func:`trainer_jobset`); then the TrainJob's ``Complete`` / ``Failed``
        condition follows the JobSet's ``Completed`` / ``Failed`` (``JobSet.Status``). Restarts
        are the JobSet's and the Job controller's (no TrainJob-level retry exists)."""
        for tj in self.store.list(TRAINJOB, None)[0]:
            if _finished(tj):
                continue
            ns, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
            try:
                js = self.store.get(JOBSET, ns, name)
            except ApiError:
                runtime = _runtime_of(self.store, tj)
                if runtime is not None:
                    self._create(JOBSET, ns, trainer_jobset(tj, runtime))
                continue
            for js_type, tj_type in (("Completed", "Complete"), ("Failed", "Failed")):
                cond = _condition(js, js_type)
                if cond is not None:
                    self.store.mutate(
                        TRAINJOB,
                        ns,
                        name,
                        lambda o, t=tj_type, c=cond: _set_condition(o, t, c.get("reason") or t, c.get("message") or ""),
                    )
                    break

    # -- JobSet -> child Jobs + headless Service -----------------------------------
    def _jobsets(self) -> None:
        jobsets, _ = self.store.list(JOBSET, None)
        for js in jobsets:
            ns, name = js["metadata"]["namespace"], js["metadata"]["name"]
            children = [j for j in self.store.list(JOB, ns)[0] if _owned_by(j, js)]
            if not children:
                network = js["spec"].get("network") or {}
                subdomain = network.get("subdomain") or name
                if network.get("enableDNSHostnames", True):
                    self._create(
                        SERVICE,
                        ns,
                        {
                            "metadata": {"name": subdomain, "ownerReferences": [_owner(js)]},
                            "spec": {"clusterIP": "None", "selector": {"jobset.sigs.k8s.io/jobset-name": name}},
                        },
                    )
                for rj in js["spec"]["replicatedJobs"]:
                    for i in range(rj.get("replicas", 1)):
                        job = copy.deepcopy(rj["template"])
                        labels = {
                            "jobset.sigs.k8s.io/jobset-name": name,
                            "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                            "jobset.sigs.k8s.io/job-index": str(i),
                        }
                        meta = job.setdefault("metadata", {})
                        meta["name"] = f"{name}-{rj['name']}-{i}"
                        meta["labels"] = {**meta.get("labels", {}), **labels}
                        meta["ownerReferences"] = [_owner(js)]
                        pod_meta = job["spec"]["template"].setdefault("metadata", {})
                        pod_meta["labels"] = {**pod_meta.get("labels", {}), **labels}
                        job["spec"]["template"]["spec"]["subdomain"] = subdomain
                        self._create(JOB, ns, job)
                continue
            conds = [
                c["type"] for j in children for c in j.get("status", {}).get("conditions", []) if c["status"] == "True"
            ]
            want = "Failed" if "Failed" in conds else "Completed" if conds.count("Complete") == len(children) else None
            policy = js["spec"].get("failurePolicy") or {}
            restarts = int((js.get("status") or {}).get("restarts") or 0)
            if want == "Failed" and restarts < int(policy.get("maxRestarts") or 0):
                # failurePolicy (https://jobset.sigs.k8s.io/docs/concepts/#failure-policy): restartStrategy
                # Recreate deletes every child Job (and its pods) and creates them anew
                for child in children:
                    self.store.delete(JOB, ns, child["metadata"]["name"], "Background", {r.plural: r for r in BUILTIN})
                self.store.mutate(
                    JOBSET, ns, name, lambda o, n=restarts + 1: o.setdefault("status", {}).update(restarts=n)
                )
                continue
            if want:
                self.store.mutate(JOBSET, ns, name, lambda o, t=want: _set_condition(o, t, t))

    # -- Job controller -------------------------------------------------------------
    def _jobs(self) -> None:
        """The Job controller, as https://kubernetes.io/docs/concepts/workloads/controllers/job/
        documents it, for each unfinished Job:

        - it creates one pod per index not yet succeeded, failed or running (``Indexed``: the
          index in the ``batch.kubernetes.io/job-completion-index`` annotation and label, the
          hostname ``<job>-<index>``), at most ``parallelism`` at a time; a replacement only
          once the pod it replaces is terminal (``podReplacementPolicy: Failed``, the default
          with a ``podFailurePolicy``). Every pod passes admission (:meth:`KubeServer.admit_pod`):
          a refused one becomes a ``FailedCreate`` Warning event on the Job (``Error creating:
          <the API error>``), retried later, and the Job stays without pods;
        - each failed pod is judged once by the first matching ``podFailurePolicy`` rule
          (https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy):
          ``Ignore`` recreates it without counting, ``Count`` (and no match) counts it towards
          ``backoffLimit`` / ``backoffLimitPerIndex``, ``FailIndex`` fails its index, ``FailJob``
          fails the Job;
        - ``backoffLimitPerIndex``
          (https://kubernetes.io/docs/concepts/workloads/controllers/job/#backoff-limit-per-index):
          an index whose counted failures exceed it is failed (``status.failedIndexes``), the others
          run on; the failures of an index travel on its pods in the
          ``batch.kubernetes.io/job-index-failure-count`` annotation (and the ignored ones in
          ``...-ignored-failure-count``); more failed indexes than ``maxFailedIndexes`` fail the Job
          (``MaxFailedIndexesExceeded``), and failed indexes fail it once the rest are done
          (``FailedIndexes``); without it, more counted failures than ``backoffLimit`` (6 by default)
          fail it (``BackoffLimitExceeded``);
        - a Job that fails or succeeds first gets ``FailureTarget`` / ``SuccessCriteriaMet``, its
          running pods get SIGTERM, and only once none is left the terminal ``Failed`` /
          ``Complete`` condition (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions).

        Not modelled: the exponential back-off between recreations (10 s doubling up to 6 min on a
        real cluster): the test server recreates at once.
        """
        jobs, _ = self.store.list(JOB, None)
        pods, _ = self.store.list(POD, None)
        for job in jobs:
            if job["spec"].get("suspend") or _finished(job):
                continue
            ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
            mine = [p for p in pods if _owned_by(p, job)]
            seen = self._judged.setdefault(job["metadata"]["uid"], {})
            job = self.store.mutate(JOB, ns, name, lambda o, m=mine, s=seen: _account(o, m, s))
            if job is None:
                continue
            active = [p for p in mine if p["status"]["phase"] in ("Pending", "Running")]
            target = _condition(job, "FailureTarget") or _condition(job, "SuccessCriteriaMet")
            if target is not None:
                for p in active:
                    if not p["metadata"].get("deletionTimestamp"):
                        self.terminate(ns, p["metadata"]["name"])
                if not active:
                    self.store.mutate(JOB, ns, name, _terminal)
                continue
            self._create_pods(job, mine, active, seen)

    def _create_pods(self, job: Obj, mine: list[Obj], active: list[Obj], judged: dict[str, str]) -> None:
        spec, status = job["spec"], job.get("status") or {}
        uid = job["metadata"]["uid"]
        if time.monotonic() < self._retry_at.get(uid, 0.0):
            return
        done = _indexes(status.get("completedIndexes", ""))
        failed = _indexes(status.get("failedIndexes", ""))
        busy = {_index(p) for p in active}
        room = spec.get("parallelism", 1) - len(active)
        for index in range(spec.get("completions", 1)):
            if room <= 0:
                break
            if index in done or index in failed or index in busy:
                continue
            before = [p for p in mine if _index(p) == index and p["status"]["phase"] == "Failed"]
            pod = self._pod_for(job, index, before, judged)
            ns = job["metadata"]["namespace"]
            try:
                if self.admit is not None:
                    self.admit(ns, pod)
                self.store.create(POD, ns, pod)
            except ApiError as err:
                self.event(job, "Warning", "FailedCreate", f"Error creating: {err.message}")
                self._retry_at[uid] = time.monotonic() + self.create_retry
                return
            self.event(job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
            room -= 1

    def event(self, obj: Obj, type_: str, reason: str, message: str, component: str = "job-controller") -> None:
        """Record a core/v1 Event about ``obj``; a repeat of the same event bumps its ``count``."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "default")
        key = f"{meta['name']}.{uuid.uuid5(uuid.NAMESPACE_OID, meta['uid'] + reason + message).hex[:16]}"
        now = _now()

        def again(o: Obj) -> None:
            o["count"] = int(o.get("count", 1)) + 1
            o["lastTimestamp"] = now

        if self.store.mutate(EVENT, ns, key, again) is not None:
            return
        body = {
            "metadata": {"name": key},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": ns,
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": component},
        }
        self._create(EVENT, ns, body)

    def _pod_for(self, job: Obj, index: int, before: list[Obj], judged: dict[str, str]) -> Obj:
        name = job["metadata"]["name"]
        indexed = job["spec"].get("completionMode") == "Indexed"
        template = copy.deepcopy(job["spec"]["template"])
        meta = template.setdefault("metadata", {})
        meta["name"] = f"{name}-{index}-{uuid.uuid4().hex[:5]}" if indexed else f"{name}-{uuid.uuid4().hex[:5]}"
        meta["labels"] = {
            **meta.get("labels", {}),
            "batch.kubernetes.io/job-name": name,
            "job-name": name,
            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
        }
        annotations = {**meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(index)}
        if indexed:
            meta["labels"]["batch.kubernetes.io/job-completion-index"] = str(index)
        if job["spec"].get("backoffLimitPerIndex") is not None:
            # the failures of this index so far: the newest failed pod's count, plus it if it counted
            counts = [_failure_counts(p, judged) for p in before]
            failures = max((f + int(counted) for f, _, counted in counts), default=0)
            ignored = max((i + int(not counted) for _, i, counted in counts), default=0)
            annotations[FAILURE_COUNT] = str(failures)
            annotations[IGNORED_COUNT] = str(ignored)
        meta["annotations"] = annotations
        meta["ownerReferences"] = [_owner(job)]
        pod_spec = template["spec"]
        if indexed and pod_spec.get("subdomain"):
            pod_spec["hostname"] = f"{name}-{index}"
        if indexed:
            for c in pod_spec.get("containers", []):
                c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        template["status"] = {"phase": "Pending"}
        return dict(template)

    def fail(self, namespace: str, name: str, *, exit_code: int, disruption: str | None = None) -> None:
        """The kubelet's report of a pod that ended now (a test plays the kubelet)."""
        pod = self.store.get(POD, namespace, name)
        self._runs.pop(pod["metadata"]["uid"], None)

        def end(o: Obj) -> None:
            if disruption is not None:
                o["status"].setdefault("conditions", []).append(
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": disruption,
                        "message": f"{disruption}: the pod was disrupted",
                        "lastTransitionTime": _now(),
                    }
                )
            if not o["status"].get("containerStatuses"):
                o["status"]["containerStatuses"] = [
                    {"name": o["spec"]["containers"][0]["name"], "ready": False, "restartCount": 0, "state": {}}
                ]
            _terminate_container(o, exit_code)

        self.store.mutate(POD, namespace, name, end)

    # -- scheduler + kubelet -------------------------------------------------------
    def _pods(self) -> None:
        pods, _ = self.store.list(POD, None)
        for pod in pods:
            phase = pod["status"]["phase"]
            if phase in ("Succeeded", "Failed"):
                continue
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            if phase == "Pending":
                self.store.mutate(POD, ns, name, self._start_pod)
            else:
                self._run_pod(ns, name, pod)

    def _start_pod(self, pod: Obj) -> None:
        spec, status = pod["spec"], pod["status"]
        why = self._unschedulable(spec)
        if why:
            status["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}
            ]
            return
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        image = spec["containers"][0].get("image", "")
        cname = spec["containers"][0]["name"]
        if image in self.unpullable_images:
            status["containerStatuses"] = [
                {
                    "name": cname,
                    "image": image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
                    },
                }
            ]
            return
        self._ips += 1
        status.update(phase="Running", startTime=_now(), podIP=f"10.0.{self._ips // 250}.{self._ips % 250 + 1}")
        status["containerStatuses"] = [
            {
                "name": cname,
                "image": image,
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": _now()}},
            }
        ]
        self._runs[pod["metadata"]["uid"]] = _PodRun(self.plan(pod), time.monotonic())
        self.logs[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = []

    def _unschedulable(self, spec: Obj) -> str | None:
        if self.nodes is None:
            return None
        selector = spec.get("nodeSelector") or {}
        tolerated = {(t.get("key"), t.get("value")) for t in spec.get("tolerations") or []}
        tolerated_keys = {t.get("key") for t in spec.get("tolerations") or [] if t.get("operator") == "Exists"}
        for node in self.nodes:
            limits = spec["containers"][0].get("resources", {}).get("limits", {})
            gpus = int(limits.get(node.gpu_resource, 0))
            if (
                all(node.labels.get(k) == v for k, v in selector.items())
                and all(t in tolerated or t[0] in tolerated_keys for t in node.taints)
                and gpus <= node.gpus
            ):
                return None
        n = len(self.nodes)
        return f"0/{n} nodes are available: {n} node(s) didn't match Pod's node affinity/selector."

    def _run_pod(self, ns: str, name: str, pod: Obj) -> None:
        run = self._runs.get(pod["metadata"]["uid"])
        if run is None:
            return
        if run.sigterm_at is not None:
            if time.monotonic() - run.sigterm_at >= run.plan.term_seconds:
                code = run.plan.on_sigterm if run.plan.on_sigterm is not None else 137
                self.logs.setdefault((ns, name), []).append(f"SIGTERM: stopped (exit {code})")
                self.store.mutate(POD, ns, name, lambda o: _terminate_container(o, code, run.plan.message))
            return
        out = self.logs.setdefault((ns, name), [])
        with self.store.lock:
            if run.emitted < len(run.plan.lines):
                out.append(run.plan.lines[run.emitted])
                run.emitted += 1
                self.store.lock.notify_all()
                return
        if time.monotonic() - run.started < run.plan.run_seconds:
            return
        if run.plan.until is not None and not run.plan.until.is_set():
            return
        code = run.plan.exit_code

        def finish(o: Obj) -> None:
            o["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": _now()}
            if run.plan.message:
                term["message"] = run.plan.message
            o["status"]["containerStatuses"][0]["state"] = {"terminated": term}
            o["status"]["containerStatuses"][0]["ready"] = False

        self.store.mutate(POD, ns, name, finish)

    def _create(self, res: Resource, ns: str, body: Obj) -> None:
        try:
            self.store.create(res, ns, body)
        except Exception:
            pass


#: Kubeflow Trainer's constants (kubeflow/trainer ``pkg/constants/constants.go``)
TRAINER_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_NODE = "node"  # the trainer's replicated job and container
TRAINER_PORT = 29500  # ContainerTrainerPort


def _runtime_of(store: Store, tj: Obj) -> Obj | None:
    ref = tj["spec"].get("runtimeRef") or {}
    res = CRDS["trainingruntime" if ref.get("kind") == "TrainingRuntime" else "clustertrainingruntime"]
    try:
        return store.get(res, tj["metadata"]["namespace"] if res.namespaced else "", ref.get("name", ""))
    except ApiError:
        return None


def _upsert_env(container: Obj, env: list[Obj]) -> None:
    names = {e["name"] for e in env}
    container["env"] = [e for e in container.get("env") or [] if e["name"] not in names] + env


def trainer_jobset(tj: Obj, runtime: Obj) -> Obj:
    """The JobSet Kubeflow Trainer makes of a TrainJob and its runtime (``jobset.Build``,
    ``Builder.Trainer``, ``torch.EnforceMLPolicy``): the runtime's JobSet template as it is
    (``failurePolicy``, child Job specs with their ``podFailurePolicy``, pod templates), its
    template labels and annotations on the JobSet; in the replicated job labelled
    ``trainjob-ancestor-step: trainer``: ``replicas`` 1, ``parallelism`` = ``completions`` = the
    TrainJob's ``numNodes`` (else the runtime's ``mlPolicy.numNodes``, else 1), and in its ``node``
    container the trainer's ``image``/``command``/``args`` where set, its ``env`` upserted,
    ``resourcesPerNode`` as resources, and with ``mlPolicy.torch`` torchrun's ``PET_NNODES``,
    ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (the completion index), ``PET_MASTER_ADDR``
    (``<trainjob>-node-0-0.<trainjob>``) and ``PET_MASTER_PORT``."""
    name = tj["metadata"]["name"]
    template = copy.deepcopy(runtime["spec"].get("template") or {})
    policy = runtime["spec"].get("mlPolicy") or {}
    trainer = tj["spec"].get("trainer") or {}
    nodes = int(trainer.get("numNodes") or policy.get("numNodes") or 1)
    spec = template.get("spec") or {}
    for rj in spec.get("replicatedJobs") or []:
        labels = (rj["template"].get("metadata") or {}).get("labels") or {}
        if labels.get(TRAINER_ANCESTOR_LABEL) != "trainer":
            continue
        rj["replicas"] = 1
        job_spec = rj["template"]["spec"]
        job_spec["parallelism"] = job_spec["completions"] = nodes
        for c in job_spec["template"]["spec"]["containers"]:
            if c["name"] != TRAINER_NODE:
                continue
            for key in ("image", "command", "args"):
                if trainer.get(key) is not None:
                    c[key] = trainer[key]
            _upsert_env(c, list(trainer.get("env") or []))
            if trainer.get("resourcesPerNode") is not None:
                c["resources"] = trainer["resourcesPerNode"]
            if "torch" in policy:
                index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                _upsert_env(
                    c,
                    [
                        {"name": "PET_NNODES", "value": str(nodes)},
                        {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode") or "auto")},
                        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": index}}},
                        {"name": "PET_MASTER_ADDR", "value": f"{name}-{TRAINER_NODE}-0-0.{name}"},
                        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
                    ],
                )
    meta = template.get("metadata") or {}
    return {
        "apiVersion": JOBSET.api_version,
        "kind": JOBSET.kind,
        "metadata": {
            "name": name,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [_owner(tj)],
        },
        "spec": spec,
    }


def _replica_type(pod: Obj) -> str:
    """A PyTorchJob pod's replica type as the spec spells it (``Master``, ``Worker``)."""
    return str((pod["metadata"].get("labels") or {}).get("training.kubeflow.org/replica-type", "")).capitalize()


def _finished(obj: Obj) -> bool:
    return any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def _indexes(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _format_indexes(values: set[int]) -> str:
    return ",".join(str(i) for i in sorted(values))


def _set_condition(obj: Obj, type_: str, reason: str, message: str = "") -> None:
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    if not any(c["type"] == type_ for c in conds):
        conds.append(
            {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": _now()}
        )


def _exit_code(pod: Obj) -> int | None:
    for cs in pod["status"].get("containerStatuses", []):
        term = cs.get("state", {}).get("terminated")
        if term:
            return int(term["exitCode"])
    return None


FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
IGNORED_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"


def _index(pod: Obj) -> int:
    return int((pod["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index", 0))


def _failure_counts(pod: Obj, judged: dict[str, str]) -> tuple[int, int, bool]:
    """(failures before it, ignored failures before it, whether its own failure counted)."""
    annotations = pod["metadata"].get("annotations") or {}
    counted = judged.get(pod["metadata"]["uid"], "Count") != "Ignore"
    return int(annotations.get(FAILURE_COUNT, 0)), int(annotations.get(IGNORED_COUNT, 0)), counted


def _condition(job: Obj, type_: str) -> Obj | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c["type"] == type_ and c["status"] == "True":
            return dict(c)
    return None


def _terminal(job: Obj) -> None:
    """``FailureTarget`` -> ``Failed``, ``SuccessCriteriaMet`` -> ``Complete`` (no pod is left running)."""
    failure = _condition(job, "FailureTarget")
    if failure is not None:
        _set_condition(job, "Failed", failure["reason"], failure.get("message", ""))
        return
    success = _condition(job, "SuccessCriteriaMet")
    if success is not None:
        job["status"]["completionTime"] = _now()
        _set_condition(job, "Complete", success["reason"], success.get("message", ""))


def _account(job: Obj, pods: list[Obj], judged: dict[str, str]) -> None:
    """Count the Job's pods into its status and judge each newly failed pod once (see ``_jobs``)."""
    spec, status = job["spec"], job.setdefault("status", {})
    if pods and "startTime" not in status:
        status["startTime"] = _now()
    per_index = spec.get("backoffLimitPerIndex")
    backoff_limit = spec.get("backoffLimit", 2147483647 if per_index is not None else 6)
    succeeded = _indexes(status.get("completedIndexes", "")) | {
        _index(p) for p in pods if p["status"]["phase"] == "Succeeded"
    }
    failed_indexes = _indexes(status.get("failedIndexes", ""))
    status["active"] = sum(p["status"]["phase"] in ("Pending", "Running") for p in pods)
    status["succeeded"] = len(succeeded)
    status.setdefault("failed", 0)
    target: tuple[str, str] | None = None
    new = [p for p in pods if p["status"]["phase"] == "Failed" and p["metadata"]["uid"] not in judged]
    for p in sorted(new, key=_finished_at):
        message, action = _policy_match(spec, p)
        judged[p["metadata"]["uid"]] = action or "Count"  # the real controller keeps it in the pod's finalizer
        if action == "Ignore":
            continue
        status["failed"] += 1
        if action == "FailJob" and target is None:
            target = ("PodFailurePolicy", message)
        if per_index is not None:
            before, _, _ = _failure_counts(p, judged)
            if action == "FailIndex" or before + 1 > per_index:
                failed_indexes.add(_index(p))
    status["completedIndexes"] = _format_indexes(succeeded)
    if per_index is not None:
        status["failedIndexes"] = _format_indexes(failed_indexes)
    if _condition(job, "FailureTarget") or _condition(job, "SuccessCriteriaMet"):
        return
    completions = spec.get("completions", 1)
    max_failed = spec.get("maxFailedIndexes")
    if target is None and per_index is not None and max_failed is not None and len(failed_indexes) > max_failed:
        target = ("MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes")
    if target is None and status["failed"] > backoff_limit:
        target = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    if target is None and failed_indexes and len(succeeded | failed_indexes) >= completions:
        target = ("FailedIndexes", "Job has failed indexes")
    if target is not None:
        _set_condition(job, "FailureTarget", *target)
    elif len(succeeded) >= completions:
        _set_condition(job, "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")


def _finished_at(pod: Obj) -> str:
    for cs in pod["status"].get("containerStatuses", []):
        term = cs.get("state", {}).get("terminated")
        if term:
            return str(term.get("finishedAt") or "")
    return ""


def _policy_match(spec: Obj, pod: Obj) -> tuple[str, str | None]:
    """The first pod failure policy rule matching a failed pod: (controller's message, action)."""
    code = _exit_code(pod)
    meta = pod["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    conditions = {c["type"] for c in pod["status"].get("conditions", []) if c.get("status") == "True"}
    for index, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules", [])):
        rule_codes = rule.get("onExitCodes")
        if rule_codes and code is not None and (code in rule_codes["values"]) == (rule_codes["operator"] == "In"):
            container = pod["spec"]["containers"][0]["name"]
            message = (
                f"Container {container} for pod {where} failed with exit code {code}"
                f" matching {rule['action']} rule at index {index}"
            )
            return message, rule["action"]
        for pattern in rule.get("onPodConditions") or []:
            if pattern["type"] in conditions:
                return (
                    f"Pod {where} has condition {pattern['type']} matching {rule['action']} rule at index {index}",
                    rule["action"],
                )
    return "", None


def _terminate_container(pod: Obj, code: int, message: str = "") -> None:
    pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
    term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": _now()}
    if message:
        term["message"] = message
    state = {"terminated": term}
    for cs in pod["status"].get("containerStatuses", []):
        cs["state"], cs["ready"] = state, False


_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def container_env(pod: Obj, container: int = 0) -> dict[str, str]:
    """The environment the kubelet gives a container: ``value``s and downward-API ``fieldRef``s
    (https://kubernetes.io/docs/concepts/workloads/pods/downward-api/#downwardapi-fieldRef:
    ``metadata.name``, ``metadata.namespace``, ``metadata.uid``, ``metadata.labels['KEY']``,
    ``metadata.annotations['KEY']``; a key the pod lacks gives an empty value)."""
    meta = pod["metadata"]
    out: dict[str, str] = {}
    for var in pod["spec"]["containers"][container].get("env") or []:
        if "value" in var:
            out[var["name"]] = str(var["value"])
            continue
        path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
            out[var["name"]] = str(meta.get(path.split(".")[1], ""))
        elif path and (m := _FIELD.fullmatch(path)):
            out[var["name"]] = str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    return out


def resolve(store: Store, name: str, namespace: str = "default") -> list[str]:
    """The cluster DNS A records of ``<hostname>.<subdomain>`` (or its FQDN): the IP of every pod
    with that ``hostname`` and ``subdomain`` when a headless Service named as the subdomain
    exists in the namespace (https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/
    #pod-s-hostname-and-subdomain-fields). The record follows the Service's endpoints: a pod that
    ended (``Succeeded`` / ``Failed``) or has no IP is not one, and one not ready only with
    ``publishNotReadyAddresses`` (https://kubernetes.io/docs/concepts/services-networking/
    endpoint-slices/#conditions)."""
    hostname, _, rest = name.partition(".")
    subdomain = rest.split(".")[0]
    try:
        service = store.get(SERVICE, namespace, subdomain)
    except ApiError:
        return []
    spec = service.get("spec") or {}
    if spec.get("clusterIP") != "None":
        return []
    selector = spec.get("selector") or {}
    out = []
    for pod in store.list(POD, namespace)[0]:
        pspec, status = pod["spec"], pod.get("status") or {}
        labels = pod["metadata"].get("labels") or {}
        if pspec.get("hostname") != hostname or pspec.get("subdomain") != subdomain:
            continue
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        if status.get("phase") in ("Succeeded", "Failed") or not status.get("podIP"):
            continue
        ready = any(c.get("ready") for c in status.get("containerStatuses") or [])
        if ready or spec.get("publishNotReadyAddresses"):
            out.append(str(status["podIP"]))
    return out
