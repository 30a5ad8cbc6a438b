"""``client.pipelines``: load, check, price, export and run ``.svpipeline`` documents."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import BadInputError, NotFoundError

from ._check import check
from ._export import PipelineExport, export
from ._model import Pipeline
from ._plan import pin_entries, plan
from ._records import PipelineCheck
from ._run import PipelineRun, RunStore, StepRun, check_base_dir, drive, status

if TYPE_CHECKING:
    from ._facade import Facade

__all__ = ["PipelineService", "load"]

_MAX_FILE = 4 * 1024 * 1024


def load(path: str | Path) -> tuple[Pipeline, Path]:
    """The pipeline in file ``path`` and the folder its relative paths are read from."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise NotFoundError(f"no pipeline file {str(path)!r}", hint="give the path of a .svpipeline file")
    if file.stat().st_size > _MAX_FILE:
        raise BadInputError(f"{file} is larger than {_MAX_FILE // (1024 * 1024)} MiB", field="pipeline",
                            hint="a pipeline file holds nodes and edges, not data")  # fmt: skip
    return Pipeline.loads(file.read_text(encoding="utf-8")), file.parent.resolve()


class PipelineService:
    """Pipelines composed of the facade's services.

    Parameters
    ----------
    facade
        The ``Starverse`` facade (catalog, costs, preview, launch, backends).
    driver
        The command that drives a run detached from the caller (the CLI's hidden
        ``pipeline drive RUN_ID``); the run id is appended.
    """

    def __init__(self, facade: Facade, *, driver: Sequence[str] | None = None) -> None:
        self.facade = facade
        self.store = RunStore(Path(facade.settings.home) / "pipelines")
        self._driver = tuple(driver) if driver is not None else None

    def load(self, path: str | Path) -> tuple[Pipeline, Path]:
        """The pipeline in file ``path`` and its folder."""
        return load(path)

    def pin(self, pipeline: Pipeline) -> tuple[Pipeline, dict[str, str]]:
        """``pipeline`` with each bare dataset / model name pinned to its exact version now (``params.pinned``),
        and the pins made (node -> ``NAME@VERSION``): what a first run keeps in the pipeline file."""
        return pin_entries(pipeline, self.facade)

    def check(self, pipeline: Pipeline, *, base_dir: Path) -> PipelineCheck:
        """Issues pinned to nodes (data x tensor x pipeline = cards, GPU pool, dataset) and the cost."""
        return check(pipeline, self.facade, base_dir=check_base_dir(base_dir))

    def export(self, pipeline: Pipeline, fmt: str, *, base_dir: Path) -> PipelineExport:
        """``sbatch`` (submit.sh + a script per step), ``yaml`` (Kubernetes) or ``python`` (the API)."""
        return export(pipeline, self.facade, fmt=fmt, base_dir=check_base_dir(base_dir))

    def run(self, pipeline: Pipeline, *, base_dir: Path, wait: bool = True, backend: str | None = None,
            on_change: Callable[[str, StepRun], None] | None = None) -> PipelineRun:  # fmt: skip
        """Run every step as a job after the steps it waits for.

        ``wait``: drive the run here until every step finished; otherwise a detached driver
        does it and this returns the run as started. ``backend`` replaces the pipeline's default.
        Refused, starting nothing, when the check finds an error.
        """
        if backend is not None:
            pipeline = Pipeline(pipeline.name, pipeline.nodes, pipeline.edges, backend)
        pipeline, _ = self.pin(pipeline)  # the run (and its record) reads exact versions
        base_dir = check_base_dir(base_dir)
        found = check(pipeline, self.facade, base_dir=base_dir)
        errors = [i for i in found.issues if i.level == "error"]
        if errors:
            raise BadInputError(
                f"pipeline {pipeline.name!r} cannot run: {errors[0]}"
                + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                field=errors[0].field, hint=errors[0].hint or "`starverse pipeline validate FILE` lists every issue",
            )  # fmt: skip
        run_id = self.store.new(pipeline, plan(pipeline, self.facade, base_dir=base_dir), base_dir)
        if wait:
            drive(self.facade, self.store, run_id, on_change=on_change)
        else:
            self._detach(run_id)
        return self.status(run_id)

    def _detach(self, run_id: str) -> None:
        if self._driver is None:
            raise BadInputError("this facade cannot start a detached driver", hint="run with wait=True")
        log = self.store.folder(run_id) / "driver.log"
        with log.open("ab") as out:
            subprocess.Popen(
                [*self._driver, run_id],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                env=self._env(),
            )

    def _env(self) -> dict[str, str]:
        import os

        return {**os.environ, **self.facade.settings.to_env()}

    def drive(self, run_id: str) -> PipelineRun:
        """Drive run ``run_id`` to its end here (what the detached driver runs)."""
        drive(self.facade, self.store, run_id)
        return self.status(run_id)

    def status(self, run_id: str) -> PipelineRun:
        """Every step's state, live from its backend."""
        return status(self.facade, self.store, run_id)

    def runs(self) -> list[PipelineRun]:
        """Every run, newest first: by when it was created, not by its id (whose name and random
        tail would put ``b-…`` after ``a-…``, or two runs of one second in either order)."""
        return sorted((self.status(run_id) for run_id in self.store.ids()), key=lambda r: (r.created, r.run_id),
                      reverse=True)  # fmt: skip

    def cancel(self, run_id: str) -> PipelineRun:
        """Cancel every submitted step that has not finished; steps not yet submitted never will be."""
        from jupyter_starverse._procs import ProcessRecord, alive, stop_pids

        rec = ProcessRecord.from_json(self.store.read(run_id).get("driver"))
        if rec is not None and alive(rec):  # first the driver, so that it submits nothing more
            stop_pids([rec.pid], grace=5.0)
        for step in self.status(run_id).steps:
            if step.job_id and step.state not in ("succeeded", "failed", "cancelled"):
                self.facade.backend(step.backend).cancel(step.job_id)
        data = self.store.read(run_id)
        data["cancelled"] = time.time()
        data["steps"] = [
            {**s, "state": "skipped", "reason": "the run was cancelled"} if not s.get("job_id") else s
            for s in data["steps"]
        ]
        self.store.write(run_id, data)
        return self.status(run_id)

    def info(self) -> dict[str, Any]:
        """What the palette offers: step kinds and entry kinds."""
        from ._model import ENTRY_KINDS, STEP_KINDS

        return {"steps": list(STEP_KINDS), "entries": list(ENTRY_KINDS)}
