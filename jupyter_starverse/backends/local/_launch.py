"""The local backend's launch half: what ``submit`` checks, plans, writes and starts.

:class:`LocalLauncher` validates a spec (template, GPUs, budget cap, script, secrets, mounts),
plans its ``torchrun`` agents (:func:`~.._torchrun.make_local_plan` over the job environment of
:mod:`.._jobrecords`), renders that plan, and on ``submit`` binds the rendezvous port, writes the
run folder (``spec.json``, ``plan.json``, ``status.json``) and hands the plan to the detached
supervisor that :meth:`LocalLauncher._start_supervisor` starts (the backend proper,
``_local.LocalBackend``, says how). Reading, cancelling and taking over jobs is ``_local``'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import time
from abc import abstractmethod
from pathlib import Path

from jupyter_starverse._settings import Settings
from jupyter_starverse._volume import write_atomic
from jupyter_starverse.errors import BadInputError, ConflictError, did_you_mean
from jupyter_starverse.experiments import (
    ResumePlan,
    RunPaths,
    RunStatus,
    new_job_id,
    run_modes,
    write_json,
    write_status,
)
from jupyter_starverse.jobmodel import Job, JobSpec

from .._jobrecords import dry_run_job, experiment_resume, planned_run, rank_env, rank_target
from .._runfolder import RunFolderBackend
from .._secrets import check_secrets
from .._torchrun import LOCAL_ADDR, WORKER_MODULE, LaunchPlan, make_local_plan, render_plan
from ..templates import check_template, write_framework_files
from ._attempts import PREEMPT_RESTARTS
from ._supstate import BUDGET_EVERY_S, GRACE_S

__all__ = ["BUDGET_STARTUP_S", "GRACE_S", "LocalLauncher"]

BUDGET_STARTUP_S = 10.0  # a capped job needs this long to start and train before its first checkpoint


class LocalLauncher(RunFolderBackend):
    """The launch half of ``LocalBackend``: local processes, one torchrun agent per node, gloo on CPU.

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
        """What torchrun starts per rank (a command as is, a script under the worker), and whether it is no Python."""
        if spec.command:
            return rank_target(spec, run), True
        return ["-m", WORKER_MODULE, *rank_target(spec, run)], False

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
        run = planned_run(self.settings, spec, job_id)
        resume = experiment_resume(self.settings, spec) if spec.resume else None
        env = rank_env(spec, self.settings, job_id, run, mounts=mounts, store_env=store_env, resume=resume)
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
        return experiment_resume(self.settings, spec)

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
            return dry_run_job(self.name, self.settings, spec)
        job_id = new_job_id(spec.name)
        run = planned_run(self.settings, spec, job_id)
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

    @abstractmethod
    def _start_supervisor(self, run: RunPaths, sock: socket.socket | None, *, plan: LaunchPlan, spec: JobSpec) -> int:
        """Start the job's detached supervisor (``sock``: the bound rendezvous port); its pid."""
