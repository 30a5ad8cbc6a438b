"""The services of the facade: each area's service built once, from one Settings, and the backends.

:class:`Services` is the base of :class:`~jupyter_starverse.client.Starverse`: it wires the
catalog, prices and costs, modes, job environments, feedback and chats, exports, evals,
serving, recipes, the job index and the launch backends, each lazily and once, and holds
nothing else. What uses them together (previews, launches, job lists, watches) is the
facade's, in ``client.py``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ._settings import Settings
from .jobmodel import LaunchBackend

if TYPE_CHECKING:
    from .catalog import Catalog
    from .costs import CostService, PriceTable
    from .envs import JobEnvs
    from .evals import EvalService
    from .experiments import JobIndex
    from .export import ExportService
    from .feedback import ChatSessions, FeedbackService
    from .jobmodel import JobSpec
    from .modes import Mode, ModeService
    from .recipes import RecipeService
    from .serve import ServeService

__all__ = ["Services"]


class Services:
    """Each area's service of one :class:`Settings`, built on first use (``Settings.from_env()`` when omitted)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else Settings.from_env()

    @functools.cached_property
    def modes(self) -> ModeService:
        """Current GPU/CPU mode of the workspace and how to switch it."""
        from .modes import ModeService

        return ModeService(self.settings)

    @property
    def mode(self) -> Mode:
        """Shortcut for ``modes.current()``."""
        return self.modes.current()

    @functools.cached_property
    def prices(self) -> PriceTable:
        """The price table in force (shipped defaults or the operator's file)."""
        from .costs import load_price_table

        return load_price_table(self.settings)

    @functools.cached_property
    def costs(self) -> CostService:
        """Estimates, comparisons, the live meter, per-user totals and budget caps."""
        from .costs import CostService

        return CostService(self.settings, table=self.prices)

    @functools.cached_property
    def catalog(self) -> Catalog:
        """Datasets and models on the shared store."""
        from .catalog import Catalog

        return Catalog(self.settings)

    @functools.cached_property
    def envs(self) -> JobEnvs:
        """Job environments (the notebook's packages a job's image lacks) and working folders on the store."""
        from .envs import JobEnvs

        return JobEnvs(self.settings)

    @functools.cached_property
    def feedback(self) -> FeedbackService:
        """Thumbs up/down logs on the store: record, table, versions, preference pairs and labels."""
        from .feedback import FeedbackService

        return FeedbackService(self.settings, self.catalog)

    @functools.cached_property
    def chats(self) -> ChatSessions:
        """Chat sessions of this process: a model in a worker process of its own, or a served endpoint."""
        from .feedback import ChatSessions

        return ChatSessions(self.settings, self.catalog, endpoints=lambda eid: self.serve.target(eid))

    @functools.cached_property
    def export(self) -> ExportService:
        """ONNX exports (fp32, weight-only INT8/INT4) with a parity report, stored as model versions."""
        from .export import ExportService

        return ExportService(self.settings, self.catalog, self.feedback)

    @functools.cached_property
    def evals(self) -> EvalService:
        """Evaluations of models on labelled store datasets, with baselines, stored reports and the export gate."""
        from .evals import EvalService

        return EvalService(self.settings, self.catalog)

    @functools.cached_property
    def serve(self) -> ServeService:
        """OpenAI-compatible endpoints of store models: here (a detached process each), Kubernetes and Slurm."""
        from .serve import ServeService

        return ServeService(self.settings, self.catalog, prices=lambda: self.prices)

    @functools.cached_property
    def recipes(self) -> RecipeService:
        """Training recipes (CPT, SFT, DPO, KTO, reward, LLaMA-Factory, Megatron, reproductions) as JobSpecs."""
        from .recipes import RecipeService

        return RecipeService(self.settings, catalog=self.catalog, costs=self.costs)

    def backend(self, name: str | None = None, *, port: int | None = None) -> LaunchBackend:
        """The launch backend ``name`` (default: ``settings.backend``), built once.

        ``port`` pins the local backend's rendezvous port (a new backend object each time).
        """
        if port is not None:
            from .backends import make_backend

            return make_backend(name or self.settings.backend, self.settings, port=port)
        return self._backend(name or self.settings.backend)

    @functools.cache  # noqa: B019 - one facade per settings, lives as long
    def _backend(self, name: str) -> LaunchBackend:
        from .backends import make_backend

        return make_backend(name, self.settings)

    def _target(self, backend: str | LaunchBackend | None) -> LaunchBackend:
        return backend if isinstance(backend, LaunchBackend) else self.backend(backend)

    def default_accelerator(self) -> str:
        """What a job runs on when it names no GPU type: the workspace mode's accelerator."""
        return self.modes.current().accelerator

    def job_mode(self, spec: JobSpec) -> Mode:
        """The mode a job runs in: its own accelerator decides (a CPU notebook may launch GPU pods)."""
        from .modes import Mode

        return Mode("gpu", spec.accelerator, spec.procs_per_node) if spec.is_gpu else Mode("cpu")

    @functools.cached_property
    def job_index(self) -> JobIndex:
        """Cached summaries of every run folder of the experiments root (see ``experiments.JobIndex``).

        A folder whose spec the job model refuses is left out with a warning (``JobPage.warnings``).
        """
        from .experiments import JobIndex
        from .jobmodel import JobSpec

        return JobIndex(self.settings.experiments, check=JobSpec.from_json)
