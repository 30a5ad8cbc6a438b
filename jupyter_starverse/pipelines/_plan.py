"""From a pipeline to its jobs, and what is wrong with each node before anything runs.

:func:`plan` turns every step into the :class:`~jupyter_starverse.jobmodel.JobSpec` it launches
(entries it is fed become mounts, the first dataset's folder ``DATA_PATH``, the first model's
``MODEL_PATH``). :func:`check` asks the catalog whether the entries are there, the backends'
own renderers whether the job can start there (GPU pool, Slurm partition, script, mounts), and
the price table what each step costs; every finding is an :class:`Issue` pinned to a node and
a field, so the canvas shows it on the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse._format import format_money, pretty_text
from jupyter_starverse._inputs import check_number
from jupyter_starverse.backends import example_script
from jupyter_starverse.costs import MAX_SECONDS
from jupyter_starverse.errors import BadInputError, StarverseError
from jupyter_starverse.jobmodel import JobSpec, secret_env_warnings
from jupyter_starverse.jobmodel._spec import job_name_of

from ._model import EVAL_KINDS, PREP_STEPS, Node, Pipeline

if TYPE_CHECKING:
    from jupyter_starverse.costs import Preview

    from ._facade import Facade

__all__ = ["EvalPlan", "Issue", "PipelineCheck", "PrepPlan", "StepCost", "StepPlan", "check", "experiment_of",
           "pin_entries", "plan", "step_plan"]  # fmt: skip

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
DEFAULT_HOURS = 1.0
#: Longest a step may be estimated to run: what the price table prices (a year).
MAX_HOURS = MAX_SECONDS // 3600
#: Largest budget a step takes (more is a typo, and 1e9999999 overflows any money arithmetic).
MAX_BUDGET = 10**15


@dataclass(frozen=True)
class Issue:
    """Something wrong (``error``: the pipeline cannot run) or worth knowing (``warning``) about a node."""

    node: str | None
    message: str
    level: str = "error"
    field: str | None = None
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "field": self.field, "level": self.level, "message": self.message,
                "hint": self.hint}  # fmt: skip

    def __str__(self) -> str:
        where = f"{self.node}" + (f".{self.field}" if self.field else "") if self.node else "pipeline"
        return f"{self.level}: {where}: {self.message}" + (f" ({self.hint})" if self.hint else "")


@dataclass(frozen=True)
class StepPlan:
    """One step as what it runs: a job's spec (and backend), or a data preparation; and what it waits for."""

    node: str
    spec: JobSpec | None
    backend: str
    after: tuple[str, ...]
    hours: float
    prep: PrepPlan | None = None
    evaluation: EvalPlan | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "spec": self.spec.to_json() if self.spec else None, "backend": self.backend,
                "after": list(self.after), "hours": self.hours,
                "prep": self.prep.to_json() if self.prep else None,
                "evaluation": self.evaluation.to_json() if self.evaluation else None}  # fmt: skip


@dataclass(frozen=True)
class PrepPlan:
    """A data preparation step (``client.data``): it reads ``source`` and writes a new version."""

    step: str
    source: str  # the dataset it reads; while its input is itself prepared, that input's source
    options: dict[str, Any]
    from_node: str | None = None  # the prep step whose output it reads

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "source": self.source, "options": self.options, "from_node": self.from_node}


@dataclass(frozen=True)
class EvalPlan:
    """An evaluation step (``client.evals``): ``model`` scored on ``data``, as ``starverse eval`` does.

    ``model`` is a store model fed to the step, or ``exp:EXPERIMENT`` of the training step before it
    (its newest run's output, which is the one that step wrote: the eval waits for it).
    """

    model: str
    data: str
    task: str = "classification"
    input_field: str = "input"
    target_field: str = "target"
    limit: int | None = None
    from_node: str | None = None  # the training step whose output it scores
    data_from: str | None = None  # the prep step whose output it reads

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "data": self.data, "task": self.task, "input_field": self.input_field,
                "target_field": self.target_field, "limit": self.limit, "from_node": self.from_node,
                "data_from": self.data_from}  # fmt: skip

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``client.evals.evaluate`` / ``job_spec``."""
        return {"task": self.task, "input_field": self.input_field, "target_field": self.target_field,
                "limit": self.limit}  # fmt: skip


@dataclass(frozen=True)
class StepCost:
    """A step's price: the launch preview over its estimated hours, or why it has none."""

    node: str
    preview: Preview | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "preview": self.preview.to_json() if self.preview else None, "reason": self.reason}


