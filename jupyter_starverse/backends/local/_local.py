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
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from jupyter_starverse._procs import ProcessRecord, alive, host_identity, job_processes, process_record, stop_pids
from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import check_owned, group_id, open_under, write_atomic
from jupyter_starverse.errors import BadInputError, ConflictError, PermissionDeniedError, StarverseError, did_you_mean
from jupyter_starverse.experiments import (
    ExperimentPaths,
    NodeRecord,
    ResumePlan,
    RunPaths,
    RunStatus,
    find_run,
    folder_modes,
    latest_checkpoint,
    list_runs,
    new_job_id,
    plan_resume,
    read_json,
    read_record,
    read_status,
    run_modes,
    trusted_record,
    write_json,
    write_status,
)
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, NodeStatus

from .._runfolder import RunFolderBackend
from .._secrets import check_secrets, run_secrets
from .._torchrun import LOCAL_ADDR, WORKER_MODULE, LaunchPlan, job_env, make_local_plan, render_plan
from ..templates import check_template, framework_args, write_framework_files
from ._attempts import PREEMPT_RESTARTS
from ._pool import PoolInfo, list_pools, stop_pools
from ._supervisor import BUDGET_EVERY_S

__all__ = ["LocalBackend"]

_SUPERVISOR_MODULE = "jupyter_starverse.backends.local._supervisor"
HEARTBEAT_S = 5.0  # how often the supervisor of a new job stamps its heartbeat
STALE_BEATS = 3  # heartbeats a supervisor may miss before another host counts it dead ...
STALE_MARGIN_S = 15.0  # ... plus this margin (a slow shared file system, clocks a little apart)
STARTUP_GRACE_S = 60.0  # from submit to the supervisor's first heartbeat
GRACE_S = 30.0  # from SIGTERM (cancel, budget, preemption drill) to SIGKILL
BUDGET_STARTUP_S = 10.0  # a capped job needs this long to start and train before its first checkpoint


