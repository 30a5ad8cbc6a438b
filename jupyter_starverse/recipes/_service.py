"""``Starverse.recipes``: list recipes, resolve one into a JobSpec, plan it, publish its result."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_starverse._inputs import check_path
from jupyter_starverse._settings import Settings
from jupyter_starverse.errors import BadInputError, ConflictError, IntegrityError, NotFoundError
from jupyter_starverse.jobmodel import JobSpec
from jupyter_starverse.runtime import CURVES

from ._catalog import RECIPES, get_recipe
from ._model import Recipe
from .train import LINEAGE_FILE, MODEL_DIR, RECIPE_FILE, TRAIN_SCRIPT, BatchPlan, batch_plan

if TYPE_CHECKING:
    from jupyter_starverse.catalog import Catalog, Entry, EntryStatus
    from jupyter_starverse.costs import CostService, Estimate
    from jupyter_starverse.jobmodel import Job
from ._records import Lineage, RecipeInfo, RecipeList, RecipePlan

__all__ = ["RecipeService", "recipe_args"]


def recipe_args(spec: JobSpec) -> dict[str, str] | None:
    """``--recipe/--model/--data/--param`` of a recipe job's arguments (``None``: not a recipe job)."""
    args = list(spec.args)
    if "--recipe" not in args:
        return None
    out: dict[str, str] = {}
    data: list[str] = []
    for i, a in enumerate(args[:-1]):
        value = args[i + 1]
        if a in ("--recipe", "--model", "--objective"):
            out[a[2:]] = value
        elif a == "--data":
            data.append(value)
        elif a == "--param":
            key, _, v = value.partition("=")
            out[f"param.{key}"] = v
    out["data"] = ",".join(data)
    return out


