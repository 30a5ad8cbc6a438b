"""The data report as a widget: counts, removed share, sensitive types, clusters, score histograms.

``ReportView(report)`` shows a :class:`~jupyter_starverse.data.DataReport` (plain ipywidgets,
so it works in VS Code too). Its sliders preview what another threshold would remove: the
Jaccard threshold of near duplicates (replayed from the verified pairs the step recorded) and
the cut of each score histogram. Every text shown was masked by the step.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W

from jupyter_starverse._format import format_count, format_duration, html_table
from jupyter_starverse.data import DataReport, Histogram

__all__ = ["ReportView"]


def _summary(r: DataReport) -> str:
    head = f"<b>{html.escape(r.step)}</b> {html.escape(r.source)}" + (
        f" &rarr; <b>{html.escape(r.output)}</b>" if r.output else " (report only)"
    )
    line = (
        f"{format_count(r.docs_in)} documents in, {format_count(r.docs_out)} out, removed "
        f"{format_count(r.removed_total)} ({r.removed_share:.1%}); malformed lines {r.malformed_total}; "
        f"took {format_duration(r.elapsed_s)} ({r.lines_per_s:,.0f} lines/s)"
    )
    reasons = ", ".join(f"{k} {format_count(v)}" for k, v in sorted(r.removed.items()))
    return f"<div>{head}</div><div>{line}</div>" + (f"<div>removed: {html.escape(reasons)}</div>" if reasons else "")


def _pii(r: DataReport) -> str:
    rows = [
        (p.type, format_count(p.count), format_count(p.docs), p.action, p.examples[0].before if p.examples else "")
        for p in r.pii
    ]
    return html_table(("type", "values", "documents", "action", "example (masked)"), rows)


def _clusters(r: DataReport) -> str:
    rows = [
        (c.kept.where, c.kept.snippet, m.doc.where, m.method, f"{m.similarity:.3f}", m.doc.snippet)
        for c in r.clusters
        for m in c.members
    ]
    return html_table(("kept", "kept text", "removed", "how", "similarity", "removed text"), rows)


def _bars(h: Histogram) -> str:
    top = max(h.counts) or 1
    rows = [
        (
            f"{h.edges[i]:.3g} to {h.edges[i + 1]:.3g}",
            f"<span style='display:inline-block;background:#4a90d9;height:10px;"
            f"width:{int(160 * c / top)}px'></span> {c}",
        )
        for i, c in enumerate(h.counts)
    ]
    return html_table((h.name, "documents"), rows, raw_columns=(1,))


class ReportView(W.VBox):  # type: ignore[misc]
    """A data report with threshold sliders that preview another threshold's removals."""

    def __init__(self, report: DataReport) -> None:
        self.report = report
        parts: list[Any] = [W.HTML(_summary(report))]
        self.dedup_slider: W.FloatSlider | None = None
        self.dedup_label = W.HTML()
        if report.preview:
            lo, hi = report.preview[0][0], report.preview[-1][0]
            default = float(report.params.get("threshold", lo))
            self.dedup_slider = W.FloatSlider(
                value=default, min=lo, max=hi, step=0.05, description="Jaccard ≥", readout_format=".2f"
            )
            self.dedup_slider.observe(self._on_dedup, names=["value"])
            self._on_dedup()
            parts += [W.HBox([self.dedup_slider, self.dedup_label])]
        self.score_sliders: dict[str, W.FloatSlider] = {}
        self.score_labels: dict[str, W.HTML] = {}
        for h in report.histograms:
            slider = W.FloatSlider(
                value=h.threshold if h.threshold is not None else h.edges[0],
                min=h.edges[0],
                max=h.edges[-1],
                step=(h.edges[-1] - h.edges[0]) / max(1, len(h.counts)),
                description=h.name,
                readout_format=".3g",
            )
            label = W.HTML()
            self.score_sliders[h.name], self.score_labels[h.name] = slider, label
            slider.observe(lambda change, h=h: self._on_score(h), names=["value"])
            self._on_score(h)
            parts.append(W.HBox([slider, label]))
        tabs: list[tuple[str, Any]] = []
        if report.pii:
            tabs.append(("Sensitive fields", W.HTML(_pii(report))))
        if report.clusters:
            tabs.append(("Duplicate clusters", W.HTML(_clusters(report))))
        if report.histograms:
            tabs.append(("Scores", W.HTML("".join(_bars(h) for h in report.histograms))))
        if report.examples:
            rows = [(e.where, e.before, e.after, e.note) for e in report.examples]
            tabs.append(("Before / after", W.HTML(html_table(("where", "before", "after", "note"), rows))))
        if report.malformed:
            bad = [(f"{m['file']}:{m['line']}", str(m["kind"]), str(m["reason"])) for m in report.malformed]
            tabs.append(("Malformed lines", W.HTML(html_table(("where", "kind", "reason"), bad))))
        if tabs:
            tab = W.Tab(children=[w for _, w in tabs])
            for i, (title, _) in enumerate(tabs):
                tab.set_title(i, title)
            parts.append(tab)
        super().__init__(parts)

    def _on_dedup(self, change: Any = None) -> None:
        assert self.dedup_slider is not None
        t = float(self.dedup_slider.value)
        self.dedup_label.value = (
            f"removes <b>{format_count(self.report.removed_at(t))}</b> near-duplicate documents"
            f" (the step used {float(self.report.params.get('threshold', 0.0)):.2f})"
        )

    def _on_score(self, h: Histogram) -> None:
        t = float(self.score_sliders[h.name].value)
        side = "below" if h.remove_below else "above"
        self.score_labels[h.name].value = f"removing {side} {t:.3g}: <b>{format_count(h.removed_at(t))}</b> documents"

    def __repr__(self) -> str:
        return str(self.report)
