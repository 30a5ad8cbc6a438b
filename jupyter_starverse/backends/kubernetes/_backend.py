"""``KubernetesBackend``: the LaunchBackend contract on a cluster, with the official client.

The cluster is the job's truth (labels and the spec annotation); the run folder keeps the
code, a small record (``kubernetes.json``) and copies of the pod logs, so a job can be shown
after its objects are gone. Every call is synchronous: front doors run it in a thread.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from jupyter_starverse.backends._restarts import archive_attempt, lost_work
from jupyter_starverse.errors import (
    BadInputError,
    ConflictError,
    NotFoundError,
    StarverseError,
)
from jupyter_starverse.experiments import RunPaths, read_json, write_json
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, LogLine

from ._api import WireList
from ._core import RECORD, KubeCore, failed_create_hint
from ._inputs import (
    ANNOTATION_SPEC,
    CONTAINER,
    LABEL_JOB,
    LABEL_MANAGED,
    LABEL_ROLE,
    MANAGER,
)
from ._logs import PodStream, fan_in, saved_logs
from ._manifests import TRAINER_NODE
from ._restart import (
    AttemptEnd,
    attempt_end,
    budget_of,
    current_pods,
    pod_restarts,
    recovers_in_cluster,
)
from ._watch import watch_job

__all__ = ["RECORD", "KubernetesBackend"]


class KubernetesBackend(KubeCore):
    """Jobs as Kubernetes objects: :class:`KubeCore` (parameters, rendering, creation) plus the lifecycle.

    Submit, status with recovery in the client (relaunch after preemption or failure, the end of a
    gone job), list, watch and wait, logs (live or saved), cancel and preempt.
    """

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
