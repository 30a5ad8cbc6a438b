"""``SlurmBackend``: the LaunchBackend contract on a Slurm cluster, through its client programs.

slurmctld is the job's truth while it remembers the job (``scontrol show job``), then the
accounting database (``sacct``) where there is one. The run folder (on a shared file system)
holds the script (``job.sbatch``), a small record (``slurm.json``: our id, Slurm's id, the
spec, and the final state once seen), the logs of every rank and node agent, metrics and
checkpoints, exactly where the local backend puts them, so watching, tails and resume read
the same files. The run folder has no ``spec.json``: that file marks a *local* run (the local
backend would otherwise take a Slurm run for one of its own whose supervisor died).
This module submits (``sbatch``), finds, lists, cancels and preempts; planning and rendering the
script is ``_planner``'s, translating Slurm's state into the job's is ``_state``'s.
"""

from __future__ import annotations

import builtins
import re
import shutil
import time
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError, StarverseError
from jupyter_starverse.experiments import RunPaths, new_job_id, read_json, write_json
from jupyter_starverse.jobmodel import Job, JobSpec, JobState

from .._jobrecords import dry_run_job, newest_first, planned_run
from .._secrets import resolve_secrets
from ..templates import write_framework_files
from ._commands import partitions, run_slurm, submit_env, submit_error
from ._planner import CANCEL_GRACE_S, SlurmPlanner
from ._script import render_script
from ._state import RECORD, SUBMIT_GRACE_S, slurm_job

__all__ = ["CANCEL_GRACE_S", "RECORD", "SCRIPT", "SUBMIT_GRACE_S", "SlurmBackend"]

