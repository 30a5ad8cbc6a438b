"""Controllers of the test API server: scheduler + kubelet, Indexed Job, JobSet.

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
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ._store import BUILTIN, CRDS, Obj, Resource, Store

POD = next(r for r in BUILTIN if r.plural == "pods")
SERVICE = next(r for r in BUILTIN if r.plural == "services")
JOB = next(r for r in BUILTIN if r.plural == "jobs")
JOBSET = CRDS["jobset"]


@dataclass(frozen=True)
class PodPlan:
    """What a pod does once running: print ``lines`` over ``run_seconds``, then exit."""

    lines: tuple[str, ...] = ("hello",)
    exit_code: int = 0
    run_seconds: float = 0.05
    until: threading.Event | None = None  # when given, the pod also runs until the test sets it
    on_sigterm: int | None = 143  # exit code after SIGTERM (None: ignores it, SIGKILLed: 137)
    term_seconds: float = 0.05  # time from SIGTERM to that exit (the checkpoint)


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
        self._jobsets()
        self._jobs()
        self._pods()
        self._job_status()

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
            if want:
                self.store.mutate(JOBSET, ns, name, lambda o, t=want: _set_condition(o, t, t))

    # -- Job -> one pod per index --------------------------------------------------
    def _jobs(self) -> None:
        jobs, _ = self.store.list(JOB, None)
        pods, _ = self.store.list(POD, None)
        for job in jobs:
            spec, status = job["spec"], job.get("status", {})
            if spec.get("suspend") or _finished(job):
                continue
            ns = job["metadata"]["namespace"]
            mine = [p for p in pods if _owned_by(p, job)]
            done = _indexes(status.get("completedIndexes", ""))
            busy = {
                int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
                for p in mine
                if p["status"]["phase"] in ("Pending", "Running")
            }
            failed_idx = _indexes(status.get("failedIndexes", ""))
            for index in range(spec.get("completions", 1)):
                if index in done or index in busy or index in failed_idx:
                    continue
                self._create(POD, ns, self._pod_for(job, index))

    def _pod_for(self, job: Obj, index: int) -> Obj:
        name = job["metadata"]["name"]
        template = copy.deepcopy(job["spec"]["template"])
        meta = template.setdefault("metadata", {})
        meta["name"] = f"{name}-{index}-{uuid.uuid4().hex[:5]}"
        meta["labels"] = {
            **meta.get("labels", {}),
            "batch.kubernetes.io/job-name": name,
            "job-name": name,
            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        meta["annotations"] = {**meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(index)}
        meta["ownerReferences"] = [_owner(job)]
        pod_spec = template["spec"]
        if pod_spec.get("subdomain"):
            pod_spec["hostname"] = f"{name}-{index}"
        for c in pod_spec.get("containers", []):
            c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        template["status"] = {"phase": "Pending"}
        return dict(template)

    def _job_status(self) -> None:
        jobs, _ = self.store.list(JOB, None)
        pods, _ = self.store.list(POD, None)
        for job in jobs:
            if _finished(job):
                continue
            mine = [p for p in pods if _owned_by(p, job)]
            ns = job["metadata"]["namespace"]
            updated = self.store.mutate(JOB, ns, job["metadata"]["name"], lambda o, m=mine: _job_update(o, m))
            if updated is not None and any(
                c["type"] == "Failed" and c["status"] == "True" for c in updated["status"].get("conditions", [])
            ):  # a failed Job deletes its remaining pods: SIGTERM, each within its grace period
                for p in mine:
                    if p["status"]["phase"] in ("Pending", "Running"):
                        self.terminate(ns, p["metadata"]["name"])

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
        status.update(phase="Running", startTime=_now(), podIP="10.0.0.1")
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
                self.store.mutate(POD, ns, name, lambda o: _terminate_container(o, code))
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
            o["status"]["containerStatuses"][0]["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "finishedAt": _now(),
                }
            }
            o["status"]["containerStatuses"][0]["ready"] = False

        self.store.mutate(POD, ns, name, finish)

    def _create(self, res: Resource, ns: str, body: Obj) -> None:
        try:
            self.store.create(res, ns, body)
        except Exception:
            pass


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


def _job_update(job: Obj, pods: list[Obj]) -> None:
    spec, status = job["spec"], job.setdefault("status", {})
    if pods and "startTime" not in status:
        status["startTime"] = _now()
    index_of = {id(p): int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]) for p in pods}
    succeeded = {index_of[id(p)] for p in pods if p["status"]["phase"] == "Succeeded"}
    failed_pods = [p for p in pods if p["status"]["phase"] == "Failed"]
    per_index: dict[int, int] = {}
    for p in failed_pods:
        per_index[index_of[id(p)]] = per_index.get(index_of[id(p)], 0) + 1
    status["active"] = sum(p["status"]["phase"] in ("Pending", "Running") for p in pods)
    status["succeeded"], status["failed"] = len(succeeded), len(failed_pods)
    status["completedIndexes"] = _format_indexes(succeeded)
    for p in sorted(failed_pods, key=_finished_at):  # the first pod to end decides
        message, action = _policy_match(spec, p)
        if action == "FailJob":
            _set_condition(job, "Failed", "PodFailurePolicy", message)
            return
        if action == "Ignore":
            per_index[index_of[id(p)]] -= 1
    limit = spec.get("backoffLimitPerIndex")
    if limit is not None:
        bad = {i for i, n in per_index.items() if n > limit}
        status["failedIndexes"] = _format_indexes(bad)
        max_failed = spec.get("maxFailedIndexes")
        if max_failed is not None and len(bad) > max_failed:
            _set_condition(
                job,
                "Failed",
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
            )
            return
        if bad and status["active"] == 0:
            _set_condition(job, "Failed", "FailedIndexes", "Job has failed indexes")
            return
    elif len(failed_pods) > spec.get("backoffLimit", 6):
        _set_condition(job, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        return
    if len(succeeded) >= spec.get("completions", 1):
        status["completionTime"] = _now()
        _set_condition(job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods")


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


def _terminate_container(pod: Obj, code: int) -> None:
    pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
    state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": _now()}}
    for cs in pod["status"].get("containerStatuses", []):
        cs["state"], cs["ready"] = state, False
