"""The embedded default backend: every node is a ``torchrun`` agent on this machine.

``submit`` validates, writes the run folder (``spec.json``, ``plan.json``, ``status.json``)
and starts a detached supervisor (``_supervisor``) that owns the agents. Everything else
reads the run folder, so any process (kernel, server, CLI) sees and controls the same jobs.
"""

from __future__ import annotations

import builtins
import errno
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from jupyter_starverse._procs import job_processes, pid_alive, stop_pids
from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError, StarverseError
from jupyter_starverse.experiments import (
    ExperimentPaths,
    ResumePlan,
    RunPaths,
    RunStatus,
    find_run,
    latest_checkpoint,
    list_runs,
    new_job_id,
    plan_resume,
    read_json,
    read_status,
    write_json,
    write_status,
)
from jupyter_starverse.jobmodel import Job, JobSpec, JobState, LaunchBackend, LogLine, NodeStatus
from jupyter_starverse.watch import follow_logs, read_rank_records, tail_run_logs

from .._torchrun import LOCAL_ADDR, WORKER_MODULE, LaunchPlan, job_env, make_local_plan, render_plan
from ..templates import check_template, framework_args, write_framework_files

__all__ = ["LocalBackend"]

_SUPERVISOR_MODULE = "jupyter_starverse.backends.local._supervisor"


