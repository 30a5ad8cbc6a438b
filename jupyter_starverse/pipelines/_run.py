"""Running a pipeline: its steps become jobs that start when the steps they wait for succeeded.

A run is a folder ``<home>/pipelines/<run id>/`` with ``run.json``: the pipeline as it was
started, the folder its relative paths are read from, and per step its job id once submitted
(or why it never was). One process writes it (the driver: ``pipeline run`` in the foreground,
or the detached driver the REST route starts); everyone reads it, and the jobs' own states
come from their backends, so a status survives any restart.

How steps wait: on Slurm a step whose inputs are Slurm jobs is submitted at once with
``--dependency=afterok`` (``JobSpec.after``); anywhere else the driver waits for the inputs to
finish and submits the step only when all of them succeeded (local: in order; Kubernetes: one
after another). A step after a failed one is ``skipped``.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse._format import pretty_text
from jupyter_starverse._procs import ProcessRecord, alive, process_record
from jupyter_starverse.errors import BadInputError, NotFoundError, StarverseError
from jupyter_starverse.jobmodel import Job, JobSpec, JobState

from ._evalstep import eval_job_spec, evaluate_here
from ._model import Pipeline
from ._plan import plan, step_plan
from ._prep import prep_backend, prep_job_spec, prep_output, prep_target, runs_as_job, writes_version
from ._records import StepPlan

if TYPE_CHECKING:
    from ._facade import Facade

__all__ = ["PipelineRun", "RunStore", "StepRun", "drive"]

_RUN_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-._"
WAITING, SKIPPED, NOT_SUBMITTED = "waiting", "skipped", "not_submitted"


@dataclass(frozen=True)
class StepRun:
    """One step of a run: its job once submitted, its state (a job state, ``waiting`` or ``skipped``)."""

    node: str
    backend: str
    state: str = WAITING
    job_id: str | None = None
    reason: str | None = None
    experiment_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "backend": self.backend, "state": self.state, "job_id": self.job_id,
                "reason": self.reason, "experiment_dir": self.experiment_dir}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepRun:
        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        return cls(str(data.get("node")), str(data.get("backend")), text("state") or WAITING, text("job_id"),
                   text("reason"), text("experiment_dir"))  # fmt: skip


@dataclass(frozen=True)
class PipelineRun:
    """A run of a pipeline: one :class:`StepRun` per step; ``state`` is the whole run's."""

    run_id: str
    name: str
    created: float
    steps: tuple[StepRun, ...]
    state: str = "running"
    driver: str | None = None  # "running", "gone" or None (finished / foreground)
    pipeline: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # why the driver stopped before submitting every step

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "name": self.name, "created": self.created, "state": self.state,
                "driver": self.driver, "error": self.error, "steps": [s.to_json() for s in self.steps]}  # fmt: skip

    def step(self, node: str) -> StepRun:
        return next(s for s in self.steps if s.node == node)

    def __str__(self) -> str:
        lines = [f"pipeline run {self.run_id} ({self.name}): {self.state}"]
        width = max((len(s.node) for s in self.steps), default=4)
        for s in self.steps:
            job = f"  {s.backend}:{s.job_id}" if s.job_id else ""
            why = f"  ({s.reason})" if s.reason and s.state not in ("succeeded",) else ""
            lines.append(f"  {s.node:<{width}}  {s.state:<10}{job}{why}")
        if self.error:
            lines.append(f"  the driver stopped: {self.error}")
        if self.driver == "gone":
            lines.append("  the driver that submits the next steps is gone: `starverse pipeline run` again")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


def overall(steps: tuple[StepRun, ...]) -> str:
    """``succeeded`` when every step did; ``failed`` when one failed, was cancelled or skipped; else ``running``."""
    states = [s.state for s in steps]
    if all(s == "succeeded" for s in states):
        return "succeeded"
    if any(s in ("failed", "cancelled", SKIPPED, NOT_SUBMITTED) for s in states) and not any(
        s in (WAITING, "pending", "running", "preempted", "resuming") for s in states
    ):
        return "failed"
    return "running"