class LocalBackend(RunFolderBackend):
    """Local processes, one torchrun agent per node, gloo on CPU.

    Parameters
    ----------
    settings
        Where experiments and the store live.
    port
        Port of the rendezvous store; ``None`` picks a free one. A port in use is refused.
    grace
        Seconds from SIGTERM to SIGKILL when the job is stopped (cancel, budget cap, drill);
        also what the budget cap's margin is computed from.
    preempt_restarts
        How many times a job is relaunched after a preemption or a lost process or node
        (failures of the script itself are retried ``JobSpec.max_restarts`` times).
    """

    name = "local"

    def __init__(
        self,
        settings: Settings,
        *,
        port: int | None = None,
        grace: float = GRACE_S,
        preempt_restarts: int = PREEMPT_RESTARTS,
    ) -> None:
        self.settings = settings
        self.port = port
        self.grace = grace
        self.preempt_restarts = preempt_restarts

    # -- planning -----------------------------------------------------------------
    def _entry(self, spec: JobSpec, run: RunPaths) -> tuple[list[str], bool]:
        extra = framework_args(spec, run_dir=str(run.root))
        if spec.command:
            return [*spec.command, *spec.args, *extra], True
        script = str(run.script) if spec.code else str(Path(spec.script or "").expanduser().absolute())
        return ["-m", WORKER_MODULE, script, *spec.args, *extra], False

    def _check_gpu(self, spec: JobSpec) -> None:
        if spec.is_gpu:  # a type nobody sells is a typo, whatever this machine has
            from jupyter_starverse.costs import load_price_table

            table = load_price_table(self.settings)
            if spec.accelerator not in table.gpus:
                raise BadInputError(
                    f"unknown GPU type {spec.accelerator!r}",
                    field="accelerator",
                    hint=f"{did_you_mean(spec.accelerator, table.gpus)}known types: {', '.join(table.accelerators)}",
                )
        if spec.is_gpu and not any(Path("/dev").glob("nvidia[0-9]*")):
            raise BadInputError(
                f"the job asks for GPUs ({spec.accelerator!r}) but this machine has none",
                field="accelerator",
                hint="run it on the CPU here: `--gpu cpu` on `starverse launch` (or `%sv mode cpu` in a notebook, "
                '"accelerator": "cpu" over REST), or launch on a cluster: `--backend kubernetes` or `--backend slurm`',
            )

    def _check_name_free(self, spec: JobSpec) -> None:
        for job in self.list():
            if job.spec.name == spec.name and not job.state.finished:
                raise ConflictError(
                    f"a job named {spec.name!r} is still {job.state.value}: {job.id}",
                    hint=f"wait for it, cancel it (`starverse jobs cancel {job.id}`), or choose another name",
                )

    def _plan(
        self, spec: JobSpec, job_id: str, port: int | None, *, mounts: dict[str, str], store_env: dict[str, str]
    ) -> tuple[LaunchPlan, ResumePlan | None]:
        exp = ExperimentPaths.of(self.settings.experiments, spec.experiment_name)
        run = exp.run(job_id)
        resume = (
            plan_resume(exp.root, new_world_size=spec.world_size, data_parallel=spec.data_parallel)
            if spec.resume
            else None
        )
        env = job_env(
            spec,
            job_id=job_id,
            run_dir=str(run.root),
            checkpoint_dir=str(run.checkpoints),
            store=store_env.get("STARVERSE_STORE", self.settings.store),
            hf_cache=store_env.get("HF_HUB_CACHE", f"{self.settings.store}/hub"),
            mounts=mounts,
            resume_from=str(resume.checkpoint.path) if resume and resume.checkpoint else None,
        )
        if "PYTHONPATH" in env and os.environ.get("PYTHONPATH"):  # the job env layered over what ranks see now
            env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
        entry, no_python = self._entry(spec, run)
        return make_local_plan(spec, job_id=job_id, port=port, env=env, entry=entry, no_python=no_python), resume

    def validate(self, spec: JobSpec) -> tuple[dict[str, str], dict[str, str]]:
        """Every check ``submit`` makes before starting anything; returns mounts and store env."""
        check_template(spec)
        self._check_gpu(spec)
        if spec.budget is not None:  # costs: a capped job must be priced, or its cap could not hold
            from jupyter_starverse.costs import check_budget_covers, check_priced, load_price_table

            table = load_price_table(self.settings)
            check_priced(spec, table)
            # the supervisor stops a capped job this long before its budget (see _supervisor.check_budget)
            margin = BUDGET_EVERY_S + self.grace + 1.0
            check_budget_covers(spec, table, startup_s=BUDGET_STARTUP_S, stop_margin_s=margin)
        self.check_script(spec)
        check_secrets(spec, where="the local backend")  # resolved again at spawn, into the supervisor's env only
        return self.mounts(spec)

    def resume_plan(self, spec: JobSpec) -> ResumePlan:
        """Checkpoint step, old and new world size of ``spec`` resumed into its experiment."""
        exp = ExperimentPaths.of(self.settings.experiments, spec.experiment_name)
        return plan_resume(exp.root, new_world_size=spec.world_size, data_parallel=spec.data_parallel)

    def render(self, spec: JobSpec, *, output: str = "yaml") -> str:
        if output not in ("yaml", "json"):
            raise BadInputError(f"output {output!r} is not yaml or json", field="output")
        mounts, store_env = self.validate(spec)
        plan, resume = self._plan(spec, "<job-id>", self.port, mounts=mounts, store_env=store_env)
        extra = {"resume": resume.to_json()} if resume else {}
        return render_plan(plan, output=output, extra=extra)

    # -- submit -------------------------------------------------------------------
    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((LOCAL_ADDR, self.port or 0))
            sock.listen(128)
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                raise ConflictError(
                    f"port {self.port} on {LOCAL_ADDR} is already in use", hint="omit the port to pick a free one"
                ) from e
            raise
        return sock

    def submit(self, spec: JobSpec, *, dry_run: bool = False) -> Job:
        mounts, store_env = self.validate(spec)
        self._check_name_free(spec)
        if dry_run:
            now = time.time()
            run = ExperimentPaths.of(self.settings.experiments, spec.experiment_name).run("dry-run")
            return Job("dry-run", self.name, spec, JobState.PENDING, str(run.root), now)
        job_id = new_job_id(spec.name)
        run = ExperimentPaths.of(self.settings.experiments, spec.experiment_name).run(job_id)
        sock = self._bind()
        try:
            port = sock.getsockname()[1]
            plan, _ = self._plan(spec, job_id, port, mounts=mounts, store_env=store_env)
            modes, gid = run_modes(self.settings.experiments, self.settings.shared_group)
            run.make(modes, gid=gid)  # 0700 (2770 in group mode) whatever the umask
            if spec.code is not None:
                write_atomic(run.script, spec.code.encode(), modes.file)
            write_framework_files(spec, run.root)
            write_json(run.spec, spec.to_json())
            write_json(run.plan, plan.to_json())
            status = RunStatus(job_id=job_id, created=time.time(), port=port)
            write_status(run, status)
            # `store rm`/`evict` refuse what a live job reads: held by us until the
            # supervisor runs, then by the supervisor for as long as it lives.
            with self._holds(spec, job_id, pid=None):
                self._holds(spec, job_id, pid=self._start_supervisor(run, sock, plan=plan, spec=spec))
        except BaseException as e:
            sock.close()
            if run.status.exists() and not isinstance(e, KeyboardInterrupt):
                failed = RunStatus(
                    job_id=job_id,
                    state="failed",
                    created=time.time(),
                    finished=time.time(),
                    reason=f"could not start: {e}",
                )
                write_status(run, failed)
            raise
        sock.close()
        return self.get(job_id)

    def _holds(self, spec: JobSpec, job_id: str, *, pid: int | None) -> contextlib.ExitStack:
        """Hold every mounted store entry for ``job_id`` while ``pid`` (default: this process) lives."""
        stack = contextlib.ExitStack()
        if spec.mounts:
            from jupyter_starverse.catalog import Catalog

            catalog = Catalog(self.settings)
            for name in spec.mounts:
                stack.callback(catalog.hold(name, job_id, pid=pid).release)
        return stack

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
                f"cannot read job {run.job_id}: its run folder {run.root} belongs to uid {_uid(run.root)}",
                hint="run folders are private unless the experiments root is shared with STARVERSE_SHARED_GROUP "
                "(docs/sharing.md)",
            ) from None
        except (OSError, ValueError) as e:
            raise BadInputError(
                f"job {run.job_id}: {run.spec} cannot be read ({e})", field="spec",
                hint="the run folder is damaged; its owner can remove it",
            ) from None  # fmt: skip
        if not status.finished_state:
            if _owned_by_me(run):
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
        return Job(
            id=run.job_id,
            backend=self.name,
            spec=spec,
            state=JobState(state),
            experiment_dir=str(run.root),
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
        jobs = []
        for run in list_runs(self.settings.experiments):
            try:
                jobs.append(self._job(run))
            except (StarverseError, OSError, ValueError, KeyError, TypeError, AttributeError):
                continue  # a half-written, malformed or unreadable folder is not a job (the index names it)
        return sorted(jobs, key=lambda j: j.created, reverse=True)

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
    """Start the detached supervisor of ``run`` (``sock``: the bound rendezvous port; ``None``: its own).

    The job's secrets are resolved here, into the supervisor's environment only (its ranks inherit
    them): ``secrets`` for a submit (a reference that does not resolve fails it), else (take-over)
    only those that resolve, and only for a run folder of this uid.
    """
    env = {**os.environ, **settings.to_env()}
    env.update(run_secrets(run.spec, strict=secrets))
    env.pop("STARVERSE_JOB_ID", None)
    argv = [sys.executable, "-m", _SUPERVISOR_MODULE, str(run.root)]
    fds: tuple[int, ...] = ()
    if sock is not None:
        argv += ["--listen-fd", str(sock.fileno())]
        fds = (sock.fileno(),)
    argv += ["--heartbeat", str(HEARTBEAT_S), "--grace", f"{grace:g}", "--preempt-restarts", str(preempt_restarts)]
    if resume:
        argv.append("--resume")
    # a link planted at supervisor.log is refused, never appended through
    log_fd = open_under(run.root, run.root / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                        folder_modes(run.root).file)  # fmt: skip
    with os.fdopen(log_fd, "ab") as log:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=run.root,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=fds,
            start_new_session=True,
        )
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError), proc.stdin:  # what it runs: from us, never from the folder
        proc.stdin.write(json.dumps({"spec": spec.to_json(), "plan": plan.to_json()}).encode())
    # status.json belongs to the supervisor from now on; its pid goes into a file of its own
    record = process_record(proc.pid).to_json()
    write_json(
        run.root / "supervisor.json",
        {
            "pid": proc.pid,
            "started": time.time(),
            "process": record,
            "grace": grace,
            "preempt_restarts": preempt_restarts,
        },
    )
    _reap_later(proc)
    return proc.pid


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
    return verdict and _runs_folder(record.pid, run)


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
        if fresh.state in ("preempted", "resuming") and not _claim(run, fresh.attempt, "fail"):
            return read_status(run) or fresh  # another reader is taking it over right now
    if verdict is False:
        stop_pids(job_processes(run.job_id, pid_dir=run.pids), grace=2.0)
    fresh = replace(fresh, state="failed", reason=why, finished=end, nodes=_closed(fresh, end, "failed"))
    write_status(run, fresh)
    _final_cost(run, fresh, settings)
    return fresh


