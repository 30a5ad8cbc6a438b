"""``SlurmBackend``: the LaunchBackend contract on a Slurm cluster, through its client programs.

slurmctld is the job's truth while it remembers the job (``scontrol show job``), then the
accounting database (``sacct``) where there is one. The run folder (on a shared file system)
holds the script (``job.sbatch``), a small record (``slurm.json``: our id, Slurm's id, the
spec, and the final state once seen), the logs of every rank and node agent, metrics and
checkpoints, exactly where the local backend puts them, so watching, tails and resume read
the same files. The run folder has no ``spec.json``: that file marks a *local* run (the local
backend would otherwise take a Slurm run for one of its own whose supervisor died).
"""

from __future__ import annotations

import builtins
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.costs import budget_stop_reason
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError, StarverseError
from jupyter_starverse.experiments import (
    ExperimentPaths,
    ResumePlan,
    RunPaths,
    new_job_id,
    plan_resume,
    read_json,
    write_json,
)
from jupyter_starverse.jobmodel import EndpointSpec, Job, JobSpec, JobState, NodeStatus
from jupyter_starverse.watch import first_rank_error

from .._restarts import PREEMPT_EXIT, PREEMPT_RESTARTS
from .._runfolder import RunFolderBackend
from .._secrets import check_secrets, resolve_secrets
from .._torchrun import job_env
from ..templates import check_template, framework_args, write_framework_files
from ._commands import (
    SlurmJobInfo,
    job_state,
    partitions,
    run_slurm,
    sacct_job,
    scontrol_job,
    submit_env,
    submit_error,
)
from ._requeue import read_restarts
from ._resources import check_time_limit, node_resources, parse_slurm_time, signal_margin
from ._script import JOB_ID_TOKEN, RANK_MODULE, SlurmLaunch, render_script

__all__ = ["RECORD", "SCRIPT", "SlurmBackend"]

RECORD = "slurm.json"
SCRIPT = "job.sbatch"
CANCEL_GRACE_S = 30.0  # SIGTERM first: the ranks checkpoint; then scancel for good
SUBMIT_GRACE_S = 60.0  # a record without a Slurm id younger than this is a submit in progress
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
# pending reasons that will not resolve by waiting, with what to do
_STUCK = {
    "PartitionConfig": "the partition cannot run this shape of job: ask for fewer nodes or another partition",
    "PartitionNodeLimit": "more nodes than the partition allows: ask for fewer or map another partition",
    "PartitionTimeLimit": "the time limit is above the partition's: lower STARVERSE_SLURM_TIME",
    "PartitionDown": "the partition is down: ask the cluster's operators",
    "InvalidAccount": "set STARVERSE_SLURM_ACCOUNT to an account you belong to",
    "InvalidQOS": "set STARVERSE_SLURM_QOS to a QOS of your association",
    "QOSMaxNodePerJobLimit": "the QOS allows fewer nodes: ask for fewer or pick another STARVERSE_SLURM_QOS",
    "ReqNodeNotAvail": "some required nodes are down or drained (`sinfo -R` says why)",
}


