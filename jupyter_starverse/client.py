"""The one facade every front door (CLI, magics, widgets, REST) goes through.

``Starverse`` holds a :class:`~jupyter_starverse._settings.Settings` and builds the
services of each area lazily, once. It holds no job or catalog state of its own: the
truth lives on the store, in experiment folders and in the cluster, so two facades in
two processes see the same world.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from ._client_services import Services
from ._client_views import Info, JobsAcross, LaunchPreview, MixedPreview
from ._settings import Settings
from ._version import __version__
from .errors import BackendUnavailableError, NotFoundError, StarverseError
from .jobmodel import LaunchBackend, secret_env_warnings

if TYPE_CHECKING:
    from .costs import UserTotal
    from .data import DataPrep
    from .experiments import JobPage
    from .jobmodel import Job, JobSpec
    from .modes import SmokeResult
    from .pipelines import PipelineService
    from .watch import JobWatch

__all__ = ["Info", "JobsAcross", "LaunchPreview", "MixedPreview", "Starverse"]

#: How many job watches the facade keeps (one per job the server or a kernel looks at).
_MAX_WATCHES = 512


class Starverse(Services):
    """Entry point to every capability: the services of :class:`Services` and what uses them together.

    Parameters
    ----------
    settings
        Resolved configuration; ``Settings.from_env()`` when omitted.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__(settings)
        self._watches: collections.OrderedDict[tuple[str, str], JobWatch] = collections.OrderedDict()
        self._watches_lock = threading.Lock()

    # -- general -----------------------------------------------------------------
    def info(self) -> Info:
        """Version, store, default backend, current mode and currency, from the settings."""
        mode = self.modes.current()
        return Info(
            version=__version__,
            store=self.settings.store,
            experiments=str(self.settings.experiments),
            backend=self.settings.backend,
            mode=mode.kind,
            gpu_type=mode.gpu_type,
            currency=self.prices.currency,
            user=self.settings.user,
        )

    # -- what uses the areas together -------------------------------------------
    @functools.cached_property
    def data(self) -> DataPrep:
        """Data preparation: scan, clean, dedup and score store datasets into new versions."""
        from .data import DataPrep

        return DataPrep(
            self.settings,
            self.catalog,
            submit=lambda spec: self.launch(spec),
            wait=lambda job, timeout: self.backend(job.backend).wait(job.id, timeout=timeout),
        )

    def data_job(self, step: str, source: str, *, to: str | None = None, options: dict[str, Any] | None = None,
                 shards: tuple[int, int] = (1, 1), backend: str | None = None) -> Job:  # fmt: skip
        """Submit the whole data ``step`` as one job of ``shards`` (nodes, procs) ranks on ``backend``.

        Rank 0 runs the step as ``client.data`` would and publishes the version; the other ranks
        do their share of the documents. The source is a store dataset (every rank reads it from
        the store); what the job writes is ``to`` (default ``NAME@VERSION-STEP``). The one call of
        ``starverse data STEP --backend B``, the REST data routes and the panel.
        """
        from .data._job import default_target, job_spec, parse_shards

        name = backend or self.settings.backend
        shards = parse_shards(f"{shards[0]}x{shards[1]}", step=step)
        self.data.check(source, text_field=(options or {}).get("text_field"))
        self.catalog.entry(source)  # a store dataset: a folder is not on every node
        target = default_target(self.catalog, step, source, to)
        return self.launch(job_spec(step, source, to=target, options=options, shards=shards, backend=name),
                           backend=name)  # fmt: skip

    def align(
        self,
        feedback: str,
        *,
        model: str,
        method: str = "dpo",
        params: dict[str, object] | None = None,
        name: str | None = None,
        **job: Any,
    ) -> JobSpec:
        """The job that aligns ``model`` on a feedback version: ``dpo`` on its preference pairs,
        ``kto`` on its thumbs up/down labels, or ``reward`` (a reward model on the pairs).

        A log name (no ``@N``) is frozen into a new version first. ``job`` holds JobSpec fields
        (``procs_per_node``, ``accelerator``, ``steps``, ...); preview or launch the result on
        any backend, then ``recipes.publish`` stores the model with its lineage.
        """
        data = self.feedback.training_data(feedback, method)
        if method == "reward":
            return self.recipes.spec("reward", model=model, data=data, params=params, name=name, **job)
        return self.recipes.align(method, model=model, data=data, params=params, name=name, **job)

    @functools.cached_property
    def pipelines(self) -> PipelineService:
        """``.svpipeline`` documents: check, price, export (sbatch, YAML, Python) and run as dependent jobs."""
        import sys

        from .pipelines import PipelineService

        # a run started without waiting is driven by the CLI's hidden `pipeline drive RUN_ID`
        return PipelineService(self, driver=(sys.executable, "-m", "jupyter_starverse.cli", "pipeline", "drive"))

    def prepare(self, spec: JobSpec) -> JobSpec:
        """``spec`` as it is submitted: the CPU (gloo) or GPU (nccl/cuda) translation of its mode,
        with the exact version of every mount recorded (``mount_versions``)."""
        return self.modes.translate(self.pin_mounts(spec), mode=self.job_mode(spec))

    def pin_mounts(self, spec: JobSpec) -> JobSpec:
        """``spec`` with ``mount_versions``: each ``--mount NAME`` as the exact ``NAME@VERSION`` it means now.

        The job mounts that version even if a newer one appears before it starts, and its
        record (``spec.json``: ``jobs show``, the job list, the monitor) names it. A name the
        catalog does not know is left for the backend's own check (its error names the mount).
        """
        if not spec.mounts:
            return spec
        pinned = dict(spec.mount_versions)
        for name in spec.mounts:
            if name in pinned:
                continue
            try:
                pinned[name] = self.catalog.entry(name).ref
            except StarverseError:
                continue
        return dataclasses.replace(spec, mount_versions=pinned)

    def preview(
        self, spec: JobSpec, *, backend: str | LaunchBackend | None = None, output: str = "yaml"
    ) -> LaunchPreview:
        """What launching ``spec`` would start (``yaml``/``json``), its resume plan and its price; starts nothing."""
        from .experiments import ExperimentPaths, plan_resume

        warnings = secret_env_warnings(spec.env)  # the user's own env, before the mode adds its variables
        spec = self.prepare(spec)
        resume = None
        if spec.resume:
            exp = ExperimentPaths.of(self.settings.experiments, spec.experiment_name)
            resume = plan_resume(exp.root, new_world_size=spec.world_size, data_parallel=spec.data_parallel)
        target = self._target(backend)
        spec, env = self.envs.resolve(spec, target.env_target(spec), build=False)
        rendered = target.render(spec, output=output)
        cost, recipe = self.costs.preview_or_reason(spec), self.recipes.plan(spec)
        return LaunchPreview(output, rendered, resume, cost, recipe, warnings, env)

    def preview_mixed(
        self, spec: JobSpec, pools: str, *, backend: str | LaunchBackend | None = None, output: str = "yaml"
    ) -> MixedPreview:
        """The split plan of ``pools`` (``rtx4090:256,a100-80g:128``) for ``spec``: every pool's job
        rendered, priced and planned as :meth:`preview` does one (``costs.mixed_stages``)."""
        from .costs import mixed_stages, parse_pools

        stages = mixed_stages(spec, parse_pools(pools))
        return MixedPreview(output, tuple((st, self.preview(st.spec, backend=backend, output=output)) for st in stages))

    def launch_mixed(self, spec: JobSpec, pools: str, *, backend: str | LaunchBackend | None = None) -> list[Job]:
        """Submit the split plan of ``pools``: one job per pool, in the plan's order."""
        from .costs import mixed_stages, parse_pools

        return [self.launch(st.spec, backend=backend) for st in mixed_stages(spec, parse_pools(pools))]

    @overload
    def launch(
        self, spec: JobSpec, *, backend: str | LaunchBackend | None = ..., smoke: Literal[False] = ...
    ) -> Job: ...

    @overload
    def launch(
        self,
        spec: JobSpec,
        *,
        backend: str | LaunchBackend | None = ...,
        smoke: Literal[True],
        smoke_steps: int | None = ...,
        smoke_timeout: float | None = ...,
    ) -> SmokeResult: ...

    @overload
    def launch(
        self,
        spec: JobSpec,
        *,
        backend: str | LaunchBackend | None = ...,
        smoke: bool,
        smoke_steps: int | None = ...,
        smoke_timeout: float | None = ...,
    ) -> Job | SmokeResult: ...

    def launch(
        self,
        spec: JobSpec,
        *,
        backend: str | LaunchBackend | None = None,
        smoke: bool = False,
        smoke_steps: int | None = None,
        smoke_timeout: float | None = 600.0,
    ) -> Job | SmokeResult:
        """Submit ``spec``, translated for its mode, on ``backend`` (default backend when omitted).

        With ``smoke``, a few steps of it first run on local CPU processes, and the real job
        is submitted only if they pass (the one smoke-then-submit path of every front door).
        """
        target = self._target(backend)
        real = self.prepare(spec)
        # the job's environment and working folder, built once per hash before anything is billed
        real, _ = self.envs.resolve(real, target.env_target(real), build=True)
        if not smoke:
            return target.submit(real)
        from .modes import SMOKE_STEPS, make_smoke_spec, smoke_then_submit

        rehearsal = make_smoke_spec(spec, steps=smoke_steps or SMOKE_STEPS, cpu_image=self.settings.cpu_image)
        rehearsal = dataclasses.replace(rehearsal, env_id=real.env_id, workdir_id=real.workdir_id)  # the same env
        return smoke_then_submit(
            real, rehearsal, smoke_backend=self.backend("local"), backend=target, timeout=smoke_timeout
        )

    def job_backends(self) -> list[str]:
        """Backends a job list looks at: the default, local, Kubernetes or Slurm when configured,
        and every backend with a run folder in the experiments root (a job launched with
        ``--backend slurm`` is followed to its end even when Slurm is not the default)."""
        names = [self.settings.backend, "local"]
        if _kube_configured(self.settings):
            names.append("kubernetes")
        if self.settings.slurm_partitions or self.settings.slurm_account:
            names.append("slurm")  # a Slurm cluster this workspace submits to
        names += self._recorded_backends()
        return list(dict.fromkeys(names))

    def _recorded_backends(self, job_id: str | None = None) -> list[str]:
        """Backends the run records name (of ``job_id``, or of any job); [] when the root cannot be read."""
        from .backends import BACKENDS

        try:
            found = self.job_index.backends_of(job_id)
        except (OSError, StarverseError):
            return []
        return [name for name in found if name in BACKENDS]

    def list_jobs(self, *, backend: str | None = None) -> JobsAcross:
        """Jobs of ``backend``, or of every configured backend that answers, newest first.

        Without ``backend`` a backend that is not reachable (or whose client is not installed)
        becomes a note instead of a failure.
        """
        if backend is not None:
            return JobsAcross(tuple(self.backend(backend).list()))
        jobs: dict[tuple[str, str], Job] = {}
        notes: list[str] = []
        for name in self.job_backends():
            try:
                found = self.backend(name).list()
            except BackendUnavailableError as e:
                notes.append(f"{name}: not reachable ({e.message})")
                continue
            for job in found:
                jobs.setdefault((job.backend, job.id), job)
        ordered = sorted(jobs.values(), key=lambda j: j.created, reverse=True)
        return JobsAcross(tuple(ordered), tuple(notes))

    def job_page(
        self,
        *,
        state: tuple[str, ...] = (),
        backend: tuple[str, ...] = (),
        experiment: tuple[str, ...] = (),
        since: float | None = None,
        offset: int = 0,
        limit: int | None = None,
        sweep: bool | None = None,
    ) -> JobPage:
        """One page of the job list of every backend from the job index, newest first.

        Rows of unfinished jobs are asked of their backend (a job whose supervisor died, a
        pod that finished); a backend that does not answer leaves its row as cached, with a note.
        A run folder that cannot be read as a job is left out with a warning, never failing the page.
        """
        from .experiments import page_etag
        from .watch import job_summary

        page = self.job_index.page(
            state=state, backend=backend, experiment=experiment, since=since, offset=offset, limit=limit, sweep=sweep
        )
        configured = self.job_backends()
        items, notes, skipped = [], [], list(page.warnings)
        for row in page.items:
            if row.is_finished or row.backend not in configured:
                items.append(row)
                continue
            try:
                items.append(job_summary(self.backend(row.backend).get(row.id), row))
            except (BackendUnavailableError, NotFoundError) as e:
                notes.append(f"{row.backend}: not reachable, its jobs are shown as last recorded ({e.message})")
                items.append(row)
            except StarverseError as e:  # a malformed, foreign or unreadable run folder: not this page's failure
                skipped.append(f"{row.run_dir}: {e.message}")
        return dataclasses.replace(
            page,
            items=tuple(items),
            notes=tuple(dict.fromkeys(notes)),
            etag=page_etag(items, page.total, str(len(skipped))),
            warnings=tuple(skipped),
        )

    def keep_jobs(self) -> int:
        """One look at every unfinished Kubernetes job; returns how many were looked at.

        A Kubernetes job recovers in the cluster (the Job controller recreates a preempted or
        failed pod); this look only watches and reports: the job's row, its restarts and their
        lost work, read from the pods (a TrainJob's own TrainingRuntime carries its JobSet's
        restart rules, so it recovers in the cluster too). A JupyterLab server calls this every
        ``StarverseApp.keep_jobs_every`` seconds.
        """
        if "kubernetes" not in self.job_backends():
            return 0
        page = self.job_page(backend=("kubernetes",))
        return sum(1 for row in page.items if row.backend == "kubernetes")

    def cost_total(self, user: str | None = None) -> UserTotal:
        """What ``user`` spent on every backend: run folders of cluster jobs are metered first.

        The local supervisor writes each run's ``cost.json``; a Kubernetes or Slurm job of this
        user that has none yet is metered from its nodes' run times and recorded (a backend that
        does not answer is left out until it does).
        """
        from .costs import COST_FILE

        me = os.getuid() if hasattr(os, "getuid") else None
        configured = self.job_backends()
        for row in self.job_page(backend=("kubernetes", "slurm"), sweep=True).items:
            folder = Path(row.run_dir)
            if row.backend not in configured or (folder / COST_FILE).exists():
                continue
            try:
                if me is not None and folder.stat().st_uid != me:
                    continue  # another user's run: theirs to meter
                self.costs.record(self.backend(row.backend).get(row.id))
            except (OSError, StarverseError):
                continue
        return self.costs.total(user)

    def jobs(self, *, backend: str | None = None) -> list[Job]:
        """Jobs known to ``backend`` (default: every configured, reachable backend), newest first."""
        return list(self.list_jobs(backend=backend).jobs)

    def attach(self, job_id: str, *, backend: str | None = None) -> Job:
        """Re-attach to a job by id (from any process, after any restart), on whichever backend knows it."""
        if backend is not None:
            return self.backend(backend).get(job_id)
        missing: NotFoundError | None = None
        # the run folder's record names the job's backend: ask that one first, then the others
        for name in dict.fromkeys([*self._recorded_backends(job_id), *self.job_backends()]):
            try:
                return self.backend(name).get(job_id)
            except NotFoundError as e:
                missing = missing or e
            except BackendUnavailableError:
                continue
        if missing is not None:
            raise missing
        raise NotFoundError(f"no job {job_id!r}", hint="`starverse jobs ls` lists the jobs")

    def watch(self, job_id: str, *, backend: str | None = None) -> JobWatch:
        """A :class:`~jupyter_starverse.watch.JobWatch` of ``job_id``, one per job and facade.

        Kept across calls (up to 512 jobs), so repeated polls read only new metric lines.
        The id is not looked up here; the watch's first read raises ``NotFoundError``.
        """
        from .watch import JobWatch

        target = self.backend(backend)
        key = (target.name, job_id)
        with self._watches_lock:
            watch = self._watches.pop(key, None) or JobWatch(target, job_id, meter=self.costs.meter)
            self._watches[key] = watch
            while len(self._watches) > _MAX_WATCHES:
                self._watches.popitem(last=False)
        return watch


def _kube_configured(settings: Settings) -> bool:
    """Whether a Kubernetes connection is set up at all (reachability is found out by asking)."""
    if settings.backend == "kubernetes" or settings.kube_context:
        return True
    if os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return (Path.home() / ".kube" / "config").is_file()
