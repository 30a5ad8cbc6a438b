"""The Slurm backend's planning half: a JobSpec checked and turned into the inputs of its sbatch script.

:class:`SlurmPlanner` places a spec (partition and QOS per accelerator, the spot ones for
``--billing spot``), checks it before anything is written (template, node resources, the time
limit against the experiment's measured step time, prices of a capped job, the script, secrets,
mounts), resolves what every rank runs and sees (:mod:`.._jobrecords` plus the preemption,
grace, NaN-guard and budget-cap variables: no supervisor runs beside a Slurm job) into a
:class:`~._script.SlurmLaunch`, and renders it (``sbatch``, ``yaml``, ``json``) or an
endpoint's script. Submitting and reading jobs back is ``_backend.SlurmBackend``'s.
"""

from __future__ import annotations

import sys
from typing import Any

from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, StarverseError
from jupyter_starverse.experiments import ExperimentPaths, ResumePlan, RunPaths
from jupyter_starverse.jobmodel import EndpointSpec, JobSpec

from .._jobrecords import experiment_resume, planned_run, rank_env, rank_target
from .._restarts import PREEMPT_EXIT, PREEMPT_RESTARTS
from .._runfolder import RunFolderBackend
from .._secrets import check_secrets
from ..templates import check_template
from ._resources import check_time_limit, node_resources, parse_slurm_time, signal_margin
from ._script import JOB_ID_TOKEN, RANK_MODULE, SlurmLaunch, render_script

__all__ = ["CANCEL_GRACE_S", "SlurmPlanner"]

CANCEL_GRACE_S = 30.0  # SIGTERM first: the ranks checkpoint; then scancel for good


class SlurmPlanner(RunFolderBackend):
    """The planning half of ``SlurmBackend``: jobs as sbatch scripts, ``srun`` starts one task per rank (no torchrun).

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
        return experiment_resume(self.settings, spec)

    def _entry(self, spec: JobSpec, run: RunPaths) -> list[str]:
        """What each rank's task runs: the script under the worker, or the command."""
        return ["-m", RANK_MODULE, *(["--exec"] if spec.command else []), *rank_target(spec, run)]

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
        run = planned_run(self.settings, spec, job_id)
        resume = self.resume_plan(spec) if spec.resume else None
        env = rank_env(spec, self.settings, job_id, run, mounts=mounts, store_env=store_env, resume=resume)
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
