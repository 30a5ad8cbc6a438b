"""What is wrong with each node of a pipeline before anything runs (:func:`check`).

The catalog says whether the entries a node names are there, the backends' own renderers whether
its job can start there (GPU pool, Slurm partition, script, mounts), the data and evaluation
services whether their step's inputs hold, and the price table what the step costs; every
finding is an :class:`~._records.Issue` pinned to a node and the form field it concerns, so the
canvas shows it on the node.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse.errors import BadInputError, StarverseError
from jupyter_starverse.jobmodel import secret_env_warnings

from ._model import Node, Pipeline
from ._plan import data_inputs, entry_paths, parallel_issue, step_plan
from ._records import Issue, PipelineCheck, PrepPlan, StepCost, StepPlan

if TYPE_CHECKING:
    from ._facade import Facade

__all__ = ["check"]

# JobSpec / backend error fields -> the node form's field.
_FIELD = {
    "accelerator": "gpu",
    "gpu_type": "gpu",
    "procs_per_node": "gpus_per_node",
    "mounts": "data",
    "script": "script",
    "nodes": "nodes",
    "tensor_parallel": "tensor_parallel",
    "pipeline_parallel": "pipeline_parallel",
    "template": "template",
    "budget": "budget",
    "billing": "billing",
    "steps": "steps",
    "env": "env",
    "secrets": "secrets",
    "name": "name",
    "experiment": "experiment",
    "model": "model",
    "data": "data",
    "recipe": "recipe",
    "hours": "hours",
    "task": "task",
    "input_field": "input_field",
    "target_field": "target_field",
    "limit": "limit",
    "labels": "task",
}


def check(pipeline: Pipeline, facade: Facade, *, base_dir: Path) -> PipelineCheck:
    """Every issue of ``pipeline`` (pinned to nodes) and its cost; starts nothing."""
    issues: list[Issue] = []
    info: dict[str, dict[str, Any]] = {}
    paths = entry_paths(pipeline, facade, issues, info)  # an entry's info: its pin and the newest original
    bad_entries = {i.node for i in issues if i.level == "error"}
    costs: list[StepCost] = []
    currency = facade.costs.prices.currency
    low = high = Decimal(0)
    unpriced: list[str] = []
    if not pipeline.steps:
        issues.append(Issue(None, "the pipeline has no step", hint="drag a training step from the palette"))
    for node in pipeline.steps:
        parallel = parallel_issue(node)
        if parallel:
            issues.append(parallel)
        waits = [n.id for n in pipeline.inputs(node.id) if n.id in bad_entries]
        try:
            step = step_plan(pipeline, node, base_dir=base_dir, paths=paths, facade=facade)
        except BadInputError as e:
            issues.append(Issue(node.id, e.message.removeprefix("JobSpec."), field=_FIELD.get(e.field or ""),
                                hint=e.hint))  # fmt: skip
            unpriced.append(node.id)
            continue
        if step.prep is not None:
            _check_prep(node, step.prep, facade, issues, info, costs, waits)
            continue
        if step.evaluation is not None:
            _check_eval(node, step, facade, issues, info, costs, waits)
            continue
        spec = step.spec
        assert spec is not None
        for warning in secret_env_warnings(dict(node.params.get("env") or {}), source="env", flag="secrets"):
            issues.append(Issue(node.id, warning, "warning", "env"))
        produced_by = {ref: prep for _, ref, prep in data_inputs(pipeline, node, {}) if prep}
        dp = spec.world_size // (spec.tensor_parallel * spec.pipeline_parallel) if not parallel else None
        info[node.id] = {"cards": spec.world_size, "data_parallel": dp, "tensor_parallel": spec.tensor_parallel,
                         "pipeline_parallel": spec.pipeline_parallel, "backend": step.backend,
                         "accelerator": spec.accelerator, "job_name": spec.name, "mounts": list(spec.mounts),
                         "paths": {ref: paths.get(ref) for ref in spec.mounts}, "script": spec.script,
                         "produced_by": produced_by}  # fmt: skip
        if waits:
            issues.append(Issue(node.id, f"its input {', '.join(waits)} is not ready", field="data"))
        else:
            try:  # the backend's own checks: GPU pool or partition, script, mounts, secrets
                facade.preview(spec.replace(after=()), backend=step.backend, output=_output(step.backend))
            except BadInputError as e:
                issues.append(Issue(node.id, e.message.removeprefix("JobSpec."), field=_FIELD.get(e.field or ""),
                                    hint=e.hint))  # fmt: skip
            except StarverseError as e:
                issues.append(Issue(node.id, f"{step.backend}: {e.message}", field="backend", hint=e.hint))
        priced = facade.costs.preview_or_reason(spec, int(step.hours * 3600))
        if isinstance(priced, str):
            costs.append(StepCost(node.id, None, priced))
            unpriced.append(node.id)
            issues.append(Issue(node.id, priced, "warning", "gpu"))
            continue
        costs.append(StepCost(node.id, priced))
        if priced.estimate is not None:
            low += priced.estimate.low
            high += priced.estimate.high
        if priced.warning:
            issues.append(Issue(node.id, priced.warning, "warning", "budget"))
    return PipelineCheck(pipeline.name, tuple(issues), tuple(costs), currency, low, high, tuple(unpriced), info)


def _check_prep(node: Node, prep: PrepPlan, facade: Facade, issues: list[Issue], info: dict[str, dict[str, Any]],
                costs: list[StepCost], waits: list[str]) -> None:  # fmt: skip
    """A data preparation step: its input is ready, and how long it takes here (a timed sample)."""
    from jupyter_starverse.data._job import parse_shards

    info[node.id] = {"step": prep.step, "source": prep.source, "from_node": prep.from_node, "seconds": None}
    shards = node.params.get("shards")
    ranks = 1
    if shards not in (None, ""):
        try:
            nodes, procs = parse_shards(shards, step=prep.step)
            ranks = nodes * procs
        except BadInputError as e:
            issues.append(Issue(node.id, e.message, field="shards", hint=e.hint))
    info[node.id]["shards"] = ranks
    where = "in the workspace" if shards in (None, "") and not node.params.get("backend") else f"as {ranks} CPU rank(s)"
    costs.append(StepCost(node.id, None, f"runs {where}: no GPU rented"))
    if waits or not prep.source:
        issues.append(Issue(node.id, f"its input {', '.join(waits) or '(none)'} is not ready", field="data"))
        return
    try:
        est = facade.data.estimate(prep.step, prep.source, **prep.options)
    except TypeError as e:
        issues.append(Issue(node.id, f"{prep.step}: {e}", field="options", hint=f"`starverse data {prep.step} --help`"))
        return
    except StarverseError as e:
        field = _FIELD.get(getattr(e, "field", None) or "", "options")
        issues.append(Issue(node.id, e.message, field=field, hint=e.hint))
        return
    info[node.id]["seconds"] = est.seconds


def _check_eval(node: Node, step: StepPlan, facade: Facade, issues: list[Issue], info: dict[str, dict[str, Any]],
                costs: list[StepCost], waits: list[str]) -> None:  # fmt: skip
    """An evaluation step: its task and fields are known, its dataset holds them (read once now)."""
    ev = step.evaluation
    assert ev is not None
    where = "in the workspace" if step.backend == "local" else f"as a {step.backend} job"
    info[node.id] = {**ev.to_json(), "backend": step.backend}
    costs.append(StepCost(node.id, None, f"scores {where}" + ("" if node.params.get("gpu") else ": no GPU rented")))
    if waits:
        issues.append(Issue(node.id, f"its input {', '.join(waits)} is not ready", field="data"))
        return
    if ev.data_from is not None:  # the dataset is written by a prep step of this run: read when it ran
        return
    try:  # the same checks as `starverse eval --job`: the task's options, the dataset and its fields
        facade.evals.job_spec(ev.model, ev.data, **ev.options())
    except StarverseError as e:
        field = _FIELD.get(getattr(e, "field", None) or "", "data")
        issues.append(Issue(node.id, e.message, field=field, hint=e.hint))


def _output(backend: str) -> str:
    return "sbatch" if backend == "slurm" else "yaml"