@dataclass(frozen=True)
class PipelineCheck:
    """Every issue of every node, each step's cost and the whole pipeline's estimate."""

    name: str
    issues: tuple[Issue, ...]
    costs: tuple[StepCost, ...]
    currency: str
    total_low: Decimal
    total_high: Decimal
    unpriced: tuple[str, ...] = ()
    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # per node: world size, dp, data paths

    @property
    def ok(self) -> bool:
        return not any(i.level == "error" for i in self.issues)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "issues": [i.to_json() for i in self.issues],
            "costs": [c.to_json() for c in self.costs],
            "currency": self.currency,
            "total_low": str(self.total_low),
            "total_high": str(self.total_high),
            "total": self.total_text,
            "unpriced": list(self.unpriced),
            "info": self.info,
        }

    @property
    def total_text(self) -> str:
        low, high = format_money(self.total_low, self.currency), format_money(self.total_high, self.currency)
        text = low if self.total_low == self.total_high else f"{low} - {high}"
        return text + (f" (without {', '.join(self.unpriced)}: not priced)" if self.unpriced else "")

    def __str__(self) -> str:
        lines = [f"pipeline {self.name}: " + ("ok" if self.ok else "has errors")]
        lines += [f"  {issue}" for issue in self.issues]
        for cost in self.costs:
            est = cost.preview.estimate if cost.preview else None
            lines.append(f"  cost {cost.node}: {est.figure if est else cost.reason}")
        lines.append(f"  estimated total: {self.total_text}")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


def _int(node: Node, key: str, default: int) -> int:
    value = node.params.get(key, default)
    return value if isinstance(value, int) else default


