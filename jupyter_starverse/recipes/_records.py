"""What the recipe service answers with: a recipe and its cost (:class:`RecipeInfo`), the listing
(:class:`RecipeList`), a launch's plan (:class:`RecipePlan`) and where a model version came from
(:class:`Lineage`). Records only: nothing here reads the store or launches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from jupyter_starverse._format import html_table, pretty_text

from ._model import Recipe
from .train import BatchPlan

if TYPE_CHECKING:
    from jupyter_starverse.costs import Estimate

__all__ = ["Lineage", "RecipeInfo", "RecipeList", "RecipePlan"]


@dataclass(frozen=True)
class RecipeInfo:
    """A recipe with the price of its default resources (or why it could not be priced)."""

    recipe: Recipe
    cost: Estimate | str

    def to_json(self) -> dict[str, Any]:
        cost = self.cost if isinstance(self.cost, str) else self.cost.to_json()
        return {**self.recipe.to_json(), "cost": cost}

    @property
    def cost_text(self) -> str:
        return self.cost if isinstance(self.cost, str) else self.cost.figure

    def __str__(self) -> str:
        return f"{self.recipe}\n  estimated cost: {self.cost}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        return self.recipe._repr_html_() + f"<div>estimated cost: {escape(self.cost_text)}</div>"


@dataclass(frozen=True)
class RecipeList:
    """``starverse recipes ls``: every recipe with its defaults and cost."""

    items: tuple[RecipeInfo, ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [i.to_json() for i in self.items]

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (
                i.recipe.name,
                i.recipe.objective,
                i.recipe.runner,
                f"{i.recipe.nodes * i.recipe.procs_per_node} x {i.recipe.accelerator}",
                f"{i.recipe.hours:g} h",
                i.cost_text,
                i.recipe.title,
            )
            for i in self.items
        ]

    def __str__(self) -> str:
        head = ("NAME", "OBJECTIVE", "RUNNER", "RESOURCES", "HOURS", "COST", "WHAT")
        rows = [head, *self._rows()]
        widths = [max(len(r[c]) for r in rows) for c in range(len(head) - 1)]
        return "\n".join("  ".join([*(r[c].ljust(widths[c]) for c in range(len(widths))), r[-1]]) for r in rows)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        return html_table(("name", "objective", "runner", "resources", "hours", "cost", "what"), self._rows())


@dataclass(frozen=True)
class RecipePlan:
    """What a recipe job will do per optimizer step, and what a resume keeps and recomputes."""

    recipe: str
    objective: str
    model: str
    data: tuple[str, ...]
    steps: int
    batch: BatchPlan
    resumed_from: BatchPlan | None = None
    resume_step: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "objective": self.objective,
            "model": self.model,
            "data": list(self.data),
            "steps": self.steps,
            "batch": self.batch.to_json(),
            "resumed_from": self.resumed_from.to_json() if self.resumed_from else None,
            "resume_step": self.resume_step,
            "params": dict(self.params),
        }

    def __str__(self) -> str:
        line = f"recipe {self.recipe} ({self.objective}) on {self.model}: {self.steps} steps, {self.batch}"
        if self.resume_step is not None:
            line += f"; resumes at step {self.resume_step}/{self.steps} (schedule position kept)"
            if self.resumed_from is not None:
                line += f"; {self.batch.change_from(self.resumed_from)}"
        return line


@dataclass(frozen=True)
class Lineage:
    """Where a model version came from (``starverse-lineage.json`` in its folder)."""

    model: str
    record: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, **self.record}

    def __str__(self) -> str:
        r = self.record
        if not r:
            return f"{self.model}: no lineage recorded (pulled from a hub, or imported by hand)"
        data = ", ".join(str(d.get("ref")) for d in r.get("data", []))
        return (
            f"{self.model}\n  base model: {r.get('base_model')} (commit {str(r.get('base_commit'))[:12]})\n"
            f"  data: {data}\n  recipe: {r.get('recipe')} ({r.get('objective')}), {r.get('steps')} steps\n"
            f"  job: {r.get('job_id')}"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))
