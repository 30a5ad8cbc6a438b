"""What a recipe is: parameters with defaults, the parallelism it supports, resources, cost defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_starverse._format import html_table, pretty_text
from jupyter_starverse.errors import BadInputError

if TYPE_CHECKING:
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.catalog import Catalog

__all__ = ["OBJECTIVES", "RUNNERS", "Param", "Recipe", "RecipeStore", "Reproduction", "Topology"]

#: What the in-job trainer optimises (``train/``): continued pretraining, SFT, DPO, KTO, reward model, PPO,
#: and a vision-language stage (``vlm``: captions on images, the modules the stage trains, the rest frozen).
OBJECTIVES = ("cpt", "sft", "dpo", "kto", "reward", "ppo", "vlm")
#: Who runs the recipe: our trainer on the runtime, or an outside framework in its own environment.
RUNNERS = ("starverse", "llamafactory", "megatron")
_KINDS = {"int": int, "float": float, "str": str, "bool": bool}


@dataclass(frozen=True)
class Param:
    """One recipe parameter: name, default, type (``int``/``float``/``str``/``bool``), help."""

    name: str
    default: Any
    kind: str
    help: str
    choices: tuple[str, ...] = ()

    def parse(self, value: object) -> Any:
        """``value`` (text from a command line or JSON) as this parameter's type, or a BadInputError."""
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise BadInputError(
                f"recipe parameter {self.name}={value!r} is not true or false",
                field=self.name,
                hint=f"{self.name} takes true or false",
            )
        try:
            out = _KINDS[self.kind](value)
        except (TypeError, ValueError):
            raise BadInputError(
                f"recipe parameter {self.name}={value!r} is not a{'n' if self.kind == 'int' else ''} {self.kind}",
                field=self.name,
                hint=f"{self.name}: {self.help} (default {self.default})",
            ) from None
        if isinstance(out, (int, float)) and not isinstance(out, bool) and out < 0:
            raise BadInputError(
                f"recipe parameter {self.name}={value!r} must not be negative",
                field=self.name,
                hint=f"default {self.default}",
            )
        if self.choices and out not in self.choices:
            raise BadInputError(
                f"recipe parameter {self.name}={value!r} is not one of {', '.join(self.choices)}",
                field=self.name,
                hint=f"default {self.default}",
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "default": self.default,
            "kind": self.kind,
            "help": self.help,
            "choices": list(self.choices),
        }


@dataclass(frozen=True)
class Topology:
    """Where a set-up runs: ``nodes`` x ``gpus_per_node`` cards of ``gpu`` for ``hours``."""

    nodes: int
    gpus_per_node: int
    gpu: str
    hours: float

    @property
    def cards(self) -> int:
        return self.nodes * self.gpus_per_node

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpu": self.gpu,
            "hours": self.hours,
            "cards": self.cards,
        }

    def __str__(self) -> str:
        days = f" ({self.hours / 24:g} days)" if self.hours >= 48 else ""
        return f"{self.cards} x {self.gpu} ({self.nodes} nodes x {self.gpus_per_node}) for {self.hours:g} h{days}"


@dataclass(frozen=True)
class Reproduction:
    """A published training stage: its topology and schedule, where they come from, and what we run small.

    ``schedule`` holds only figures the source states (missing ones are left out, not guessed);
    ``reported`` what the source reports about the run (a loss curve, a throughput);
    ``small`` the parameter overrides of the CPU-sized configuration the tests run, through the
    same trainer code path as the full set-up; ``model`` / ``data`` the store model and dataset a
    full-size launch uses when none is given, ``small_model`` / ``small_data`` those of ``--small``
    (built offline and imported into the store on first use); ``trains`` what the stage trains.
    """

    model: str
    stage: str
    source: str
    published: Topology
    schedule: Mapping[str, Any]
    reported: Mapping[str, Any] = field(default_factory=dict)
    small: Mapping[str, Any] = field(default_factory=dict)
    caveat: str = ""
    model_ref: str = ""
    data_ref: str = ""
    small_model: str = ""
    small_data: str = ""
    trains: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "model_ref": self.model_ref,
            "data_ref": self.data_ref,
            "small_model": self.small_model,
            "small_data": self.small_data,
            "trains": self.trains,
            "model": self.model,
            "stage": self.stage,
            "source": self.source,
            "published": self.published.to_json(),
            "schedule": dict(self.schedule),
            "reported": dict(self.reported),
            "small": dict(self.small),
            "caveat": self.caveat,
        }


