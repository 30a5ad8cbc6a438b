"""The one facade every front door (CLI, magics, widgets, REST) goes through.

``Starverse`` holds a :class:`~jupyter_starverse._settings.Settings` and builds the
services of each area lazily, once. It holds no job or catalog state of its own: the
truth lives on the store, in experiment folders and in the cluster, so two facades in
two processes see the same world.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._settings import Settings
from ._version import __version__

if TYPE_CHECKING:
    from .catalog import Catalog
    from .costs import CostService, PriceTable
    from .launch import Job, JobSpec, LaunchBackend
    from .modes import Mode, ModeService
    from .modes._jobs import SmokeResult

__all__ = ["Starverse", "Info"]


@dataclass(frozen=True)
class Info:
    """What ``GET /jupyter-starverse/info``, ``starverse info`` and ``%sv info`` show."""

    version: str
    store: str
    experiments: str
    backend: str
    mode: str
    gpu_type: str | None
    currency: str
    user: str

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "store": self.store,
            "experiments": self.experiments,
            "backend": self.backend,
            "mode": self.mode,
            "gpu_type": self.gpu_type,
            "currency": self.currency,
            "user": self.user,
        }

    def __str__(self) -> str:
        width = max(len(k) for k in self.to_json())
        return "\n".join(f"{k:<{width}}  {'-' if v is None else v}" for k, v in self.to_json().items())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


class Starverse:
    """Entry point to every capability.

    Parameters
    ----------
    settings
        Resolved configuration; ``Settings.from_env()`` when omitted.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else Settings.from_env()

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

    # -- areas -------------------------------------------------------------------
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

    def backend(self, name: str | None = None) -> LaunchBackend:
        """The launch backend ``name`` (default: ``settings.backend``), built once."""
        return self._backend(name or self.settings.backend)

    @functools.cache  # noqa: B019 - one facade per settings, lives as long
    def _backend(self, name: str) -> LaunchBackend:
        from .launch import make_backend

        return make_backend(name, self.settings)

    def default_accelerator(self) -> str:
        """What a job runs on when it names no GPU type: the workspace mode's accelerator."""
        return self.modes.current().accelerator

    def job_mode(self, spec: JobSpec) -> Mode:
        """The mode a job runs in: its own accelerator decides (a CPU notebook may launch GPU pods)."""
        from .modes import Mode

        return Mode("gpu", spec.accelerator, spec.procs_per_node) if spec.is_gpu else Mode("cpu")

    def prepare(self, spec: JobSpec) -> JobSpec:
        """``spec`` as it is submitted: the CPU (gloo) or GPU (nccl/cuda) translation of its mode."""
        return self.modes.translate(spec, mode=self.job_mode(spec))

    def launch(self, spec: JobSpec, *, backend: str | None = None) -> Job:
        """Submit ``spec`` (translated for its mode) on ``backend`` (default backend when omitted)."""
        return self.backend(backend).submit(self.prepare(spec))

    def smoke_launch(
        self, spec: JobSpec, *, backend: str | LaunchBackend | None = None, steps: int | None = None
    ) -> SmokeResult:
        """Run a few steps of ``spec`` on local CPU processes first; submit the real job only if they pass."""
        from .launch import LaunchBackend
        from .modes._jobs import SMOKE_STEPS, smoke_then_submit

        target = backend if isinstance(backend, LaunchBackend) else self.backend(backend)

        return smoke_then_submit(
            spec,
            mode=self.job_mode(spec),
            smoke_backend=self.backend("local"),
            backend=target,
            steps=steps or SMOKE_STEPS,
            cpu_image=self.settings.cpu_image,
        )

    def jobs(self, *, backend: str | None = None) -> list[Job]:
        """Jobs known to ``backend``, newest first."""
        return self.backend(backend).list()

    def attach(self, job_id: str, *, backend: str | None = None) -> Job:
        """Re-attach to a job by id (from any process, after any restart)."""
        return self.backend(backend).get(job_id)