class RunStore:
    """Run folders under ``<home>/pipelines``: create, read, write (temp + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, run_id: str) -> Path:
        if (not isinstance(run_id, str) or not run_id[:1].isalnum() or len(run_id) > 128
                or set(run_id) - set(_RUN_ID_CHARS)):  # fmt: skip
            raise NotFoundError(f"no pipeline run {run_id!r}", hint="`starverse pipeline runs` lists them")
        return self.root / run_id

    def new(self, pipeline: Pipeline, steps: list[StepPlan], base_dir: Path) -> str:
        from jupyter_starverse.jobmodel._spec import job_name_of

        run_id = f"{job_name_of(pipeline.name)[:40]}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-"
        run_id += secrets.token_hex(4)
        self.folder(run_id).mkdir(parents=True, exist_ok=False)
        self.write(run_id, {
            "run_id": run_id, "name": pipeline.name, "created": time.time(), "base_dir": str(base_dir),
            "pipeline": pipeline.to_json(), "driver": None,
            "steps": [StepRun(s.node, s.backend).to_json() for s in steps],
        })  # fmt: skip
        return run_id

    def read(self, run_id: str) -> dict[str, Any]:
        path = self.folder(run_id) / "run.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise NotFoundError(f"no pipeline run {run_id!r}", hint="`starverse pipeline runs` lists them") from None
        if not isinstance(data, dict):
            raise StarverseError(f"{path} is not a run record", hint="remove the folder and run the pipeline again")
        return data

    def write(self, run_id: str, data: dict[str, Any]) -> None:
        path = self.folder(run_id) / "run.json"
        tmp = path.with_name(f".run.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        tmp.replace(path)

    def ids(self) -> list[str]:
        """The id of every run folder with a record, in no particular order."""
        if not self.root.is_dir():
            return []
        return [p.name for p in self.root.iterdir() if (p / "run.json").is_file()]


def _set_step(store: RunStore, run_id: str, step: StepRun) -> None:
    data = store.read(run_id)
    data["steps"] = [step.to_json() if s["node"] == step.node else s for s in data["steps"]]
    store.write(run_id, data)


def drive(facade: Facade, store: RunStore, run_id: str, *, poll: float = 0.5,
          on_change: Callable[[str, StepRun], None] | None = None) -> None:  # fmt: skip
    """Submit each step of run ``run_id`` once the steps it waits for succeeded; return when all are done.

    The one loop behind ``pipeline run`` (foreground) and the detached driver of the REST route.
    """
    data = store.read(run_id)
    pipeline = Pipeline.from_json(data["pipeline"])
    steps = plan(pipeline, facade, base_dir=Path(data["base_dir"]))
    data["driver"] = process_record(os.getpid()).to_json()
    store.write(run_id, data)
    jobs: dict[str, Job] = {}
    failed: dict[str, str] = {}

    last: dict[str, tuple[str, str | None]] = {}

    def record(step: StepRun) -> None:
        if last.get(step.node) == (step.state, step.job_id):
            return
        last[step.node] = (step.state, step.job_id)
        _set_step(store, run_id, step)
        if on_change is not None:
            on_change(step.node, step)

    def submit(node_id: str, make: Callable[[], JobSpec], on: str, deps: list[str], chain: bool) -> bool:
        """Launch one step's job (after ``deps`` when the backend chains them); a refusal is recorded."""
        try:
            spec = make()
            if chain:
                spec = spec.replace(after=[jobs[a].id for a in deps])
            job = facade.launch(spec, backend=on)
        except StarverseError as e:
            failed[node_id] = e.message
            record(StepRun(node_id, on, NOT_SUBMITTED, reason=f"{e.message} ({e.hint})"))
            return False
        jobs[node_id] = job
        record(_step_of(node_id, job))
        return True

    produced: dict[str, str] = {}  # prep node -> the dataset version it wrote
    prep_out: dict[str, str] = {}  # prep job -> the version it writes (once it succeeds)
    base_dir = Path(data["base_dir"])
    try:
        for step in steps:
            bad = [a for a in step.after if a in failed]
            if bad:
                failed[step.node] = f"after {bad[0]}, which did not succeed"
                record(StepRun(step.node, step.backend, SKIPPED, reason=failed[step.node]))
                continue
            node = pipeline.by_id[step.node]
            as_job = step.prep is not None and runs_as_job(pipeline, node)
            backend = prep_backend(pipeline, node) if as_job else step.backend
            job_deps = [a for a in step.after if a in jobs]  # prep steps run here have already finished
            chain = backend == "slurm" and all(jobs[a].backend == "slurm" for a in job_deps)
            if step.prep is None and any(a in prep_out for a in job_deps):
                chain = False  # it mounts what a prep job writes: wait until that exists
            if not chain:  # wait here for the inputs, and go on only when they all succeeded
                for dep in job_deps:
                    jobs[dep] = done = _wait(facade, jobs[dep], poll)
                    record(_step_of(dep, done))
                    if done.state != JobState.SUCCEEDED:
                        failed[dep] = done.reason or done.state.value
                    elif dep in prep_out:
                        produced[dep] = prep_out[dep]
                bad = [a for a in step.after if a in failed]
                if bad:
                    failed[step.node] = f"after {bad[0]}, which did not succeed"
                    record(StepRun(step.node, step.backend, SKIPPED, reason=failed[step.node]))
                    continue
            if step.evaluation is not None:  # after the step it scores: here (local) or as a job
                ev = step.evaluation
                data_ref = (prep_out.get(ev.data_from) or produced.get(ev.data_from)) if ev.data_from else None
                if step.backend == "local":
                    record(StepRun(step.node, step.backend, "running", reason=f"eval {ev.model} on {ev.data}"))
                    try:
                        line = evaluate_here(facade, ev, data=data_ref)
                    except StarverseError as e:
                        failed[step.node] = e.message
                        record(StepRun(step.node, step.backend, "failed", reason=f"{e.message} ({e.hint})"))
                        continue
                    record(StepRun(step.node, step.backend, "succeeded", reason=line))
                    continue
                submit(step.node, partial(eval_job_spec, pipeline, node, ev, facade, data=data_ref),
                       step.backend, job_deps, chain)  # fmt: skip
                continue
            if step.prep is not None and not as_job:
                _prepare(facade, run_id, pipeline, step, produced, failed, record)
                continue
            if step.prep is not None:  # a prep job: its source and target are store references
                prep = step.prep
                source = prep_out.get(prep.from_node) or produced.get(prep.from_node) if prep.from_node else None
                source = source or prep.source
                target = prep_target(source, prep.step, "-".join(run_id.split("-")[-3:]), step.node)
                make = partial(prep_job_spec, pipeline, node, prep, source=source, target=target, backend=backend)
                if submit(step.node, make, backend, job_deps, chain):
                    prep_out[step.node] = prep_output(source, prep.step, target)
                continue
            if produced:  # mount what the prep steps before it wrote, not their stand-ins
                paths = {ref: facade.catalog.status(ref).path for ref in produced.values()}
                node = pipeline.by_id[step.node]
                step = step_plan(pipeline, node, base_dir=base_dir, facade=facade, paths=paths, produced=produced)
            assert step.spec is not None
            submit(step.node, step.spec.replace, step.backend, job_deps, chain)
        for node_id, job in jobs.items():
            record(_step_of(node_id, _wait(facade, job, poll)))
    except BaseException as e:  # recorded for every reader, then raised as usual
        data = store.read(run_id)
        data["error"] = f"{type(e).__name__}: {getattr(e, 'message', None) or e}"[:2000]
        store.write(run_id, data)
        raise
    finally:
        data = store.read(run_id)
        data["driver"] = None
        data["finished"] = time.time()
        store.write(run_id, data)


