"""Evaluation reports: one model on one dataset version, their tables and the examples it got wrong.

``EvalReport`` is the store record (``STORE/evals/ID/report.json``, its predictions beside it in
``predictions.jsonl``); ``EvalRun`` is one command's reports (a model and its baselines on the
same examples) printed side by side with deltas; ``EvalChain`` is ``eval compare``'s chain of
models on one dataset, each against the one before it; ``EvalErrors`` the wrong examples.
Ratio metrics print as points (x100), deltas in points; perplexity prints as itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from jupyter_starverse._format import format_duration, html_table, pretty_text

__all__ = ["EvalChain", "EvalErrors", "EvalReport", "EvalRun", "ScoreCard", "WrongExample", "metric_text", "points"]

#: Metrics where lower is better (and printed as is, not as points).
LOWER_BETTER = ("perplexity", "nll_per_token")
#: The headline metric of each task kind.
HEADLINE = {
    "classification": "f1_macro",
    "extraction": "f1_macro",
    "qa": "token_f1",
    "generation": "rouge_l",
    "perplexity": "perplexity",
}


def points(metric: str) -> bool:
    """A ratio printed as points (x100); not perplexities, bits per byte or per-token NLL (lm-eval's too)."""
    return metric not in LOWER_BETTER and not metric.endswith(("perplexity", "bits_per_byte"))


def metric_text(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 100:.1f}" if points(metric) else f"{value:.3f}"


def delta_text(metric: str, value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "-"
    if points(metric):
        return f"{(value - base) * 100:+.1f}"
    return f"{value - base:+.3f}"


def _text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


@dataclass(frozen=True)
class EvalReport:
    """The scores of one model on one dataset version, with the lineage of both."""

    id: str
    model: str
    model_version: str | None
    dataset: str
    dataset_version: str | None
    task: str
    examples: int
    metrics: dict[str, float]
    per_label: list[dict[str, Any]] = field(default_factory=list)
    predictions: str = ""  # path of predictions.jsonl
    engine: str = ""
    seconds: float = 0.0
    created_at: float = 0.0
    user: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> str:
        return HEADLINE.get(self.task, next(iter(self.metrics), ""))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalReport:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})

    def line(self) -> str:
        m = self.headline
        return (
            f"{self.id}  {self.dataset}  {self.task}  {m} {metric_text(m, self.metrics.get(m))}  "
            f"n={self.examples}  ({self.engine}, {format_duration(self.seconds)})"
        )

    def __str__(self) -> str:
        rows = [[m, metric_text(m, v)] for m, v in self.metrics.items()]
        out = [
            f"eval {self.model} on {self.dataset} ({self.task}, {self.examples} examples): {self.id}",
            _text_table(["metric", "value"], rows),
        ]
        if self.per_label:
            out.append(_text_table(["label", "precision", "recall", "f1", "support"], _label_rows(self.per_label)))
        out += self.notes
        out.append(f"predictions: {self.predictions}")
        return "\n".join(out)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        rows = [[m, metric_text(m, v)] for m, v in self.metrics.items()]
        title = f"<b>{escape(self.model)} on {escape(self.dataset)}</b>"
        return f"<div class='starverse-eval'>{title}{html_table(['metric', 'value'], rows)}</div>"

    def wrong(self, limit: int | None = None) -> EvalErrors:
        """The examples this model got wrong, read from its predictions file."""
        return read_errors(self, limit)


def _label_rows(per_label: Sequence[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(s["label"]),
            f"{s['precision'] * 100:.1f}",
            f"{s['recall'] * 100:.1f}",
            f"{s['f1'] * 100:.1f}",
            str(s["support"]),
        ]
        for s in per_label
    ]


def _side_by_side(reports: Sequence[EvalReport], *, chain: bool) -> tuple[list[str], list[list[str]]]:
    metrics: list[str] = []
    for r in reports:
        metrics += [m for m in r.metrics if m not in metrics]
    header = ["metric"]
    for i, r in enumerate(reports):
        header.append(r.model)
        if i:
            header.append("delta" if chain else f"delta vs {reports[0].model}")
    rows = []
    for m in metrics:
        row = [m]
        for i, r in enumerate(reports):
            row.append(metric_text(m, r.metrics.get(m)))
            if i:
                base = reports[i - 1] if chain else reports[0]
                # a baseline's delta: the model minus the baseline (how much better the model is)
                pair = (r.metrics.get(m), base.metrics.get(m)) if chain else (base.metrics.get(m), r.metrics.get(m))
                row.append(delta_text(m, *pair))
        rows.append(row)
    return header, rows


