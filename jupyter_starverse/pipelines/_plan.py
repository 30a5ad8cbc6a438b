"""From a pipeline to its jobs.

:func:`plan` turns every step into the :class:`~jupyter_starverse.jobmodel.JobSpec` it launches
(entries it is fed become mounts, the first dataset's folder ``DATA_PATH``, the first model's
``MODEL_PATH``); :func:`pin_entries` pins every bare entry name to the version it means now.
What is wrong with each node before anything runs is :mod:`._check`'s; the records both make
are in :mod:`._records`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse._inputs import check_number
from jupyter_starverse.backends import example_script
from jupyter_starverse.costs import MAX_SECONDS
from jupyter_starverse.errors import BadInputError, StarverseError
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.jobmodel._spec import job_name_of

from ._model import EVAL_KINDS, PREP_STEPS, Node, Pipeline

if TYPE_CHECKING:
    from ._facade import Facade
from ._records import EvalPlan, Issue, PrepPlan, StepPlan

__all__ = ["data_inputs", "entry_paths", "experiment_of", "parallel_issue", "pin_entries", "plan", "step_plan"]

DEFAULT_HOURS = 1.0
#: Longest a step may be estimated to run: what the price table prices (a year).
MAX_HOURS = MAX_SECONDS // 3600
#: Largest budget a step takes (more is a typo, and 1e9999999 overflows any money arithmetic).
MAX_BUDGET = 10**15


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


def data_inputs(pipeline: Pipeline, node: Node, produced: dict[str, str],
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
            before = data_inputs(pipeline, entry, produced, memo)
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
                            hint="scan (find PII, writes nothing), clean (de-identify), dedup or score")  # fmt: skip
    inputs = [i for i in data_inputs(pipeline, node, produced) if i[0] == "dataset"]
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
    inputs = data_inputs(pipeline, node, produced)
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
    for kind, ref, _ in data_inputs(pipeline, node, produced or {}):
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


def entry_paths(pipeline: Pipeline, facade: Facade, issues: list[Issue],
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


def parallel_issue(node: Node) -> Issue | None:
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
        paths = entry_paths(pipeline, facade, issues)
        errors = [i for i in issues if i.level == "error"]
        if errors:
            raise BadInputError(str(errors[0]), field=errors[0].field, hint=errors[0].hint)
    out = []
    for node in pipeline.steps:
        bad = parallel_issue(node)
        if bad:
            raise BadInputError(f"step {node.id}: {bad.message}", field=bad.field, hint=bad.hint)
        out.append(step_plan(pipeline, node, base_dir=base_dir, paths=paths, facade=facade))
    return out
