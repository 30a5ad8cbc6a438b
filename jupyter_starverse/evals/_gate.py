"""The export's accuracy gate: each graph of an export (``fp32`` first: the source; then e.g.
``onnx-int8``, ``onnx-int4``) scored on the same examples, and the graphs whose metric falls more
than the limit below the source's named (:class:`AccuracyGate`). ``EvalService.gate`` makes the
check; the export runs it.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AccuracyGate", "GateFigure", "score_graphs"]
from pathlib import Path
from typing import Any

from ._predict import load_predictor
from ._report import metric_text, points, read_predictions
from ._run import Dataset, TaskOptions, predict_all, score


@dataclass(frozen=True)
class GateFigure:
    """One graph of an export scored on the gate's examples."""

    graph: str
    metric: str
    value: float
    drop_points: float
    ms_per_example: float
    over_limit: bool = False

    @property
    def label(self) -> str:
        """``INT4`` for ``onnx-int4``, ``ONNX fp32`` for the fp32 graph, ``fp32`` for the source."""
        return _graph_label(self.graph)

    def to_json(self) -> dict[str, Any]:
        return {
            "graph": self.graph,
            "metric": self.metric,
            "value": self.value,
            "drop_points": self.drop_points,
            "ms_per_example": self.ms_per_example,
            "over_limit": self.over_limit,
        }


@dataclass(frozen=True)
class AccuracyGate:
    """The export gate's verdict: fp32 against the exported graph on the same examples."""

    dataset: str
    limit_points: float
    figures: tuple[GateFigure, ...]
    failures: tuple[str, ...]
    examples: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "limit_points": self.limit_points,
            "examples": self.examples,
            "figures": [f.to_json() for f in self.figures],
            "failures": list(self.failures),
        }

    def failures_of(self, graph: str) -> tuple[str, ...]:
        """The failures of one graph (the export refuses only the format it stores)."""
        return tuple(f for f in self.failures if f.startswith(f"{graph}: "))

    def lines(self) -> list[str]:
        """A head line (the dataset, the limit, the reference's score), then the seed's figure for
        each graph after the first: ``INT4: F1 -0.8 points, latency x0.25``."""
        if not self.figures:
            return []
        base = self.figures[0]
        n = f", {self.examples} examples" if self.examples else ""
        out = [
            f"accuracy on {self.dataset}{n} (limit {self.limit_points:g} points): "
            f"{base.label} {_metric_name(base.metric)} {metric_text(base.metric, base.value)}"
        ]
        for f in self.figures[1:]:
            ratio = f.ms_per_example / base.ms_per_example if base.ms_per_example else float("nan")
            unit = " points" if points(f.metric) else ""
            line = f"{f.label}: {_metric_name(f.metric)} {0.0 - f.drop_points:+.1f}{unit}, latency x{ratio:.2f}"
            out.append(line + ("  <- over the limit" if f.over_limit else ""))
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _metric_name(metric: str) -> str:
    return {
        "f1_macro": "F1",
        "f1_micro": "F1 micro",
        "accuracy": "accuracy",
        "token_f1": "F1",
        "rouge_l": "ROUGE-L",
        "exact_match": "EM",
    }.get(metric, metric)


def score_graphs(
    ds: Dataset,
    opts: TaskOptions,
    graphs: Sequence[tuple[str, Path]],
    *,
    metric: str,
    limit_points: float,
    scratch: Path,
) -> AccuracyGate:
    """Score each ``(graph name, folder)`` on ``ds`` with ``opts``; a graph whose ``metric`` is more
    than ``limit_points`` below the first graph's fails. Predictions go to a scratch folder under
    ``scratch``, removed afterwards."""
    figures: list[GateFigure] = []
    failures = []
    work = scratch / uuid.uuid4().hex[:8]
    try:
        for graph, folder in graphs:
            pred = load_predictor(folder)
            t = time.perf_counter()
            predict_all(pred, ds.examples, opts, work / f"{graph}.jsonl", model=graph)
            ms = (time.perf_counter() - t) * 1000 / len(ds.examples)
            metrics, _, _ = score(opts.task, read_predictions(work / f"{graph}.jsonl"))
            value = metrics[metric]
            base = figures[0].value if figures else value
            drop = (base - value) * 100 if points(metric) else (value - base)
            over = bool(figures) and drop > limit_points
            figures.append(GateFigure(graph, metric, value, drop, ms, over))
            if over:
                failures.append(
                    f"{graph}: {_metric_name(metric)} -{drop:.1f} points on {ds.ref} > limit {limit_points:g} points"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return AccuracyGate(ds.ref, limit_points, tuple(figures), tuple(failures), len(ds.examples))


def _graph_label(graph: str) -> str:
    if graph == "onnx":
        return "ONNX fp32"
    return graph.removeprefix("onnx-").upper() if graph.startswith("onnx-") else graph
