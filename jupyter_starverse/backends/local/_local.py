"""The embedded default backend: every node is a ``torchrun`` agent on this machine.

``submit`` validates, writes the run folder (``spec.json``, ``plan.json``, ``status.json``)
and starts a detached supervisor (``_supervisor``) that owns the agents. Everything else
reads the run folder, so any process (kernel, server, CLI) sees and controls the same jobs.

The experiments folder may be shared by several hosts (pods). On the supervisor's own host a
reader judges it by pid and start time and, when it died, stops the job's processes and marks
it failed at once; another host cannot see its pid, judges it only by the heartbeat in
``status.json`` (dead once older than ``STALE_BEATS`` beats plus ``STALE_MARGIN_S``) and cancels
by writing ``cancel.json``, which the supervisor acts on.

Many users may share the experiments root (docs/sharing.md). A reader acts on a run folder
(takes over a dead supervisor, marks it failed, stops processes) only when the folder, its
``spec.json`` and ``plan.json`` belong to the reader's own uid; anyone else's folder is read,
never changed. A take-over runs nothing a record says: the new supervisor's plan is rebuilt
from the owner's validated ``spec.json`` and handed to it on stdin. Only the owner (or root,
or a member of ``STARVERSE_ADMIN_GROUP``) may cancel or preempt a job.

This module reads, lists, cancels and preempts jobs and decides when a supervisor is gone (the
take-over included); checks, planning and ``submit`` are ``_launch``'s, starting a supervisor
process ``_spawn``'s, and the ownership, claim and billing records of a reader's act ``_recovery``'s.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from pathlib import Path

from jupyter_starverse._procs import ProcessRecord, alive, host_identity, job_processes, stop_pids
from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import check_owned, group_id
from jupyter_starverse.errors import BadInputError, ConflictError, PermissionDeniedError, StarverseError
from jupyter_starverse.experiments import (
    ExperimentPaths,
    RunPaths,
    RunStatus,
    find_run,
    latest_checkpoint,
    list_runs,
    read_json,
    read_record,
    read_status,
    trusted_record,
    write_json,
    write_status,
)
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, NodeStatus

from .._jobrecords import newest_first, run_job
from .._torchrun import LaunchPlan
from ._attempts import PREEMPT_RESTARTS
from ._launch import GRACE_S, LocalLauncher
from ._pool import PoolInfo, list_pools, stop_pools
from ._recovery import claim, closed_nodes, final_cost, owned_by_me, runs_folder, uid_of
from ._spawn import spawn_supervisor
from ._supstate import HEARTBEAT_S  # how often the supervisor of a new job stamps its heartbeat

__all__ = ["LocalBackend"]

STALE_BEATS = 3  # heartbeats a supervisor may miss before another host counts it dead ...
STALE_MARGIN_S = 15.0  # ... plus this margin (a slow shared file system, clocks a little apart)
STARTUP_GRACE_S = 60.0  # from submit to the supervisor's first heartbeat


class LocalBackend(LocalLauncher):
    """Local processes, one torchrun agent per node, gloo on CPU (parameters: :class:`~._launch.LocalLauncher`).

    Submitting and planning are :class:`~._launch.LocalLauncher`'s; this class reads jobs from their
    run folders (taking over or failing a job whose supervisor is gone), cancels and preempts them.
    """

    def _start_supervisor(self, run: RunPaths, sock: socket.socket | None, *, plan: LaunchPlan, spec: JobSpec) -> int:
        return start_supervisor(run, self.settings, sock, plan=plan, spec=spec, grace=self.grace,
                                preempt_restarts=self.preempt_restarts, secrets=True)  # fmt: skip

    def preempt(self, job_id: str, *, node: int | None = None) -> Job:
        """The preemption drill: the supervisor SIGTERMs the workers of ``node`` (default: the last).

        They checkpoint (with the backend's grace period before SIGKILL); the job goes
        ``preempted -> resuming -> running`` and resumes from that checkpoint.
        """
        run = self.run_paths(job_id)
        self._may_act(run, f"preempt job {job_id}")
        job = self.get(job_id)
        if not job.state.active:
            raise ConflictError(
                f"job {job_id} is {job.state.value}: only a running job can be preempted",
                hint="start a job (`starverse launch SCRIPT`) and run the drill while it trains",
            )
        if node is not None and not 0 <= node < job.spec.nodes:
            raise BadInputError(f"node {node} is not a node of {job_id} (0..{job.spec.nodes - 1})", field="node")
        by = {"host": host_identity().host, "pid": os.getpid(), "user": self.settings.user, "uid": os.geteuid()}
        self._request(run, run.preempt, {"node": node, "time": time.time(), "by": by})
        return self.get(job_id)

    # -- who may act ----------------------------------------------------------------
    @property
    def admin_gid(self) -> int | None:
        return group_id(self.settings.admin_group)

    def _may_act(self, run: RunPaths, action: str) -> None:
        """Only the job's owner, root or a member of ``STARVERSE_ADMIN_GROUP`` may change a job."""
        try:
            check_owned(run.root, action, self.admin_gid)
        except PermissionDeniedError as e:
            raise PermissionDeniedError(
                e.message,
                hint=f"only its owner can {action.split()[0]} it (or a member of STARVERSE_ADMIN_GROUP); "
                "ask them, or see `starverse jobs show` for who that is",
            ) from None

    def _request(self, run: RunPaths, path: Path, data: dict[str, object]) -> None:
        """Write a request the supervisor believes: ours, or an administrator's (given the admin group)."""
        me = os.geteuid()
        if me in (0, run.owner) or self.admin_gid is None:
            write_json(path, data)
        else:  # a member of the admin group: only its members can give a file that group
            write_json(path, data, gid=self.admin_gid, mode=0o644)

    # -- reading ------------------------------------------------------------------
    def _job(self, run: RunPaths) -> Job:
        try:
            spec = JobSpec.from_json(read_json(run.spec))
            status = read_status(run) or RunStatus(job_id=run.job_id)
        except PermissionError:
            raise PermissionDeniedError(
                f"cannot read job {run.job_id}: its run folder {run.root} belongs to uid {uid_of(run.root)}",
                hint="run folders are private unless the experiments root is shared with STARVERSE_SHARED_GROUP "
                "(docs/sharing.md)",
            ) from None
        except (OSError, ValueError) as e:
            raise BadInputError(
                f"job {run.job_id}: {run.spec} cannot be read ({e})", field="spec",
                hint="the run folder is damaged; its owner can remove it",
            ) from None  # fmt: skip
        if not status.finished_state:
            if owned_by_me(run):
                status = _fail_if_supervisor_gone(run, status, self.settings)
            else:
                status = _foreign_view(run, status)
        state, reason = status.state, status.reason
        nodes = tuple(
            NodeStatus(
                index=n.index,
                state=JobState(n.state),
                name=f"node{n.index}",
                pid=n.pid,
                exit_code=n.exit_code,
                reason=n.reason,
                started=n.started,
                finished=n.finished,
            )
            for n in status.nodes
        )
        return run_job(
            run,
            self.name,
            spec,
            JobState(state),
            created=status.created,
            started=status.started,
            finished=status.finished,
            reason=reason,
            nodes=nodes,
            restarts=status.restarts,
        )

    def run_paths(self, job_id: str) -> RunPaths:
        """The run folder of ``job_id``."""
        return find_run(self.settings.experiments, job_id)

    def get(self, job_id: str) -> Job:
        return self._job(self.run_paths(job_id))

    def list(self) -> list[Job]:
        # a half-written, malformed or unreadable folder is not a job (the index names it)
        skip = (StarverseError, OSError, ValueError, KeyError, TypeError, AttributeError)
        return newest_first(list_runs(self.settings.experiments), self._job, skip=skip)

    def run_of(self, job_id: str) -> RunPaths:
        return self.run_paths(job_id)

    def cancel(self, job_id: str, *, reason: str = "cancelled by user", timeout: float = 60.0) -> Job:
        run = self.run_paths(job_id)
        self._may_act(run, f"cancel job {job_id}")
        job = self.get(job_id)
        if job.state.finished:
            return job
        by = {"host": host_identity().host, "pid": os.getpid(), "user": self.settings.user, "uid": os.geteuid()}
        self._request(run, run.cancel, {"reason": reason, "time": time.time(), "by": by})
        status = read_status(run) or RunStatus(job_id=job_id)
        verdict = _supervisor_alive(run, status)
        if verdict is not True and os.geteuid() not in (0, run.owner):
            # an administrator can only ask: the owner's supervisor (or next look) acts on it
            return self.wait(job_id, timeout=timeout) if verdict is None else self.get(job_id)
        if verdict is None:
            # its supervisor runs on another host: it acts on cancel.json (or its heartbeat stops)
            return self.wait(job_id, timeout=timeout)
        if verdict:
            job = self.wait(job_id, timeout=timeout)
            if job.state.finished:
                return job
        # no supervisor (or it hangs): stop every process of the job ourselves
        status = read_status(run) or status
        sup = _supervisor_record(run, status)
        hung = [sup.pid] if sup is not None and _supervisor_alive(run, status) else []
        stop_pids(job_processes(job_id, pid_dir=run.pids) + hung, grace=5.0)
        status = read_status(run) or RunStatus(job_id=job_id)
        if not status.finished_state:
            write_status(run, replace(status, state="cancelled", reason=reason, finished=time.time()))
        return self.get(job_id)

    def pools(self) -> tuple[PoolInfo, ...]:
        """This user's warm pools (``STARVERSE_WARM_POOL``): one per job interpreter and environment."""
        return tuple(list_pools(self.settings.home))

    def stop_pools(self) -> tuple[PoolInfo, ...]:
        """Stop this user's warm pools now (running jobs go on); the next job starts cold and warms one again."""
        return tuple(stop_pools(self.settings.home))

    def latest_checkpoint_step(self, job_id: str) -> int | None:
        """Step of the newest checkpoint written by ``job_id`` (None without one)."""
        ckpt = latest_checkpoint(self.run_paths(job_id))
        return ckpt.step if ckpt else None


def start_supervisor(
    run: RunPaths,
    settings: Settings,
    sock: socket.socket | None,
    *,
    plan: LaunchPlan,
    spec: JobSpec,
    grace: float = GRACE_S,
    preempt_restarts: int = PREEMPT_RESTARTS,
    resume: bool = False,
    secrets: bool = False,
) -> int:
    """Start the detached supervisor of ``run``, beating every :data:`HEARTBEAT_S` (``_spawn``); its pid."""
    return spawn_supervisor(run, settings, sock, plan=plan, spec=spec, heartbeat=HEARTBEAT_S, grace=grace,
                            preempt_restarts=preempt_restarts, resume=resume, secrets=secrets)  # fmt: skip


def _supervisor_record(run: RunPaths, status: RunStatus) -> ProcessRecord | None:
    """The supervisor as the supervisor recorded itself, else as ``submit`` recorded it.

    A status without a record (an older version) gives the bare pid: judged on this host, as then.
    """
    if status.supervisor is not None:
        return status.supervisor
    data = read_record(run.root / "supervisor.json")
    launched = ProcessRecord.from_json(data.get("process")) if isinstance(data, dict) else None
    pid = status.supervisor_pid or (launched.pid if launched else None)
    if pid is None:
        legacy = ProcessRecord.from_json(data)
        return legacy if legacy is None else ProcessRecord(legacy.pid)
    return launched if launched is not None and launched.pid == pid else ProcessRecord(pid)


def _supervisor_alive(run: RunPaths, status: RunStatus) -> bool | None:
    """Whether the run's supervisor lives, judged here by pid and start time; None: it runs on another host."""
    record = _supervisor_record(run, status)
    if record is None:
        # submit writes the folder and then the pid: a moment without one is not a death
        return time.time() - run.spec.stat().st_mtime < STARTUP_GRACE_S if run.spec.exists() else False
    verdict = alive(record)
    if verdict and record.start_time is not None:
        # pid + start time name one process; its command line may still be the parent's for a
        # moment after the fork (before exec), so it is only asked when no start time was recorded
        return True
    return verdict and runs_folder(record.pid, run)


def _heartbeat_age(run: RunPaths, status: RunStatus) -> tuple[float, float]:
    """Seconds since the supervisor's last sign of life, and the age at which it counts as dead."""
    if status.heartbeat is not None:
        every = status.heartbeat_every if status.heartbeat_every and status.heartbeat_every > 0 else HEARTBEAT_S
        return time.time() - status.heartbeat, STALE_BEATS * every + STALE_MARGIN_S
    data = read_record(run.root / "supervisor.json")  # not started yet: judged from its launch
    launched = data.get("started") if isinstance(data, dict) else None
    since = launched if isinstance(launched, (int, float)) else status.created
    return time.time() - since, STARTUP_GRACE_S + STALE_MARGIN_S


def _fail_if_supervisor_gone(run: RunPaths, status: RunStatus, settings: Settings | None = None) -> RunStatus:
    """``status``, or the job resumed or marked failed when its supervisor is known to be gone.

    Its nodes' billing intervals end at the supervisor's last heartbeat (not when someone
    looks). On the supervisor's host its death is seen at once: its agents got SIGTERM from
    it (``PR_SET_PDEATHSIG``) and checkpoint; a new supervisor takes the job over and resumes
    it when the preemption budget allows, else the job is marked failed and its processes
    stopped. From another host only a stale heartbeat counts; a live job's status is never
    rewritten.
    """
    verdict = _supervisor_alive(run, status)
    if verdict:
        return status
    if verdict is None:
        age, limit = _heartbeat_age(run, status)
        if age <= limit:
            return status
        record = _supervisor_record(run, status)
        where = record.host if record else "another host"
        why = (
            f"the job's supervisor on {where} sent no heartbeat for {age:.0f} s; "
            f"its processes there, if any, could not be stopped from {host_identity().host}"
        )
    else:
        why = "the job's supervisor process died; its processes were stopped"
    fresh = read_status(run) or status  # it may have finished, or beaten, between the two reads
    if fresh.finished_state or (verdict is None and fresh.heartbeat != status.heartbeat):
        return fresh
    end = fresh.heartbeat if fresh.heartbeat else time.time()
    if verdict is False and settings is not None and fresh.nodes:
        taken = _take_over(run, fresh, settings, end)
        if taken is not None:
            return taken
        if fresh.state in ("preempted", "resuming") and not claim(run, fresh.attempt, "fail"):
            return read_status(run) or fresh  # another reader is taking it over right now
    if verdict is False:
        stop_pids(job_processes(run.job_id, pid_dir=run.pids), grace=2.0)
    fresh = replace(fresh, state="failed", reason=why, finished=end, nodes=closed_nodes(fresh, end, "failed"))
    write_status(run, fresh)
    final_cost(run, fresh, settings)
    return fresh


def _foreign_view(run: RunPaths, status: RunStatus) -> RunStatus:
    """Another user's job as recorded; a dead supervisor is named, but nothing is written or started."""
    try:
        verdict = _supervisor_alive(run, status)
        if verdict is None:
            age, limit = _heartbeat_age(run, status)
            verdict = None if age <= limit else False
    except (OSError, ValueError, TypeError):
        return status
    if verdict is not False:
        return status
    owner = uid_of(run.root)
    return replace(status, reason=f"its supervisor is gone; it is resumed or marked failed when its owner "
                   f"(uid {owner}) next looks at it")  # fmt: skip


def _take_over(run: RunPaths, status: RunStatus, settings: Settings, end: float) -> RunStatus | None:
    """Start a new supervisor that resumes the job, if its preemption budget allows; else ``None``.

    Only for a run folder of this uid; the supervisor's plan is rebuilt here from the validated
    spec (``plan.json`` is never run), and a spec that does not plan (a mount gone) is ``None``.
    """
    if not owned_by_me(run):
        return None
    data = read_record(run.root / "supervisor.json")
    data = data if isinstance(data, dict) else {}
    try:
        budget = max(0, min(100, int(data.get("preempt_restarts", PREEMPT_RESTARTS))))
        grace = max(0.5, min(3600.0, float(data.get("grace", GRACE_S))))
    except (TypeError, ValueError, OverflowError):
        budget, grace = PREEMPT_RESTARTS, GRACE_S
    cancelled = trusted_record(run.cancel, admin_gid=group_id(settings.admin_group))
    if status.preemptions >= budget or cancelled:
        return None
    try:
        spec = JobSpec.from_json(read_json(run.spec))
        backend = LocalBackend(settings, grace=grace, preempt_restarts=budget)
        if ExperimentPaths.of(settings.experiments, spec.experiment_name).run(run.job_id).root != run.root:
            return None  # a spec of another experiment copied here: not this run's
        mounts, store_env = backend.mounts(spec)
        plan, _ = backend._plan(spec, run.job_id, None, mounts=mounts, store_env=store_env)
    except (StarverseError, OSError, ValueError, TypeError):
        return None
    if not claim(run, status.attempt, "takeover"):
        return read_status(run) or status
    reason = "lost: the job's supervisor died; a new one resumes the job from its newest checkpoint"
    fresh = replace(status, state="preempted", reason=reason, nodes=closed_nodes(status, end, "preempted"))
    write_status(run, fresh)
    pid = start_supervisor(run, settings, None, plan=plan, spec=spec, grace=grace, preempt_restarts=budget,
                           resume=True)  # fmt: skip
    fresh = replace(fresh, supervisor=None, supervisor_pid=pid)
    write_status(run, fresh)
    return fresh
