"""The result types of the facade: what its dry runs, job lists and ``info()`` return.

:class:`LaunchPreview` (one job's dry run: the rendered plan, resume plan, price, recipe and
environment notes), :class:`MixedPreview` (a mixed plan's jobs, one per pool),
:class:`JobsAcross` (jobs of every reachable backend) and :class:`Info`: frozen dataclasses
with ``to_json()`` and their text, pretty and HTML forms. They compute nothing;
:class:`~jupyter_starverse.client.Starverse` builds them (import them from ``client``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._format import highlight_html, html_pre, html_table, pretty_text

if TYPE_CHECKING:
    from .costs import MixedStage, Preview
    from .envs import EnvPlan
    from .experiments import ResumePlan
    from .jobmodel import Job
    from .recipes import RecipePlan

__all__ = ["Info", "JobsAcross", "LaunchPreview", "MixedPreview"]


@dataclass(frozen=True)
class MixedPreview:
    """A mixed plan's dry run (issue 37): the split plan's job of every pool, each rendered as a
    launch of its GPU type would be (``yaml``/``json``/``sbatch``), in the plan's order."""

    output: str
    stages: tuple[tuple[MixedStage, LaunchPreview], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "stages": [{**stage.to_json(), "preview": preview.to_json()} for stage, preview in self.stages],
        }

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(
            line for stage, preview in self.stages for line in (stage.label, *(f"  {note}" for note in preview.notes))
        )

    @property
    def document(self) -> str:
        """Every stage's plan: YAML documents (each under a comment naming its stage), one JSON
        ``v1 List`` of all their objects, or the batch scripts one after the other (one file each)."""
        if self.output == "json":
            items: list[Any] = []
            for _, preview in self.stages:
                data = json.loads(preview.document)
                items += data["items"] if data.get("kind") == "List" else [data]
            return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2) + "\n"
        parts = []
        for stage, preview in self.stages:
            head = f"# {stage.label}\n"
            if self.output == "sbatch":
                head = f"# ---- {stage.spec.name}.sbatch ({stage.label}) ----\n"
            parts.append(head + preview.document.rstrip())
        return ("\n---\n" if self.output != "sbatch" else "\n\n").join(parts) + "\n"

    def __str__(self) -> str:
        return "".join(f"# {line}\n" for line in self.notes) + self.document.rstrip()


@dataclass(frozen=True)
class LaunchPreview:
    """A dry run: the rendered plan (``yaml``/``json``), the resume plan and the price, starting nothing."""

    output: str
    rendered: str
    resume: ResumePlan | None
    cost: Preview | str | None = None  # per-hour price, estimate and cap, shown before launch
    recipe: RecipePlan | None = None  # a recipe job's batch plan (and what a resume recomputes)
    warnings: tuple[str, ...] = ()  # e.g. an --env value that looks like a secret (use --secret)
    env: EnvPlan | None = None  # what the job's environment installs over the image, and the working folder

    def to_json(self) -> dict[str, Any]:
        cost = self.cost if self.cost is None or isinstance(self.cost, str) else self.cost.to_json()
        return {
            "env": self.env.to_json() if self.env else None,
            "output": self.output,
            "rendered": self.rendered,
            "resume": self.resume.to_json() if self.resume else None,
            "cost": cost,
            "recipe": self.recipe.to_json() if self.recipe else None,
            "warnings": list(self.warnings),
        }

    @property
    def notes(self) -> tuple[str, ...]:
        """What goes with the plan but is not part of it: the price and the resume plan."""
        out: list[str] = [f"warning: {w}" for w in self.warnings]
        if self.env is not None:
            out += self.env.lines()
        if self.cost is not None:
            out += [f"cost: {line.strip()}" for line in str(self.cost).splitlines() if line.strip()]
        if self.resume:
            out.append(str(self.resume))
        if self.recipe:
            out.append(str(self.recipe))
        return tuple(out)

    @property
    def document(self) -> str:
        """Exactly the rendered plan: one YAML/JSON document (several JSON objects become a ``v1 List``)."""
        if self.output != "json":
            return self.rendered.rstrip() + "\n"
        try:
            data = json.loads(self.rendered)
        except ValueError:
            return self.rendered.rstrip() + "\n"
        if isinstance(data, list):
            data = {"apiVersion": "v1", "kind": "List", "items": data}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    def __str__(self) -> str:
        if self.output == "json":  # comments would break JSON: notes first, then the document
            head = "".join(f"# {line}\n" for line in self.notes)
            return head + self.document.rstrip()
        head = f"# {self.resume}\n" if self.resume else ""
        head += f"# {self.recipe}\n" if self.recipe else ""
        head += "".join(f"# {line}\n" for line in (self.env.lines() if self.env else ()))
        if self.cost is not None:  # a comment line, so the text stays valid YAML
            head = "".join(f"# cost: {line.strip()}\n" for line in str(self.cost).splitlines()) + head
        return head + self.rendered.rstrip()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        notes = "".join(f"<div class='starverse-note'>{html_pre(line)}</div>" for line in self.notes)
        return f"<div class='starverse-preview'>{notes}{highlight_html(self.document.rstrip())}</div>"


@dataclass(frozen=True)
class JobsAcross:
    """Jobs of every reachable backend, newest first, and why a backend was left out."""

    jobs: tuple[Job, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Info:
    """What ``GET /jupyter-starverse/info``, ``starverse info`` and ``%sv info`` show."""

    version: str
    store: str
    experiments: str
    backend: str
    mode: str
    gpu_type: str | None
    currency: str
    user: str

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "store": self.store,
            "experiments": self.experiments,
            "backend": self.backend,
            "mode": self.mode,
            "gpu_type": self.gpu_type,
            "currency": self.currency,
            "user": self.user,
        }

    def __str__(self) -> str:
        width = max(len(k) for k in self.to_json())
        return "\n".join(f"{k:<{width}}  {'-' if v is None else v}" for k, v in self.to_json().items())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        rows = [(k, "-" if v is None else str(v)) for k, v in self.to_json().items()]
        return html_table(("", ""), rows)