class RecipeService:
    """The recipe catalog bound to one workspace's settings (prices, store, experiments)."""

    def __init__(self, settings: Settings, *, catalog: Catalog, costs: CostService) -> None:
        self.settings = settings
        self.catalog = catalog
        self.costs = costs

    # -- the catalog -----------------------------------------------------------------------
    def get(self, name: str) -> Recipe:
        return get_recipe(name)

    def show(self, name: str) -> RecipeInfo:
        """The recipe ``name`` with the price of its default (or published) resources."""
        recipe = get_recipe(name)
        return RecipeInfo(recipe, self.cost(recipe))

    def ls(self) -> RecipeList:
        return RecipeList(tuple(self.show(name) for name in RECIPES))

    def cost(self, recipe: Recipe) -> Estimate | str:
        """Estimated price of the recipe's default resources for its hours (the published set-up for a
        reproduction), or why it cannot be priced with this price table."""
        from jupyter_starverse.costs import Resources

        top = recipe.reproduction.published if recipe.reproduction else None
        cards = top.cards if top else recipe.nodes * recipe.procs_per_node
        gpu = top.gpu if top else recipe.accelerator
        hours = top.hours if top else recipe.hours
        try:
            return self.costs.estimate(Resources(gpu, cards), int(hours * 3600))
        except BadInputError as e:
            return f"not priced: {e.message}"

    # -- a recipe as a job -------------------------------------------------------------------
    def spec(
        self,
        recipe: str,
        *,
        model: str | None = None,
        data: str | Sequence[str] = (),
        params: Mapping[str, object] | None = None,
        name: str | None = None,
        code: str | None = None,
        small: bool = False,
        **job: Any,
    ) -> JobSpec:
        """The :class:`JobSpec` that runs ``recipe`` on ``model`` (``hf:ORG/NAME``) and ``data`` (store datasets).

        ``params`` override the recipe's defaults (``steps`` becomes the job's steps unless
        ``job`` gives ``steps``); ``small`` applies a reproduction's CPU-sized configuration;
        ``code`` replaces the trainer script (a ``%%sv train`` cell, which may call
        ``jupyter_starverse.recipes.train.main()`` with its own pieces); ``job`` holds any other
        JobSpec field (``nodes``, ``procs_per_node``, ``accelerator``, ``template``, ...).
        The model and the data are mounted: every rank loads them offline from the store.
        A reproduction without ``model`` / ``data`` uses its own: with ``small``, the tiny model and
        the generated image-text dataset (:meth:`small_assets`), else the full-size ones it names.
        """
        r = get_recipe(recipe)
        repro = r.reproduction
        given = (data,) if isinstance(data, str) else tuple(data)
        own_small = repro is not None and bool({model, *given} & {repro.small_model, repro.small_data})
        if repro is not None and repro.small_model and small and (not model or not data or own_small):
            # the panel sends the small model and data it filled in: built on first use all the same
            small_model, small_data = self.small_assets(r.name)
            model, data = model or small_model, data or small_data
        elif repro is not None and repro.model_ref:
            model, data = model or repro.model_ref, data or repro.data_ref
        if not model:
            raise BadInputError(
                "--recipe needs --model hf:ORG/NAME",
                field="model",
                hint="a model pulled into the store (`starverse store pull hf:ORG/NAME`)",
            )
        if not isinstance(model, str) or not model.startswith("hf:"):
            raise BadInputError(
                f"--model {model!r} is not a store model",
                field="model",
                hint="give a model pulled into the store, e.g. hf:Qwen/Qwen2-0.5B (`starverse store pull hf:ORG/NAME`)",
            )
        datasets = (data,) if isinstance(data, str) else tuple(data)
        if not datasets or not all(isinstance(d, str) and d.strip() for d in datasets):
            raise BadInputError(
                "a recipe needs --data DATASET", field="data", hint=f"a store dataset holding {r.data_format}"
            )
        # explicit versions, so the job (and the lineage of what it saves) names exactly what it read
        model = self.catalog.status(model).ref
        datasets = tuple(self.catalog.status(d).ref for d in datasets)
        overrides: dict[str, object] = dict(r.reproduction.small) if (small and r.reproduction) else {}
        if small and r.reproduction is None:
            raise BadInputError(
                f"recipe {r.name} has no small configuration",
                field="small",
                hint="only reproductions have one; set --param values instead",
            )
        overrides.update(params or {})
        job_steps = job.pop("steps", None)
        if job_steps is not None and "steps" not in (params or {}):
            overrides["steps"] = job_steps  # --steps N alone: a schedule of N steps
        values = r.resolve(overrides)
        steps = job_steps or values["steps"]
        if steps > values["steps"]:
            raise BadInputError(
                f"--steps {steps} is longer than the schedule (steps={values['steps']})",
                field="steps",
                hint="raise the steps parameter, or run fewer steps now and resume later",
            )
        # the recipe decides its framework; a launch's default ("torch", the CLI always sends one) is no choice
        framework = job.pop("framework", None)
        own = "megatron" if r.runner == "megatron" else "torch"
        if framework not in (None, "torch", own):
            raise BadInputError(
                f"recipe {r.name} runs on {'Megatron-LM' if own == 'megatron' else 'its own trainer'}, "
                f"not framework {framework!r}",
                field="framework",
                hint="leave --framework out: the recipe picks it",
            )
        template = job.get("template", "ddp")
        if template not in r.templates:
            raise BadInputError(
                f"recipe {r.name} runs with {' or '.join(r.templates)}, not {template}",
                field="template",
                hint=f"--template {r.templates[0]}",
            )
        world = int(job.get("nodes", 1)) * int(job.get("procs_per_node", 1))
        batch_plan(global_batch=values["global_batch"], micro_batch=values["micro_batch"], world_size=world)
        if r.runner == "llamafactory":
            from ._llamafactory import llamafactory_spec

            return llamafactory_spec(self, r, model=model, data=datasets, values=values, name=name, **job)
        if r.runner == "megatron":
            from ._megatron import megatron_spec

            return megatron_spec(self, r, model=model, data=datasets, values=values, name=name, **job)
        extra_mounts: tuple[str, ...] = ()
        if r.objective == "ppo":  # the reward model is mounted beside the policy, at the version it is now
            scorer = str(values.get("reward_model") or "")
            if not scorer.startswith("hf:"):
                raise BadInputError(
                    "PPO needs --param reward_model=hf:... (a store model that scores an answer)",
                    field="reward_model",
                    hint="train one with --recipe reward on the same feedback data, then import its result",
                )
            values = {**values, "reward_model": self.catalog.status(scorer).ref}
            extra_mounts = (values["reward_model"],)
        args: list[str] = ["--recipe", r.name, "--objective", r.objective, "--model", model]
        for d in datasets:
            args += ["--data", d]
        for key, value in values.items():
            args += ["--param", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
        args += list(job.pop("args", ()))
        mounts = tuple(dict.fromkeys([model, *datasets, *extra_mounts, *job.pop("mounts", ())]))
        script = None if code is not None else str(TRAIN_SCRIPT)
        if r.reproduction is not None and (CURVES / f"{r.name}.json").is_file():
            # the job holds its loss against the reproduced run's reference curve (a warning beyond it)
            curve = {"STARVERSE_REFERENCE_CURVE": r.name}
            if small:  # a toy model is no reproduction of the full-size run: drawn beside it, never warned
                curve["STARVERSE_REFERENCE_CHECK"] = "draw"
            job["env"] = {**curve, **dict(job.get("env") or {})}
        return JobSpec(
            name=name or r.name, script=script, code=code, args=tuple(args), mounts=mounts, steps=steps, **job
        )

    def small_assets(self, recipe: str) -> tuple[str, str]:
        """The store model and dataset of a vision-language reproduction's ``--small``: a tiny LLaVA built
        offline from its transformers config (random weights) and a generated image-text dataset, made
        and imported on first use (idempotent: later calls, and racing ones, find them in the store)."""
        r = get_recipe(recipe)
        if r.reproduction is None or not r.reproduction.small_model:
            raise BadInputError(f"recipe {r.name} has no small model", field="small", hint="give --model and --data")
        model, data = r.reproduction.small_model, r.reproduction.small_data
        folder = self.settings.home / "recipes" / "vlm"
        if not self._cached(model):
            from .train.vlm import build_tiny_llava

            built = build_tiny_llava(folder / "tiny-llava")
            try:
                self.catalog.import_model(built, repo=model)
            except ConflictError:
                pass  # another launch imported it first
        if not self._cached(data):
            from .train.vlm import write_image_text_dataset

            name, _, version = data.partition("@")
            pairs = folder / name / version
            if not (pairs / "captions.jsonl").is_file():
                write_image_text_dataset(pairs, n=32)
            # generated here, under this workspace's home: a server's source roots (what a REST body may
            # name) do not apply to it, so the panel's one-click launch works on a fresh store too
            from dataclasses import replace

            from jupyter_starverse.catalog import Catalog

            own = Catalog(replace(self.settings, source_roots=()))
            own.add_dataset(
                name, str(pairs), version=version, description="generated image-text pairs for --small reproductions"
            )
            self.catalog.pull(data)
        return model, data

    def _cached(self, ref: str) -> bool:
        try:
            return self.catalog.status(ref).state == "cached"
        except NotFoundError:
            return False

    def align(
        self,
        method: str,
        *,
        model: str,
        data: str | Sequence[str],
        params: Mapping[str, object] | None = None,
        name: str | None = None,
        **job: Any,
    ) -> JobSpec:
        """Alignment from feedback: ``dpo`` on pairs or ``kto`` on unpaired thumbs up/down.

        ``data``: store datasets of ``*.jsonl`` records in the pairs format
        (``{"prompt", "chosen", "rejected"}``) for DPO, the unpaired format
        (``{"prompt", "completion", "label": true|false}``) for KTO. The reference model is a
        frozen copy of ``model`` on every rank. Returns the JobSpec to preview or launch.
        """
        if method not in ("dpo", "kto"):
            raise BadInputError(
                f"alignment method {method!r} is not dpo or kto",
                field="method",
                hint="dpo for chosen/rejected pairs, kto for unpaired thumbs up/down",
            )
        return self.spec(method, model=model, data=data, params=params, name=name, **job)

    def plan(self, spec: JobSpec) -> RecipePlan | None:
        """The batch plan of a recipe job (``None`` for any other job); with ``resume``, what the
        resume keeps (global batch, schedule position) and recomputes (accumulation)."""
        found = recipe_args(spec)
        if found is None:
            return None
        params = {k[6:]: v for k, v in found.items() if k.startswith("param.")}
        try:
            global_batch, micro = int(params["global_batch"]), int(params["micro_batch"])
        except (KeyError, ValueError):
            return None
        steps = spec.steps or int(params.get("steps", "0") or 0)
        batch = batch_plan(global_batch=global_batch, micro_batch=micro, world_size=spec.world_size)
        old: BatchPlan | None = None
        resume_step: int | None = None
        if spec.resume:
            from jupyter_starverse.experiments import ExperimentPaths, plan_resume, read_json

            resume = plan_resume(
                ExperimentPaths.of(self.settings.experiments, spec.experiment_name), new_world_size=spec.world_size
            )
            if resume.checkpoint is not None:
                resume_step = resume.start_step
                recorded = _recorded_plan(resume.checkpoint.path.parent.parent / RECIPE_FILE, read_json)
                old = recorded or batch_plan(
                    global_batch=global_batch, micro_batch=micro, world_size=resume.old_world_size or 1
                )
        return RecipePlan(
            found.get("recipe", "?"),
            found.get("objective", "?"),
            found.get("model", "?"),
            tuple(d for d in found.get("data", "").split(",") if d),
            steps,
            batch,
            old,
            resume_step,
            params,
        )

    # -- the result ----------------------------------------------------------------------------
    def result_folder(self, job: Job) -> Path:
        """The Hugging Face model folder a finished recipe job saved (``<run>/model``)."""
        folder = Path(job.experiment_dir) / MODEL_DIR
        if not (folder / "config.json").is_file():
            raise NotFoundError(
                f"job {job.id} saved no model folder ({job.state.value})",
                hint="a recipe job saves <run>/model when it finishes all its steps; wait for it or resume it",
            )
        return folder

    def publish(self, job: Job, *, repo: str) -> Entry:
        """Import the job's model folder into the store as model ``repo`` (``ORG/NAME@VERSION``).

        The folder carries its lineage (``starverse-lineage.json``: base model and its commit,
        data versions, recipe and parameters, job and run), so the store entry is immutable
        together with where it came from; a later recipe starts from ``hf:ORG/NAME@VERSION``.
        """
        check_path(repo, "repo", hint="ORG/NAME@VERSION, each part a short name")
        folder = self.result_folder(job)
        if not (folder / LINEAGE_FILE).is_file():
            raise ConflictError(f"{folder} has no {LINEAGE_FILE}", hint="only folders saved by a recipe job publish")
        return self.catalog.import_model(folder, repo=repo)

    def lineage(self, model: str) -> Lineage:
        """The lineage recorded in a published model version (empty for a model pulled from a hub).

        A model snapshot's files are links to the store's blobs (the Hub's cache layout), so the
        file is read through its link; ``mount`` has checked the version (owner, read-only).
        """
        path = self.catalog.mount(model) / LINEAGE_FILE
        if not path.is_file():
            return Lineage(self.catalog.status(model).ref, {})
        try:
            data = json.loads(path.read_bytes())
        except ValueError as e:
            raise IntegrityError(
                f"{path} is not JSON: {e}", hint=f"run `starverse store verify {model}`, then pull or publish it again"
            ) from e
        return Lineage(self.catalog.status(model).ref, dict(data) if isinstance(data, dict) else {})

    def pretokenize(self, data: str, *, model: str, name: str, version: str = "v1") -> EntryStatus:
        """Megatron-LM input: ``data``'s text tokenized with ``model``'s tokenizer into ``text_document.bin/.idx``,
        added to the store as dataset ``name@version`` (on CPU; the folder is prepared under the home)."""
        from ._megatron import pretokenize

        ref = f"{name}@{version}"
        folder = self.settings.home / "recipes" / "megatron" / name / version
        pretokenize(self.catalog.mount(data), self.catalog.mount(model), folder)
        self.catalog.add_dataset(
            name, str(folder), version=version, description=f"{data} tokenized for Megatron-LM with {model}"
        )
        return self.catalog.pull(ref)


def _recorded_plan(path: Path, read_json: Any) -> BatchPlan | None:
    try:
        data = read_json(path)["batch"]
        return BatchPlan(**{k: int(data[k]) for k in BatchPlan.__dataclass_fields__})
    except (OSError, KeyError, TypeError, ValueError):
        return None