def _last_words(path: Path) -> str | None:
    """The last error-looking line of a log (the batch shell's or an agent's)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [x.strip() for x in f.read().decode(errors="replace").splitlines() if x.strip()]
    except OSError:
        return None
    errors = [x for x in lines if "rror" in x or "must be set" in x or "missing" in x]
    return errors[-1][:300] if errors else None


class SlurmBackend(RunFolderBackend):
    """Jobs as sbatch scripts: ``srun`` starts one task per rank (no torchrun agent).

    Parameters
    ----------
    settings
        Partitions per accelerator, account, QOS, time limit, GPU flag, the nodes' Python,
        store and experiments (which every node must see at the same path).
    cancel_grace
        Seconds between the SIGTERM of ``cancel`` (ranks checkpoint) and ``scancel``.
    poll
        Seconds between two looks at slurmctld while waiting.
    preempt_restarts
        Requeues after preemptions and lost nodes; failures of the script are requeued
        ``JobSpec.max_restarts`` times (the batch script keeps both, see ``_requeue``).
    """

    name = "slurm"

    def __init__(
        self,
        settings: Settings,
        *,
        cancel_grace: float = CANCEL_GRACE_S,
        poll: float = 0.5,
        preempt_restarts: int = PREEMPT_RESTARTS,
    ) -> None:
        self.settings = settings
        self.cancel_grace = cancel_grace
        self.poll = poll
        self.preempt_restarts = max(0, preempt_restarts)

    # -- planning -----------------------------------------------------------------
    def env_target(self, spec: JobSpec) -> str:
        """The batch script's Python (``STARVERSE_SLURM_PYTHON``, else this one): what the job env is diffed against."""
        return f"python:{self.settings.slurm_python or sys.executable}"

    def placement(self, spec: JobSpec) -> tuple[str | None, str | None, str]:
        """``(partition, qos, why)`` of ``spec``: a spot job runs on the preemptible QOS and/or
        partition of ``STARVERSE_SLURM_SPOT_QOS`` / ``STARVERSE_SLURM_SPOT_PARTITION``."""
        partition, qos = self.partition(spec), self.settings.slurm_qos
        if spec.billing != "spot":
            return partition, qos, ""
        spot_qos, spot_part = self.settings.slurm_spot_qos, self.settings.slurm_spot_partition
        if not spot_qos and not spot_part:
            raise BadInputError(
                "--billing spot on Slurm needs a preemptible QOS or partition, and none is configured "
                "(the job would run, and be billed, as on-demand capacity)",
                field="billing",
                hint="set STARVERSE_SLURM_SPOT_QOS (a QOS with PreemptMode=REQUEUE, `sacctmgr show qos`) or "
                "STARVERSE_SLURM_SPOT_PARTITION (`sinfo -s`), or launch with --billing on_demand",
            )
        return spot_part or partition, spot_qos or qos, "spot: STARVERSE_SLURM_SPOT_QOS / _PARTITION (preemptible)"

    def partition(self, spec: JobSpec) -> str | None:
        """The partition of ``spec``'s accelerator (None: the cluster's default partition)."""
        table = dict(self.settings.slurm_partitions)
        if not table:
            return None
        if spec.accelerator in table:
            return table[spec.accelerator]
        raise BadInputError(
            f"no Slurm partition is mapped for {spec.accelerator!r} (mapped: {', '.join(sorted(table))})",
            field="accelerator",
            hint=f"add {spec.accelerator}=PARTITION to STARVERSE_SLURM_PARTITIONS, or launch with another --gpu",
        )

    def validate(self, spec: JobSpec, *, secrets: bool = True) -> tuple[dict[str, str], dict[str, str]]:
        """Every check ``submit`` makes before writing anything; returns mounts and store env."""
        check_template(spec)
        self.placement(spec)
        node_resources(spec)
        check_time_limit(spec, self.settings.slurm_time, step_s=self._step_seconds(spec))
        if spec.budget is not None:
            from jupyter_starverse.costs import check_priced, load_price_table

            check_priced(spec, load_price_table(self.settings))
        self.check_script(spec)
        if secrets:  # resolved again at sbatch, into its environment only (the script names them)
            check_secrets(spec, where="Slurm")
        return self.mounts(spec)

    def _step_seconds(self, spec: JobSpec) -> float | None:
        """Seconds per step of the experiment's newest run with timed metrics (None: none yet)."""
        from jupyter_starverse.experiments import read_metrics

        runs = ExperimentPaths.of(self.settings.experiments, spec.experiment_name).root / "runs"
        folders = sorted(runs.iterdir(), key=lambda p: p.name, reverse=True) if runs.is_dir() else []
        for folder in folders[:5]:
            try:
                timed = [p for p in read_metrics(folder, from_logs=False) if p.time is not None]
            except (OSError, StarverseError, ValueError):
                continue
            if len(timed) >= 2 and timed[-1].step > timed[0].step:
                return ((timed[-1].time or 0.0) - (timed[0].time or 0.0)) / (timed[-1].step - timed[0].step)
        return None

    def resume_plan(self, spec: JobSpec) -> ResumePlan:
        """Checkpoint step, old and new world size of ``spec`` resumed into its experiment."""
        exp = ExperimentPaths.of(self.settings.experiments, spec.experiment_name)
        return plan_resume(exp.root, new_world_size=spec.world_size, data_parallel=spec.data_parallel)

    def _entry(self, spec: JobSpec, run: RunPaths) -> list[str]:
        """What each rank's task runs: the script under the worker, or the command."""
        extra = framework_args(spec, run_dir=str(run.root))
        if spec.command:
            return ["-m", RANK_MODULE, "--exec", *spec.command, *spec.args, *extra]
        script = str(run.script) if spec.code else str(Path(spec.script or "").expanduser().absolute())
        return ["-m", RANK_MODULE, script, *spec.args, *extra]

    def plan(
        self,
        spec: JobSpec,
        job_id: str,
        *,
        mounts: dict[str, str],
        store_env: dict[str, str],
        standalone: bool = False,
    ) -> tuple[SlurmLaunch, ResumePlan | None]:
        """The resolved script inputs of ``spec`` as job ``job_id`` (pure but for the resume scan)."""
        run = ExperimentPaths.of(self.settings.experiments, spec.experiment_name).run(job_id)
        resume = self.resume_plan(spec) if spec.resume else None
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
        # a SIGTERM (preemption, time limit, `jobs preempt`): checkpoint, then exit 143 before the grace ends
        env["STARVERSE_PREEMPT_EXIT"] = str(PREEMPT_EXIT)
        env["STARVERSE_STOP_GRACE"] = f"{self.cancel_grace:g}"
        env["STARVERSE_NAN_STEPS"] = str(self.settings.nan_steps)  # runtime guard: a loss that stays NaN stops
        if spec.budget is not None:  # costs: no supervisor beside the job, so it enforces its own cap
            from jupyter_starverse.costs import cap_env, load_price_table

            env.update(cap_env(spec, load_price_table(self.settings), user=self.settings.user))
        entry = self._entry(spec, run)
        partition, qos, billing_note = self.placement(spec)
        cpus, memory, resources_note = node_resources(spec)
        files: dict[str, str] = {}
        if standalone:  # what submit writes into the run folder, the printed script writes itself
            if spec.code is not None:
                files[run.script.name] = spec.code
            if spec.framework == "deepspeed":
                import json

                from ..templates import deepspeed_config

                files["ds_config.json"] = json.dumps(deepspeed_config(spec), indent=1)
        launch = SlurmLaunch(
            job_id=job_id,
            spec=spec,
            run_dir=str(run.root),
            python=self.settings.slurm_python or sys.executable,
            entry=tuple(entry),
            env=env,
            mounts=mounts,
            partition=partition,
            account=self.settings.slurm_account,
            qos=qos,
            time_limit=self.settings.slurm_time,
            gpu_flag=self.settings.slurm_gpu_flag,
            resume_from=env.get("STARVERSE_RESUME_FROM"),
            preempt_restarts=self.preempt_restarts,
            cpus=cpus,
            memory=memory,
            resources_note=resources_note,
            signal_margin=signal_margin(parse_slurm_time(self.settings.slurm_time)),
            billing_note=billing_note,
            standalone=standalone,
            files=files,
        )
        return launch, resume

    def render_endpoint(self, spec: EndpointSpec, *, output: str = "sbatch") -> str:
        """The endpoint as a batch script (``_serving``) on the accelerator's partition; submits nothing."""
        from ._serving import render_endpoint_script

        if output not in ("sbatch", "yaml"):
            raise BadInputError(f"output {output!r} is not sbatch", field="output", hint="use sbatch")
        partition = self.partition(JobSpec(name=spec.name, command=("true",), accelerator=spec.accelerator))
        run_dir = f"{self.settings.experiments}/.serve/{spec.name}"
        return render_endpoint_script(spec, python=self.settings.slurm_python or sys.executable, run_dir=run_dir,
                                      partition=partition)  # fmt: skip

    def render(self, spec: JobSpec, *, output: str = "sbatch") -> str:
        """The sbatch script (``sbatch``), or its inputs as ``yaml`` / ``json``; submits nothing."""
        if output not in ("sbatch", "yaml", "json"):
            raise BadInputError(f"output {output!r} is not sbatch, yaml or json", field="output")
        mounts, store_env = self.validate(spec, secrets=False)
        # a printed script names its run folder after Slurm's id (``sbatch FILE`` as printed)
        launch, resume = self.plan(spec, JOB_ID_TOKEN, mounts=mounts, store_env=store_env, standalone=True)
        script = render_script(launch)
        if output == "sbatch":
            return script
        data: dict[str, Any] = {"backend": self.name, **launch.to_json(), "script": script}
        if resume:
            data["resume"] = resume.to_json()
        if output == "json":
            import json

            return json.dumps(data, indent=2)
        import yaml

        return str(yaml.safe_dump(data, sort_keys=False, width=200))

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
        exp = ExperimentPaths.of(self.settings.experiments, spec.experiment_name)
        if dry_run:
            return Job("dry-run", self.name, spec, JobState.PENDING, str(exp.run("dry-run").root), time.time())
        if shutil.which("sbatch") is None:
            run_slurm(["sbatch", "--version"])  # raises the install hint
        job_id = new_job_id(spec.name)
        launch, _ = self.plan(spec, job_id, mounts=mounts, store_env=store_env)
        self._check_nodes(launch.partition, spec.nodes)
        after = self._slurm_ids(spec.after)  # a pipeline's earlier steps must succeed first
        depend = [f"--dependency=afterok:{':'.join(after)}", "--kill-on-invalid-dep=yes"] if after else []
        run = exp.run(job_id)
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
        spec = JobSpec.from_json(record["spec"])
        created = float(record.get("created") or 0.0)
        cancel = read_json(run.cancel)
        final = record.get("final")
        if isinstance(final, dict):
            return self._from_final(run, spec, created, final)
        sid = record.get("slurm_job_id")
        info: SlurmJobInfo | None = None
        if sid:
            info = scontrol_job(str(sid)) or sacct_job(str(sid))
        if info is None:
            state, reason, started, finished, hosts = self._unknown(run, sid, created)
            restarts = 0
        else:
            state = job_state(info.state, requeue=info.requeue, finished=info.finished)
            started, hosts, restarts = info.started, info.nodes, info.restarts
            if state is JobState.PENDING and restarts:
                state = JobState.RESUMING  # requeued: waits for nodes, then resumes from the checkpoint
            elif state is JobState.RUNNING and restarts and int(read_restarts(run).get("attempt") or 0) < restarts:
                # requeued, and Slurm counts the new attempt while the old one is still completing or
                # before the new batch script has begun: resuming, not running (no flicker after preempted)
                state = JobState.RESUMING
            stopping = _stopping(run, restarts) if state is JobState.RUNNING else None
            if stopping is not None:  # ranks got SIGTERM: they checkpoint, then the attempt ends
                state = JobState.PREEMPTED
            reason = self._reason(run, spec, info, state)
            if stopping is not None:
                reason = stopping if "resuming from" in stopping else f"{stopping}; then the job is requeued"
            finished = info.finished if state.finished else None
            if state in (JobState.PENDING, JobState.RESUMING):
                started = None
        if isinstance(cancel, dict) and (state.finished or (info is None and sid)):
            state, reason = JobState.CANCELLED, str(cancel.get("reason") or "cancelled")
            finished = finished or cancel.get("time")
        nodes = tuple(
            NodeStatus(
                index=i,
                state=state,
                name=hosts[i] if i < len(hosts) else f"node{i}",
                reason=f"requeued {restarts} time(s)" if restarts else None,
                started=started,
                finished=finished,
            )
            for i in range(spec.nodes)
        )
        job = Job(
            id=run.job_id,
            backend=self.name,
            spec=spec,
            state=state,
            experiment_dir=str(run.root),
            created=created,
            started=started,
            finished=finished,
            reason=reason,
            nodes=nodes,
            restarts=restarts,
        )
        if state.finished and sid:
            record["final"] = job.to_json()
            write_json(run.root / RECORD, record)
        return job

    def _from_final(self, run: RunPaths, spec: JobSpec, created: float, final: dict[str, Any]) -> Job:
        nodes = tuple(
            NodeStatus(
                index=int(n.get("index", 0)),
                state=JobState(n.get("state", final["state"])),
                name=str(n.get("name", "")),
                reason=n.get("reason"),
                started=n.get("started"),
                finished=n.get("finished"),
            )
            for n in final.get("nodes", [])
        )
        return Job(
            id=run.job_id,
            backend=self.name,
            spec=spec,
            state=JobState(final["state"]),
            experiment_dir=str(run.root),
            created=created,
            started=final.get("started"),
            finished=final.get("finished"),
            reason=final.get("reason"),
            nodes=nodes,
            restarts=int(final.get("restarts") or 0),
        )

    def _unknown(
        self, run: RunPaths, sid: object, created: float
    ) -> tuple[JobState, str | None, float | None, float | None, tuple[str, ...]]:
        """State of a job slurmctld no longer knows and accounting does not keep (or not yet submitted)."""
        if not sid:
            if time.time() - created < SUBMIT_GRACE_S:
                return JobState.PENDING, "being submitted", None, None, ()
            return JobState.FAILED, "the submit did not complete (no Slurm job id was recorded)", None, None, ()
        exit_record = read_json(run.root / "slurm-exit.json")
        if isinstance(exit_record, dict) and isinstance(exit_record.get("exit_code"), int):
            code = int(exit_record["exit_code"])
            when = exit_record.get("time")
            finished = float(when) if isinstance(when, (int, float)) else None
            if code == 0:
                return JobState.SUCCEEDED, None, None, finished, ()
            cause = first_rank_error(run) or _last_words(run.logs / "batch.log")
            return (
                JobState.FAILED,
                f"exit code {code}" + (f"; first error: {cause}" if cause else ""),
                None,
                finished,
                (),
            )
        return (
            JobState.FAILED,
            f"Slurm no longer knows job {sid} and keeps no accounting of it; it wrote no exit record",
            None,
            None,
            (),
        )

    def _reason(self, run: RunPaths, spec: JobSpec, info: SlurmJobInfo, state: JobState) -> str | None:
        tries = f" (requeued {info.restarts} time(s))" if info.restarts else ""
        kept = read_restarts(run)  # what the batch script's restart keeper decided (``_requeue``)
        if state is JobState.FAILED and kept.get("final_reason"):
            return str(kept["final_reason"]) + tries
        if state in (JobState.PREEMPTED, JobState.RESUMING):
            said = kept.get("reason") if kept["events"] and kept["events"][-1].get("action") == "resumed" else None
            why = said or f"Slurm state {info.state}" + (f": {info.reason}" if info.reason else "")
            return f"{why}{tries}"
        if state is JobState.PENDING:
            why = info.reason or "queued"
            stuck = _STUCK.get(why.split()[0].rstrip(","))
            return f"waiting in Slurm's queue: {why}{tries}" + (f"; {stuck}" if stuck else "")
        if state is JobState.RUNNING:
            return f"running{tries}" if tries else None
        if state is JobState.SUCCEEDED:
            return budget_stop_reason(run.root) if spec.budget is not None else None
        if state is JobState.CANCELLED:
            return f"cancelled in Slurm ({info.state}){tries}"
        cause = first_rank_error(run) or _last_words(run.logs / "batch.log") or _last_words(run.node_log(0))
        code = f", exit code {info.exit_code}" if info.exit_code is not None else ""
        return f"Slurm state {info.state}{code}{tries}" + (f"; first error: {cause}" if cause else "")

    def get(self, job_id: str) -> Job:
        run, record = self._find(job_id)
        return self._job(run, record)

    def list(self) -> builtins.list[Job]:
        root = Path(self.settings.experiments)
        jobs = []
        for path in root.glob(f"*/runs/*/{RECORD}") if root.is_dir() else []:
            data = read_json(path)
            if not isinstance(data, dict):
                continue
            try:
                jobs.append(self._job(RunPaths(path.parent), data))
            except (StarverseError, ValueError, KeyError, TypeError):
                continue  # a half-written or foreign record is not a job
        return sorted(jobs, key=lambda j: j.created, reverse=True)

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


def _stopping(run: RunPaths, attempt: int) -> str | None:
    """Why attempt ``attempt``, still running in Slurm, is ending: a rank stopped on SIGTERM
    (``stops/rankN.json``), the restart keeper decided a requeue, or a drill was sent; else None."""
    kept = read_restarts(run)
    last = kept["events"][-1] if kept["events"] else None
    if isinstance(last, dict) and last.get("attempt") == attempt and last.get("action") == "resumed":
        return str(kept.get("reason") or "preempted")  # the requeue is on its way
    stops = [read_json(f) for f in run.stops.glob("rank*.json")] if run.stops.is_dir() else []
    got = [s for s in stops if isinstance(s, dict)]
    drill = read_json(run.preempt)
    if not got and isinstance(drill, dict) and drill.get("attempt") == attempt:
        return "preempted: the preemption drill sent SIGTERM to every rank (they checkpoint)"
    if not got:
        return None
    first = min(got, key=lambda s: float(s.get("signalled") or s.get("time") or 0))
    where = f"rank {first.get('rank')} (node {first.get('node')})"
    return f"preempted: {where} stopped on SIGTERM after step {first.get('step')}"
