"""What a pipeline needs of the facade (``client.Starverse`` satisfies it; no import of it here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.catalog import Catalog
    from jupyter_starverse.costs import CostService
    from jupyter_starverse.data import DataPrep
    from jupyter_starverse.jobmodel import Job, JobSpec, LaunchBackend
    from jupyter_starverse.recipes import RecipeService

__all__ = ["Evaluator", "Facade", "Rendered"]


class Rendered(Protocol):
    """A dry run's rendered plan (``client.LaunchPreview``)."""

    @property
    def rendered(self) -> str: ...


class Evaluator(Protocol):
    """What an ``eval`` step needs of ``client.evals`` (evals is a sibling floor: no import of it)."""

    def evaluate(self, model: str, data: str, *, task: str = ..., input_field: str = ..., target_field: str = ...,
                 limit: int | None = ...) -> Any: ...  # fmt: skip

    def job_spec(self, model: str, data: str, *, task: str = ..., input_field: str = ..., target_field: str = ...,
                 limit: int | None = ..., experiment: str | None = ...,
                 accelerator: str = ...) -> JobSpec: ...  # fmt: skip


class Facade(Protocol):
    """The services a pipeline composes: the catalog, prices, the backends' renderers and launch."""

    settings: Settings

    @property
    def catalog(self) -> Catalog: ...

    @property
    def costs(self) -> CostService: ...

    @property
    def recipes(self) -> RecipeService: ...

    @property
    def data(self) -> DataPrep: ...

    @property
    def evals(self) -> Evaluator: ...

    def default_accelerator(self) -> str: ...

    def preview(self, spec: JobSpec, *, backend: str | None = ..., output: str = ...) -> Rendered: ...

    def launch(self, spec: JobSpec, *, backend: str | None = ...) -> Job: ...

    def backend(self, name: str | None = ..., *, port: int | None = ...) -> LaunchBackend: ...