def _prepare(facade: Facade, run_id: str, pipeline: Pipeline, step: StepPlan, produced: dict[str, str],
             failed: dict[str, str], record: Callable[[StepRun], None]) -> None:  # fmt: skip
    """Run a data preparation step here; what it wrote is what the steps after it mount."""
    prep = step.prep
    assert prep is not None
    source = produced.get(prep.from_node, prep.source) if prep.from_node else prep.source
    name = source.split("@")[0]
    target = prep_target(name, prep.step, "-".join(run_id.split("-")[-3:]), step.node)  # one version per run
    record(StepRun(step.node, step.backend, "running", reason=f"{prep.step} {source} -> {target}"))
    try:
        to = {"to": target} if writes_version(prep.step) else {}
        report = getattr(facade.data, prep.step)(source, **to, **prep.options)
    except (StarverseError, TypeError) as e:
        failed[step.node] = str(getattr(e, "message", e))
        record(StepRun(step.node, step.backend, "failed", reason=failed[step.node]))
        return
    produced[step.node] = prep_output(source, prep.step, str(report.output or target))
    done = f"wrote {produced[step.node]} ({report.docs_out} of {report.docs_in} documents), report {report.id}"
    record(StepRun(step.node, step.backend, "succeeded", reason=done))


def _step_of(node: str, job: Job) -> StepRun:
    return StepRun(node, job.backend, job.state.value, job.id, job.reason, job.experiment_dir)


def _wait(facade: Facade, job: Job, poll: float) -> Job:
    backend = facade.backend(job.backend)
    while True:
        current = backend.get(job.id)
        if current.state.finished:
            return current
        time.sleep(poll)


def status(facade: Facade, store: RunStore, run_id: str) -> PipelineRun:
    """The run with every submitted step's live state from its backend."""
    data = store.read(run_id)
    steps: list[StepRun] = []
    for raw in data.get("steps", []):
        step = StepRun.from_json(raw)
        if step.job_id and step.state not in ("succeeded", "failed", "cancelled"):
            try:
                step = _step_of(step.node, facade.backend(step.backend).get(step.job_id))
            except StarverseError as e:
                step = StepRun(step.node, step.backend, step.state, step.job_id, f"state unknown: {e.message}")
        steps.append(step)
    driver: str | None = None
    rec = ProcessRecord.from_json(data.get("driver"))
    if rec is not None:
        driver = "gone" if alive(rec) is False else "running"
    state = overall(tuple(steps))
    ended = driver == "gone" or data.get("finished") is not None
    active = any(s.job_id and s.state not in ("succeeded", "failed", "cancelled") for s in steps)
    if ended and state == "running" and not active:  # nobody is left to submit the waiting steps
        state = "stopped"
    if data.get("cancelled") is not None and not active:
        state = "cancelled"
    error = data.get("error") if isinstance(data.get("error"), str) else None
    return PipelineRun(data["run_id"], data.get("name", ""), float(data.get("created", 0)), tuple(steps), state,
                       driver, data.get("pipeline", {}), error)  # fmt: skip


def check_base_dir(base_dir: Path) -> Path:
    if not base_dir.is_dir():
        raise BadInputError(f"{base_dir} is not a folder", field="base_dir",
                            hint="relative script paths are read from the pipeline file's folder")  # fmt: skip
    return base_dir.resolve()