SCRIPT = "job.sbatch"
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class SlurmBackend(SlurmPlanner):
    """Jobs as sbatch scripts: ``srun`` starts one task per rank (parameters: :class:`~._planner.SlurmPlanner`).

    Planning and rendering are :class:`~._planner.SlurmPlanner`'s, the state of a job
    :func:`~._state.slurm_job`'s; this class submits (``sbatch``), finds, lists, cancels and preempts.
    """

    # -- submit -------------------------------------------------------------------
    def _check_nodes(self, partition: str | None, nodes: int) -> None:
        """A node count above what the partition can ever give is refused before sbatch
        (a cluster without ``EnforcePartLimits`` would queue it forever)."""
        known = partitions()
        part = known.get(partition) if partition else next((p for p in known.values() if p.default), None)
        if part is None:
            return  # an unknown partition: sbatch says so (translated in submit_error)
        limit = min(part.total_nodes, part.max_nodes) if part.max_nodes is not None else part.total_nodes
        if limit and nodes > limit:
            raise BadInputError(
                f"partition {part.name!r} has at most {limit} node(s) per job; the job asks for {nodes}",
                field="nodes",
                hint=f"launch with --nodes {limit} or fewer, or map the accelerator to a bigger partition "
                "in STARVERSE_SLURM_PARTITIONS (`sinfo -s` lists them)",
            )

    def submit(self, spec: JobSpec, *, dry_run: bool = False) -> Job:
        mounts, store_env = self.validate(spec)
        if dry_run:
            return dry_run_job(self.name, self.settings, spec)
        if shutil.which("sbatch") is None:
            run_slurm(["sbatch", "--version"])  # raises the install hint
        job_id = new_job_id(spec.name)
        launch, _ = self.plan(spec, job_id, mounts=mounts, store_env=store_env)
        self._check_nodes(launch.partition, spec.nodes)
        after = self._slurm_ids(spec.after)  # a pipeline's earlier steps must succeed first
        depend = [f"--dependency=afterok:{':'.join(after)}", "--kill-on-invalid-dep=yes"] if after else []
        run = planned_run(self.settings, spec, job_id)
        now = time.time()
        record: dict[str, Any] = {
            "job_id": job_id,
            "slurm_job_id": None,
            "created": now,
            "spec": spec.to_json(),
            "partition": launch.partition,
            "final": None,
        }
        try:
            run.make()
            if spec.code is not None:
                run.script.write_text(spec.code)
            write_framework_files(spec, run.root)
            script = run.root / SCRIPT
            script.write_text(render_script(launch))
            write_json(run.root / RECORD, record)
            argv = ["sbatch", "--parsable", *depend, str(script)]
            # secrets by value only in sbatch's environment (--export=ALL): never in the script or record
            proc = run_slurm(argv, env=submit_env(resolve_secrets(spec, where="Slurm")), check=False)
            if proc.returncode != 0:
                raise submit_error(
                    proc.stderr or proc.stdout,
                    partition=launch.partition,
                    account=launch.account,
                    qos=launch.qos,
                    nodes=spec.nodes,
                )
            slurm_id = proc.stdout.strip().splitlines()[-1].split(";")[0].strip()
            if not slurm_id.isdigit():
                raise StarverseError(f"sbatch answered {proc.stdout.strip()!r}, not a job id")
        except BaseException:
            shutil.rmtree(run.root, ignore_errors=True)
            raise
        record["slurm_job_id"] = slurm_id
        write_json(run.root / RECORD, record)
        return self.get(job_id)

    # -- reading ------------------------------------------------------------------
    def _find(self, job_id: str) -> tuple[RunPaths, dict[str, Any]]:
        if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
            raise NotFoundError(f"no Slurm job {job_id!r}", hint="list jobs with `starverse jobs ls --backend slurm`")
        root = Path(self.settings.experiments)
        for path in root.glob(f"*/runs/{job_id}/{RECORD}") if root.is_dir() else []:
            data = read_json(path)
            if isinstance(data, dict):
                return RunPaths(path.parent), data
        raise NotFoundError(
            f"no Slurm job {job_id!r} under {root}", hint="list jobs with `starverse jobs ls --backend slurm`"
        )

    def slurm_id(self, job_id: str) -> str | None:
        """Slurm's own id of ``job_id`` (None while the submit is in progress)."""
        _, record = self._find(job_id)
        sid = record.get("slurm_job_id")
        return str(sid) if sid else None

    def _slurm_ids(self, job_ids: tuple[str, ...]) -> list[str]:
        """Slurm's ids of the jobs ``spec.after`` names (``--dependency=afterok``)."""
        ids = [self.slurm_id(job_id) for job_id in job_ids]
        if None in ids:
            raise ConflictError("a job this one depends on is still being submitted", hint="submit it again")
        return [i for i in ids if i]

    def _job(self, run: RunPaths, record: dict[str, Any]) -> Job:
        return slurm_job(run, record, backend=self.name)

    def get(self, job_id: str) -> Job:
        run, record = self._find(job_id)
        return self._job(run, record)

    def list(self) -> builtins.list[Job]:
        root = Path(self.settings.experiments)
        paths = root.glob(f"*/runs/*/{RECORD}") if root.is_dir() else []
        records = ((RunPaths(path.parent), read_json(path)) for path in paths)
        # a half-written or foreign record is not a job
        return newest_first(records, self._job_of, skip=(StarverseError, ValueError, KeyError, TypeError))

    def _job_of(self, record: tuple[RunPaths, Any]) -> Job | None:
        """The job of one ``(run folder, slurm.json)`` (None: the record is not a dict)."""
        run, data = record
        return self._job(run, data) if isinstance(data, dict) else None

    def run_of(self, job_id: str) -> RunPaths:
        return self._find(job_id)[0]

    def cancel(self, job_id: str, *, reason: str = "cancelled by user", timeout: float = 60.0) -> Job:
        """SIGTERM to every rank (they checkpoint), ``scancel`` after the grace; the job ends cancelled.

        ``cancel.json`` is written first: the batch script does not requeue a cancelled job.
        """
        run, record = self._find(job_id)
        job = self._job(run, record)
        if job.state.finished:
            return job
        write_json(run.cancel, {"reason": reason, "time": time.time(), "by": {"user": self.settings.user}})
        sid = record.get("slurm_job_id")
        if not sid:
            return self.get(job_id)
        if job.state is JobState.RUNNING:
            # to the steps' processes only: a SIGTERM to the batch shell's srun would kill the ranks at once
            run_slurm(["scancel", "--signal=TERM", str(sid)], check=False)
            job = self.wait(job_id, timeout=self.cancel_grace)
        if not job.state.finished:
            run_slurm(["scancel", str(sid)], check=False)
            job = self.wait(job_id, timeout=timeout)
        return job

    def preempt(self, job_id: str) -> Job:
        """The drill: ``scancel --signal=TERM`` to the job's steps, as a preemption's notice does.

        Every rank checkpoints and exits 143; the batch script records a preemption and requeues the
        job (``preempted -> resuming -> running``), which resumes from that checkpoint.
        """
        run, record = self._find(job_id)
        job = self._job(run, record)
        sid = record.get("slurm_job_id")
        if job.state is not JobState.RUNNING or not sid:
            raise ConflictError(
                f"job {job_id} is {job.state.value}: only a running job can be preempted",
                hint="run the drill while the job trains (`starverse jobs show ID`)",
            )
        write_json(run.preempt, {"time": time.time(), "attempt": job.restarts, "by": {"user": self.settings.user}})
        run_slurm(["scancel", "--signal=TERM", str(sid)], check=False)
        return self.get(job_id)