@dataclass(frozen=True)
class EvalRun:
    """A model and its baselines scored on the same examples in one run."""

    reports: tuple[EvalReport, ...]

    @property
    def report(self) -> EvalReport:
        return self.reports[0]

    def to_json(self) -> dict[str, Any]:
        return {"reports": [r.to_json() for r in self.reports]}

    def __str__(self) -> str:
        first = self.reports[0]
        head = f"eval on {first.dataset} ({first.task}, {first.examples} examples)"
        header, rows = _side_by_side(self.reports, chain=False)
        out = [head, _text_table(header, rows)]
        if first.per_label and len(self.reports) == 1:
            out.append(_text_table(["label", "precision", "recall", "f1", "support"], _label_rows(first.per_label)))
        for r in self.reports:
            out += r.notes
            out.append(f"{r.model}: report {r.id}, predictions {r.predictions}")
        return "\n".join(dict.fromkeys(out))

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        header, rows = _side_by_side(self.reports, chain=False)
        errors = "".join(r.wrong(limit=20)._repr_html_() for r in self.reports)
        return f"<div class='starverse-eval'>{html_table(header, rows)}{errors}</div>"


@dataclass(frozen=True)
class EvalChain:
    """``eval compare``: the models of a lineage on one dataset, each against the one before."""

    dataset: str
    reports: tuple[EvalReport, ...]
    missing: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "reports": [r.to_json() for r in self.reports], "missing": list(self.missing)}

    def __str__(self) -> str:
        out = [f"{self.dataset}: " + " -> ".join(r.model for r in self.reports)]
        if self.reports:
            header, rows = _side_by_side(self.reports, chain=True)
            out.append(_text_table(header, rows))
        out += [
            f"{m}: no score on {self.dataset}; run `starverse eval {m} --data {self.dataset}`" for m in self.missing
        ]
        return "\n".join(out)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        header, rows = _side_by_side(self.reports, chain=True) if self.reports else (["metric"], [])
        return f"<div class='starverse-eval'><b>{escape(str(self).splitlines()[0])}</b>{html_table(header, rows)}</div>"


@dataclass(frozen=True)
class WrongExample:
    idx: int
    input: str
    expected: str
    predicted: str
    score: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EvalErrors:
    """The examples a model got wrong: input, expected and predicted."""

    model: str
    dataset: str
    total: int
    examples: tuple[WrongExample, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "dataset": self.dataset,
            "total": self.total,
            "examples": [e.to_json() for e in self.examples],
        }

    def __str__(self) -> str:
        head = f"{self.model} on {self.dataset}: {self.total} wrong"
        if len(self.examples) < self.total:
            head += f" (first {len(self.examples)})"
        rows = [[str(e.idx), _clip(e.input), _clip(e.expected), _clip(e.predicted)] for e in self.examples]
        return head + ("\n" + _text_table(["#", "input", "expected", "predicted"], rows) if rows else "")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        rows = [[str(e.idx), e.input, e.expected, e.predicted] for e in self.examples]
        return (
            f"<details class='starverse-eval-errors'><summary>{escape(self.model)}: {self.total} wrong on "
            f"{escape(self.dataset)}</summary>{html_table(['#', 'input', 'expected', 'predicted'], rows)}</details>"
        )


def _clip(text: str, n: int = 48) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a predictions file (a torn last line, from a kill, is left out)."""
    out: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                try:
                    row = json.loads(line)
                except ValueError:
                    break
                if isinstance(row, dict):
                    out.append(row)
    except FileNotFoundError:
        pass
    return out


def read_errors(report: EvalReport, limit: int | None = None) -> EvalErrors:
    wrong = [r for r in read_predictions(Path(report.predictions)) if r.get("correct") is False]
    shown = wrong if limit is None else wrong[:limit]
    examples = tuple(
        WrongExample(
            int(r["idx"]),
            str(r.get("input", "")),
            str(r.get("expected", "")),
            str(r.get("predicted", "")),
            r.get("score"),
        )
        for r in shown
    )
    return EvalErrors(report.model, report.dataset, len(wrong), examples)


@dataclass(frozen=True)
class ScoreCard:
    """``store show REF``: the entry's cache state and every evaluation score of it."""

    ref: str
    status: Any  # catalog.EntryStatus (has to_json and __str__)
    reports: tuple[EvalReport, ...]

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "status": self.status.to_json(), "scores": [r.to_json() for r in self.reports]}

    def _rows(self) -> list[list[str]]:
        return [
            [r.id, r.dataset, r.task, f"{r.headline} {metric_text(r.headline, r.metrics.get(r.headline))}",
             str(r.examples), r.engine]
            for r in self.reports
        ]  # fmt: skip

    def __str__(self) -> str:
        out = [str(self.status)]
        if self.reports:
            out += ["scores:", _text_table(["report", "dataset", "task", "metric", "n", "engine"], self._rows())]
        else:
            out.append(f"no scores yet: `starverse eval {self.ref} --data DATASET`")
        return "\n".join(out)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        table = html_table(["report", "dataset", "task", "metric", "n", "engine"], self._rows()) if self.reports else ""
        return f"<div class='starverse-card'><pre>{escape(str(self.status))}</pre>{table}</div>"