@dataclass(frozen=True)
class Recipe:
    """A training recipe: data (parameters, parallelism, resources, cost defaults) plus the code it runs.

    Parameters
    ----------
    name
        What ``--recipe NAME`` takes.
    objective
        What the trainer optimises (:data:`OBJECTIVES`).
    runner
        ``starverse`` (our trainer on the runtime, any world size, CPU or GPU), ``llamafactory``
        or ``megatron`` (outside frameworks with their own environment).
    data_format
        What the mounted dataset holds (see the package docstring).
    params
        Parameters with defaults; ``--param NAME=VALUE`` or ``params={...}`` override them.
    templates
        Parallelism templates the recipe supports (``ddp``, ``fsdp``).
    nodes, procs_per_node, accelerator, hours
        Resource defaults of a launch, and the duration its cost is estimated for.
    """

    name: str
    title: str
    objective: str
    description: str
    data_format: str
    params: tuple[Param, ...]
    runner: str = "starverse"
    templates: tuple[str, ...] = ("ddp", "fsdp")
    nodes: int = 1
    procs_per_node: int = 8
    accelerator: str = "a100-80g"
    hours: float = 4.0
    reference_model: bool = False
    reproduction: Reproduction | None = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise BadInputError(f"recipe {self.name}: objective {self.objective!r} is not one of {OBJECTIVES}")
        if self.runner not in RUNNERS:
            raise BadInputError(f"recipe {self.name}: runner {self.runner!r} is not one of {RUNNERS}")

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise BadInputError(
            f"recipe {self.name} has no parameter {name!r}",
            field=name,
            hint=f"its parameters: {', '.join(p.name for p in self.params)}",
        )

    @property
    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def resolve(self, overrides: Mapping[str, object] | None = None) -> dict[str, Any]:
        """Every parameter's value: the defaults, then ``overrides`` parsed by type (unknown names refused)."""
        values = self.defaults
        for key, value in (overrides or {}).items():
            values[key] = self.param(key).parse(value)
        return values

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "objective": self.objective,
            "description": self.description,
            "data_format": self.data_format,
            "runner": self.runner,
            "templates": list(self.templates),
            "params": [p.to_json() for p in self.params],
            "resources": {
                "nodes": self.nodes,
                "procs_per_node": self.procs_per_node,
                "accelerator": self.accelerator,
                "hours": self.hours,
            },
            "reference_model": self.reference_model,
            "reproduction": self.reproduction.to_json() if self.reproduction else None,
        }

    def __str__(self) -> str:
        lines = [
            f"{self.name}: {self.title}",
            f"  {self.description}",
            f"  objective {self.objective}, runner {self.runner}, parallelism {'/'.join(self.templates)}",
            f"  data: {self.data_format}",
            f"  default resources: {self.nodes} x {self.procs_per_node} {self.accelerator} for {self.hours:g} h",
        ]
        if self.reproduction:
            r = self.reproduction
            lines.append(f"  reproduces {r.model} {r.stage}: {r.published} ({r.source})")
            if r.trains:
                lines.append(f"  trains: {r.trains}")
            if r.model_ref:
                lines.append(f"  full size: --model {r.model_ref} --data {r.data_ref} (defaults)")
            if r.small_model:
                lines.append(f"  --small: {r.small_model} on {r.small_data} (built offline into the store)")
        width = max(len(p.name) for p in self.params) if self.params else 0
        lines += ["  parameters:"] + [f"    {p.name:<{width}}  {p.default!s:<10}  {p.help}" for p in self.params]
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        rows = [(p.name, str(p.default), p.help) for p in self.params]
        head = f"<b>{escape(self.name)}</b>: {escape(self.title)}<br>{escape(self.description)}"
        return head + html_table(("parameter", "default", "what"), rows)


class RecipeStore(Protocol):
    """What the job renderer of another framework's trainer (LLaMA-Factory, Megatron-LM) reads:
    the settings and the store. ``RecipeService`` is one; the renderers take this rather than the
    service, so the service imports them and they never import it back.
    """

    settings: Settings
    catalog: Catalog