def _uid(path: Path) -> int | str:
    try:
        return os.lstat(path).st_uid
    except OSError:
        return "?"


def _owned_by_me(run: RunPaths) -> bool:
    """The run folder and the records that say what it runs are this uid's own (``lstat``, no link)."""
    me = os.geteuid()
    try:
        if run.owner != me:
            return False
        for record in (run.spec, run.plan):
            st = os.lstat(record)
            if st.st_uid != me or not stat.S_ISREG(st.st_mode):
                return False
    except FileNotFoundError:
        return run.spec.is_file() and not run.spec.is_symlink()  # no plan.json yet (an older version)
    except OSError:
        return False
    return True


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
    owner = _uid(run.root)
    return replace(status, reason=f"its supervisor is gone; it is resumed or marked failed when its owner "
                   f"(uid {owner}) next looks at it")  # fmt: skip


def _closed(status: RunStatus, end: float, state: str) -> tuple[NodeRecord, ...]:
    """The nodes with every open billing interval ended at ``end`` (the last heartbeat)."""
    nodes = []
    for n in status.nodes:
        launches = tuple((a, b if b is not None else max(a, end)) for a, b in n.launches)
        done = n.state in ("succeeded", "failed", "cancelled")
        nodes.append(replace(n, launches=launches, state=n.state if done else state, finished=n.finished or end))
    return tuple(nodes)


