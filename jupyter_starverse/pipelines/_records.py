"""The records a pipeline's plan and check are made of: an :class:`Issue` pinned to a node and a field,
a step's :class:`StepPlan` (its job, or the data step / evaluation it runs in the workspace), the
cost of a step, and the :class:`PipelineCheck` the canvas draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from jupyter_starverse._format import format_money, pretty_text
from jupyter_starverse.jobmodel import JobSpec

if TYPE_CHECKING:
    from jupyter_starverse.costs import Preview

__all__ = ["EvalPlan", "Issue", "PipelineCheck", "PrepPlan", "StepCost", "StepPlan"]


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