class LocalBackend(LaunchBackend):
    """Local processes, one torchrun agent per node, gloo on CPU.

    Parameters
    ----------
    settings
        Where experiments and the store live.
    port
        Port of the rendezvous store; ``None`` picks a free one. A port in use is refused.
    """

    name = "local"

    def __init__(self, settings: Settings, *, port: int | None = None) -> None:
        self.settings = settings
        self.port = port

    # -- planning -----------------------------------------------------------------
    def _entry(self, spec: JobSpec, run: RunPaths) -> tuple[list[str], bool]:
        extra = framework_args(spec, run_dir=str(run.root))
        if spec.command:
            return [*spec.command, *spec.args, *extra], True
        script = str(run.script) if spec.code else str(Path(spec.script or "").expanduser().absolute())
        return ["-m", WORKER_MODULE, script, *spec.args, *extra], False

    def _check_script(self, spec: JobSpec) -> None:
        if spec.command:
            return
        if spec.code is not None:
            source, where = spec.code, "the training code"
        else:
            path = Path(spec.script or "").expanduser()
            if not path.is_file():
                raise BadInputError(
                    f"script {str(path)!r} does not exist", field="script", hint="give the path of a Python file"
                )
            source, where = path.read_text(errors="replace"), str(path)
        try:
            compile(source, where, "exec")
        except SyntaxError as e:
            raise BadInputError(
                f"{where} has a syntax error on line {e.lineno}: {e.msg}",
                field="script",
                hint="fix it; nothing was launched",
            ) from None

    def _mounts(self, spec: JobSpec) -> tuple[dict[str, str], dict[str, str]]:
        if not spec.mounts:
            from jupyter_starverse.catalog import Catalog

            return {}, Catalog(self.settings).job_env()
        from jupyter_starverse.catalog import Catalog

        catalog = Catalog(self.settings)
        paths: dict[str, str] = {}
        for name in spec.mounts:
            try:
                paths[name] = str(catalog.mount(name))
            except (NotFoundError, ConflictError, BadInputError) as e:
                raise BadInputError(f"mount {name!r}: {e.message}", field="mounts", hint=e.hint) from e
        return paths, catalog.job_env()

    def _check_gpu(self, spec: JobSpec) -> None:
        if spec.is_gpu and not any(Path("/dev").glob("nvidia[0-9]*")):
            raise BadInputError(
                f"JobSpec.accelerator: {spec.accelerator!r} asks for GPUs but this machine has none",
                field="accelerator",
                hint="use accelerator='cpu' (gloo) here, or launch with backend='kubernetes'",
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
        resume = plan_resume(exp.root, new_world_size=spec.world_size) if spec.resume else None
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
        entry, no_python = self._entry(spec, run)
        return make_local_plan(spec, job_id=job_id, port=port, env=env, entry=entry, no_python=no_python), resume

    def validate(self, spec: JobSpec) -> tuple[dict[str, str], dict[str, str]]:
        """Every check ``submit`` makes before starting anything; returns mounts and store env."""
        check_template(spec)
        self._check_gpu(spec)
        if spec.budget is not None:  # costs: a capped job must be priced, or its cap could not hold
            from jupyter_starverse.costs import check_priced, load_price_table

            check_priced(spec, load_price_table(self.settings))
        self._check_script(spec)
        if spec.secrets:
            missing = [k for k in spec.secrets if k not in os.environ]
            if missing:
                raise BadInputError(
                    f"JobSpec.secrets: the local backend takes secrets from this environment; "
                    f"{', '.join(missing)} not set",
                    field="secrets",
                    hint="export the variables before launching (their values never reach the experiment folder)",
                )
        return self._mounts(spec)

    def resume_plan(self, spec: JobSpec) -> ResumePlan:
        """Checkpoint step, old and new world size of ``spec`` resumed into its experiment."""
        exp = ExperimentPaths.of(self.settings.experiments, spec.experiment_name)
        return plan_resume(exp.root, new_world_size=spec.world_size)

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
            run.make()
            if spec.code is not None:
                run.script.write_text(spec.code)
            write_framework_files(spec, run.root)
            write_json(run.spec, spec.to_json())
            write_json(run.plan, plan.to_json())
            status = RunStatus(job_id=job_id, created=time.time(), port=port)
            write_status(run, status)
            self._start_supervisor(run, sock)
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

    def _start_supervisor(self, run: RunPaths, sock: socket.socket) -> None:
        fd = sock.fileno()
        env = {**os.environ, **self.settings.to_env()}
        env.pop("STARVERSE_JOB_ID", None)
        with run.root.joinpath("supervisor.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", _SUPERVISOR_MODULE, str(run.root), "--listen-fd", str(fd)],
                env=env,
                cwd=run.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(fd,),
                start_new_session=True,
            )
        # status.json belongs to the supervisor from now on; its pid goes into a file of its own
        write_json(run.root / "supervisor.json", {"pid": proc.pid, "started": time.time()})
        _reap_later(proc)

    # -- reading ------------------------------------------------------------------
    def _job(self, run: RunPaths) -> Job:
        spec = JobSpec.from_json(read_json(run.spec))
        status = read_status(run) or RunStatus(job_id=run.job_id)
        if not status.finished_state and not _is_supervisor(_supervisor_pid(run, status), run):
            status = read_status(run) or status  # it may have finished between the two reads
            if not status.finished_state:
                why = "the job's supervisor process died; its processes were stopped"
                stop_pids(job_processes(run.job_id, pid_dir=run.pids), grace=2.0)
                status = replace(status, state="failed", reason=why, finished=time.time())
                write_status(run, status)
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
            except (StarverseError, ValueError, KeyError, TypeError):
                continue  # a half-written or foreign folder is not a job
        return sorted(jobs, key=lambda j: j.created, reverse=True)

    def logs(self, job_id: str, *, follow: bool = False, rank: int | None = None) -> Iterator[LogLine]:
        run = self.run_paths(job_id)
        job = self.get(job_id)
        return follow_logs(
            run,
            world_size=job.spec.world_size,
            nodes=job.spec.nodes,
            rank=rank,
            follow=follow,
            finished=lambda: self.get(job_id).state.finished,
        )

    def tail(
        self, job_id: str, *, lines: int = 20, rank: int | None = None, job: Job | None = None
    ) -> builtins.list[LogLine]:
        """The last lines, read from the ends of the run's log files (a 200 MB log costs the same as 2 KB)."""
        job = job if job is not None else self.get(job_id)
        fast = tail_run_logs(job, read_rank_records(job), lines=lines, rank=rank)
        return fast if fast is not None else super().tail(job_id, lines=lines, rank=rank, job=job)

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.state.finished or (deadline is not None and time.monotonic() >= deadline):
                return job
            time.sleep(0.2)

    def cancel(self, job_id: str, *, reason: str = "cancelled by user", timeout: float = 60.0) -> Job:
        run = self.run_paths(job_id)
        job = self.get(job_id)
        if job.state.finished:
            return job
        write_json(run.cancel, {"reason": reason, "time": time.time()})
        status = read_status(run)
        sup = _supervisor_pid(run, status)
        if sup and _is_supervisor(sup, run):
            job = self.wait(job_id, timeout=timeout)
            if job.state.finished:
                return job
        # no supervisor (or it hangs): stop every process of the job ourselves
        stop_pids(job_processes(job_id, pid_dir=run.pids) + ([sup] if sup and pid_alive(sup) else []), grace=5.0)
        status = read_status(run) or RunStatus(job_id=job_id)
        if not status.finished_state:
            write_status(run, replace(status, state="cancelled", reason=reason, finished=time.time()))
        return self.get(job_id)

    def latest_checkpoint_step(self, job_id: str) -> int | None:
        """Step of the newest checkpoint written by ``job_id`` (None without one)."""
        ckpt = latest_checkpoint(self.run_paths(job_id))
        return ckpt.step if ckpt else None


def _supervisor_pid(run: RunPaths, status: RunStatus | None) -> int | None:
    if status is not None and status.supervisor_pid:
        return status.supervisor_pid
    data = read_json(run.root / "supervisor.json")
    return int(data["pid"]) if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def _is_supervisor(pid: int | None, run: RunPaths) -> bool:
    """The supervisor carries the run folder on its command line (guards against reused pids)."""
    if pid is None:
        # submit writes the folder and then the pid: a moment without one is not a death
        return time.time() - run.spec.stat().st_mtime < 60 if run.spec.exists() else False
    if not pid_alive(pid):
        return False
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