def _claim(run: RunPaths, attempt: int, what: str) -> bool:
    """Only one reader acts on a dead supervisor's attempt (``O_EXCL`` file)."""
    try:
        fd = os.open(run.root / f".{what}-{attempt}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _take_over(run: RunPaths, status: RunStatus, settings: Settings, end: float) -> RunStatus | None:
    """Start a new supervisor that resumes the job, if its preemption budget allows; else ``None``.

    Only for a run folder of this uid; the supervisor's plan is rebuilt here from the validated
    spec (``plan.json`` is never run), and a spec that does not plan (a mount gone) is ``None``.
    """
    if not _owned_by_me(run):
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
    if not _claim(run, status.attempt, "takeover"):
        return read_status(run) or status
    reason = "lost: the job's supervisor died; a new one resumes the job from its newest checkpoint"
    fresh = replace(status, state="preempted", reason=reason, nodes=_closed(status, end, "preempted"))
    write_status(run, fresh)
    pid = start_supervisor(run, settings, None, plan=plan, spec=spec, grace=grace, preempt_restarts=budget,
                           resume=True)  # fmt: skip
    fresh = replace(fresh, supervisor=None, supervisor_pid=pid)
    write_status(run, fresh)
    return fresh


def _final_cost(run: RunPaths, status: RunStatus, settings: Settings | None) -> None:
    """Rewrite ``cost.json`` from the closed intervals (a dead supervisor wrote its last reading)."""
    if settings is None:
        return
    try:
        from jupyter_starverse.costs import job_cost, load_price_table, write_cost
        from jupyter_starverse.experiments import node_intervals

        spec = JobSpec.from_json(read_json(run.spec))
        end = status.finished or time.time()
        cost = job_cost(spec, node_intervals(status), load_price_table(settings), now=end, job_id=run.job_id,
                        user=settings.user)  # fmt: skip
        write_cost(run.root, cost)
    except Exception:  # the meter must not break reading a job
        return


def _runs_folder(pid: int, run: RunPaths) -> bool:
    """The supervisor carries the run folder on its command line (guards against reused pids)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.is_dir():
        return True  # no /proc (macOS): trust the recorded pid
    try:
        return str(run.root) in cmdline.read_bytes().decode(errors="replace")
    except OSError:
        return False


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    """Collect the supervisor's exit status when it ends, so it never lingers as a zombie."""
    import threading

    threading.Thread(target=proc.wait, name=f"starverse-reap-{proc.pid}", daemon=True).start()