def _degrees(node: Node) -> tuple[int, int]:
    """``(tensor, pipeline)`` parallel of a step: the ``tp`` and ``pp`` templates split every card
    the data-parallel degree leaves along their axis unless the degree is set (1 would not split)."""
    cards = _int(node, "nodes", 1) * _int(node, "gpus_per_node", 1)
    dp = node.params.get("data_parallel")
    rest = cards // dp if isinstance(dp, int) and dp > 0 else cards
    tp, pp = _int(node, "tensor_parallel", 1), _int(node, "pipeline_parallel", 1)
    template = node.params.get("template")
    if template == "tp" and not isinstance(node.params.get("tensor_parallel"), int) and pp > 0:
        tp = max(1, rest // pp)
    if template == "pp" and not isinstance(node.params.get("pipeline_parallel"), int) and tp > 0:
        pp = max(1, rest // tp)
    return tp, pp


def _data_inputs(pipeline: Pipeline, node: Node, produced: dict[str, str],
                 memo: dict[str, list[tuple[str, str, str | None]]] | None = None,
                 ) -> list[tuple[str, str, str | None]]:  # fmt: skip
    """``(kind, ref, prep node)`` of every entry ``node`` reads: catalog entries, and prepared data
    (the version a prep step wrote, or its source as a stand-in before it ran).

    Each node's inputs are worked out once (``memo``): a chain of prep steps that also skip
    ahead costs O(edges), not one walk per path (which doubled with each step).
    """
    memo = {} if memo is None else memo
    found = memo.get(node.id)
    if found is not None:
        return found
    out: list[tuple[str, str, str | None]] = []
    for entry in pipeline.inputs(node.id):
        if entry.kind == "prep":
            before = _data_inputs(pipeline, entry, produced, memo)
            stand_in = next((ref for kind, ref, _ in before if kind == "dataset"), "")
            out.append(("dataset", produced.get(entry.id, stand_in), entry.id))
        elif not entry.is_step:
            out.append((entry.kind, entry.entry_ref, None))
    memo[node.id] = out
    return out


def _prep_plan(pipeline: Pipeline, node: Node, produced: dict[str, str]) -> StepPlan:
    step = node.params.get("step")
    if step not in PREP_STEPS:
        raise BadInputError(f"data preparation step {step!r} is not one of {', '.join(PREP_STEPS)}", field="step",
                            hint="clean (de-identify), dedup or score")  # fmt: skip
    inputs = [i for i in _data_inputs(pipeline, node, produced) if i[0] == "dataset"]
    if len(inputs) != 1:
        raise BadInputError(f"{step} reads one dataset, it is fed {len(inputs)}", field="data",
                            hint="drop exactly one dataset onto the step")  # fmt: skip
    _, source, from_node = inputs[0]
    options = dict(node.params.get("options") or {})
    after = tuple(n.id for n in pipeline.inputs(node.id) if n.is_step)
    return StepPlan(node.id, None, "workspace", after, 0.0, PrepPlan(str(step), source, options, from_node))


def experiment_of(pipeline: Pipeline, node: Node) -> str:
    """The experiment a training step's job runs in (``JobSpec.experiment_name``: its name unless set)."""
    return str(node.params.get("experiment") or job_name_of(f"{pipeline.name}-{node.id}"))


def _eval_plan(pipeline: Pipeline, node: Node, produced: dict[str, str]) -> StepPlan:
    """An eval step: one dataset (an entry or a prep step's output) and one model (an entry, or the
    training step before it)."""
    inputs = _data_inputs(pipeline, node, produced)
    datasets = [i for i in inputs if i[0] == "dataset"]
    models = [ref for kind, ref, _ in inputs if kind == "model"]
    trainers = [n for n in pipeline.inputs(node.id) if n.kind in EVAL_KINDS]
    if len(datasets) != 1:
        raise BadInputError(f"an eval step scores on one dataset, it is fed {len(datasets)}", field="data",
                            hint="drop exactly one labelled dataset onto the step")  # fmt: skip
    if len(models) + len(trainers) != 1:
        raise BadInputError(f"an eval step scores one model, it is fed {len(models) + len(trainers)}", field="model",
                            hint="draw one training step (its output is scored) or one model into it")  # fmt: skip
    model = f"exp:{experiment_of(pipeline, trainers[0])}" if trainers else models[0]
    limit = node.params.get("limit")
    evaluation = EvalPlan(
        model, datasets[0][1], str(node.params.get("task") or "classification"),
        str(node.params.get("input_field") or "input"), str(node.params.get("target_field") or "target"),
        limit if isinstance(limit, int) else None, trainers[0].id if trainers else None, datasets[0][2],
    )  # fmt: skip
    after = tuple(n.id for n in pipeline.inputs(node.id) if n.is_step)
    backend = str(node.params.get("backend") or pipeline.backend)
    return StepPlan(node.id, None, backend, after, 0.0, evaluation=evaluation)


def step_plan(pipeline: Pipeline, node: Node, *, base_dir: Path, facade: Facade,
              paths: dict[str, str | None] | None = None,
              produced: dict[str, str] | None = None) -> StepPlan:  # fmt: skip
    """The job of step ``node``; ``paths`` maps entry refs to their store folders (``DATA_PATH``).

    A ``train`` step runs its script (or the template's example) with the entries it is fed
    mounted; a ``recipe`` step is what ``client.recipes.spec`` makes of its recipe, the model
    and the datasets it is fed.
    """
    p = node.params
    if node.kind == "prep":
        return _prep_plan(pipeline, node, produced or {})
    if node.kind == "eval":
        return _eval_plan(pipeline, node, produced or {})
    env = {str(k): str(v) for k, v in dict(p.get("env") or {}).items()}
    secrets = {str(k): str(v) for k, v in dict(p.get("secrets") or {}).items()}  # references only
    mounts: list[str] = []
    refs: dict[str, list[str]] = {"dataset": [], "model": []}
    for kind, ref, _ in _data_inputs(pipeline, node, produced or {}):
        mounts.append(ref)
        refs[kind].append(ref)
        var = "DATA_PATH" if kind == "dataset" else "MODEL_PATH"
        folder = (paths or {}).get(ref)
        if folder and var not in env:
            env[var] = folder
    budget = p.get("budget")
    if budget not in (None, ""):  # JobSpec says what a budget must be; here only that it is a number
        budget = check_number(budget, "budget", low=0, high=MAX_BUDGET, hint="give the budget as an amount, e.g. 500")
    hours = float(check_number(p.get("hours", DEFAULT_HOURS), "hours", low=0, low_open=True, high=MAX_HOURS,
                               hint=f"give the hours the step runs, more than 0 and at most {MAX_HOURS}"))  # fmt: skip
    job: dict[str, Any] = {
        "nodes": _int(node, "nodes", 1),
        "procs_per_node": _int(node, "gpus_per_node", 1),
        "accelerator": str(p.get("gpu") or facade.default_accelerator()),
        "tensor_parallel": _degrees(node)[0],
        "pipeline_parallel": _degrees(node)[1],
        "env": env,
        "secrets": secrets,
        "billing": str(p.get("billing", "on_demand")),
        "budget": budget if budget not in (None, "") else None,
        "experiment": p.get("experiment"),
    }
    if p.get("template"):
        job["template"] = str(p["template"])
    if p.get("steps") is not None:
        job["steps"] = p["steps"]
    if node.kind == "recipe":
        spec = _recipe_spec(pipeline, node, facade, refs, job)
    else:
        template = str(p.get("template", "ddp"))
        script = p.get("script")
        if script:
            path = Path(str(script)).expanduser()
            script = str(path if path.is_absolute() else (base_dir / path).absolute())
        else:
            script = str(example_script(template))
        spec = JobSpec(
            name=job_name_of(f"{pipeline.name}-{node.id}"),
            display_name=f"{pipeline.name}: {node.id}",
            script=script,
            args=tuple(str(a) for a in p.get("args") or ()),
            mounts=tuple(dict.fromkeys(mounts)),
            **job,
        )
    after = tuple(n.id for n in pipeline.inputs(node.id) if n.is_step)
    return StepPlan(node.id, spec, str(p.get("backend") or pipeline.backend), after, hours)


def _recipe_spec(pipeline: Pipeline, node: Node, facade: Facade, refs: dict[str, list[str]],
                 job: dict[str, Any]) -> JobSpec:  # fmt: skip
    recipe = node.params.get("recipe")
    if not recipe:
        raise BadInputError("pick a recipe", field="recipe", hint="`starverse recipes ls` lists them")
    if not refs["model"]:
        raise BadInputError(f"recipe {recipe} needs a model", field="model",
                            hint="drop a model from the palette onto the step")  # fmt: skip
    if not refs["dataset"]:
        raise BadInputError(f"recipe {recipe} needs a dataset", field="data",
                            hint="drop a dataset from the palette onto the step")  # fmt: skip
    if not job["env"]:
        del job["env"]
    if not job["secrets"]:
        del job["secrets"]
    params = node.params.get("recipe_params")
    spec = facade.recipes.spec(str(recipe), model=refs["model"][0], data=refs["dataset"],
                               params=dict(params) if params else None,
                               name=job_name_of(f"{pipeline.name}-{node.id}"), **job)  # fmt: skip
    return spec.replace(display_name=f"{pipeline.name}: {node.id}")


def pin_entries(pipeline: Pipeline, facade: Facade) -> tuple[Pipeline, dict[str, str]]:
    """``pipeline`` with every bare entry name pinned to the exact version it means now, and the pins
    made (node -> ``NAME@VERSION``): a pipeline's steps read one version until the user picks
    another, however many versions data steps or pulls add later. An unknown name stays as it is
    (the check names it)."""
    made: dict[str, str] = {}
    nodes = []
    for node in pipeline.nodes:
        ref = str(node.params.get("ref") or "")
        if node.is_step or not ref or "@" in ref or node.entry_ref != ref:
            nodes.append(node)
            continue
        try:
            exact = facade.catalog.entry(ref).ref
        except StarverseError:
            nodes.append(node)
            continue
        made[node.id] = exact
        nodes.append(Node(node.id, node.kind, {**node.params, "pinned": exact}, node.position))
    if not made:
        return pipeline, made
    return Pipeline(pipeline.name, tuple(nodes), pipeline.edges, pipeline.backend), made


def _entry_versions(node: Node, facade: Facade, issues: list[Issue]) -> dict[str, Any]:
    """What the canvas shows of an entry's version: the pin, and a newer original than the pin."""
    ref = str(node.params.get("ref") or "")
    if "@" in ref or not ref:
        return {"ref": ref, "pinned": None, "latest": None}
    try:
        latest = facade.catalog.entry(ref).ref
    except StarverseError:
        latest = None
    pinned = node.entry_ref if node.entry_ref != ref else None
    if pinned and latest and latest != pinned:
        issues.append(Issue(node.id, f"{ref} now means {latest} (newer than {pinned}); this pipeline keeps reading "
                            f"{pinned}", "warning", "ref",
                            f"pick {latest} to train on it, or keep {pinned} for the same data"))  # fmt: skip
    return {"ref": pinned or ref, "pinned": pinned, "latest": latest}


def _entry_paths(pipeline: Pipeline, facade: Facade, issues: list[Issue],
                 versions: dict[str, dict[str, Any]] | None = None) -> dict[str, str | None]:  # fmt: skip
    """Each entry node's store folder; a missing or unpulled entry is an issue on its node.

    ``versions`` collects each entry node's pin (see :func:`_entry_versions`)."""
    paths: dict[str, str | None] = {}
    feeds = {e.source for e in pipeline.edges}
    for node in pipeline.nodes:
        if node.is_step:
            continue
        ref = node.entry_ref
        if not ref:
            issues.append(Issue(node.id, f"pick a {node.kind} from the catalog", field="ref"))
            continue
        if node.id not in feeds:
            issues.append(Issue(node.id, "feeds no step", "warning", "ref", "drop it onto a training step"))
        if versions is not None:
            versions[node.id] = _entry_versions(node, facade, issues)
        try:
            status = facade.catalog.status(ref)
        except StarverseError as e:
            issues.append(Issue(node.id, f"{ref}: {e.message}", field="ref", hint=e.hint))
            paths[ref] = None
            continue
        if status.state != "cached":
            issues.append(Issue(node.id, f"{status.ref} is {status.state}, not pulled", field="ref",
                                hint=f"pull it first: starverse store pull {status.ref}"))  # fmt: skip
            paths[ref] = None
            continue
        paths[ref] = status.path
    return paths


def _parallel_issue(node: Node) -> Issue | None:
    """data x tensor x pipeline parallel must be the step's card count (nodes x GPUs per node)."""
    cards = _int(node, "nodes", 1) * _int(node, "gpus_per_node", 1)
    tp, pp = _degrees(node)
    dp = node.params.get("data_parallel")
    if tp < 1 or pp < 1 or (isinstance(dp, int) and dp < 1):
        name, value = next((n, v) for n, v in (("tensor_parallel", tp), ("pipeline_parallel", pp),
                                               ("data_parallel", dp)) if isinstance(v, int) and v < 1)  # fmt: skip
        return Issue(node.id, f"{name.replace('_', ' ')} is {value}; a degree is 1 or more", field=name,
                     hint="1 means no split along that axis")  # fmt: skip
    if isinstance(dp, int) and dp * tp * pp != cards:
        return Issue(node.id, f"data {dp} x tensor {tp} x pipeline {pp} = {dp * tp * pp}, but the step has "
                     f"{cards} card(s)", field="data_parallel",
                     hint=f"make the product {cards}, or change nodes / GPUs per node")  # fmt: skip
    if dp is None and cards % (tp * pp):
        return Issue(node.id, f"tensor {tp} x pipeline {pp} = {tp * pp} does not divide {cards} card(s)",
                     field="tensor_parallel", hint="choose degrees whose product divides nodes x GPUs")  # fmt: skip
    return None


def plan(pipeline: Pipeline, facade: Facade, *, base_dir: Path,
         paths: dict[str, str | None] | None = None) -> list[StepPlan]:  # fmt: skip
    """Every step's job in dependency order; the first bad step raises ``BadInputError``."""
    if not pipeline.steps:
        raise BadInputError(f"pipeline {pipeline.name!r} has no step", field="nodes",
                            hint="add a training step from the palette")  # fmt: skip
    if paths is None:
        issues: list[Issue] = []
        paths = _entry_paths(pipeline, facade, issues)
        errors = [i for i in issues if i.level == "error"]
        if errors:
            raise BadInputError(str(errors[0]), field=errors[0].field, hint=errors[0].hint)
    out = []
    for node in pipeline.steps:
        bad = _parallel_issue(node)
        if bad:
            raise BadInputError(f"step {node.id}: {bad.message}", field=bad.field, hint=bad.hint)
        out.append(step_plan(pipeline, node, base_dir=base_dir, paths=paths, facade=facade))
    return out


def check(pipeline: Pipeline, facade: Facade, *, base_dir: Path) -> PipelineCheck:
    """Every issue of ``pipeline`` (pinned to nodes) and its cost; starts nothing."""
    issues: list[Issue] = []
    info: dict[str, dict[str, Any]] = {}
    paths = _entry_paths(pipeline, facade, issues, info)  # an entry's info: its pin and the newest original
    bad_entries = {i.node for i in issues if i.level == "error"}
    costs: list[StepCost] = []
    currency = facade.costs.prices.currency
    low = high = Decimal(0)
    unpriced: list[str] = []
    if not pipeline.steps:
        issues.append(Issue(None, "the pipeline has no step", hint="drag a training step from the palette"))
    for node in pipeline.steps:
        parallel = _parallel_issue(node)
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
        produced_by = {ref: prep for _, ref, prep in _data_inputs(pipeline, node, {}) if prep}
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
