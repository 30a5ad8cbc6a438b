"""The HTML view of a data report: counts, removed share, sensitive types, clusters, histograms.

Everything shown is escaped and already masked by the step. The standalone page carries a
threshold slider (a few lines of script over the precomputed preview table).
"""

from __future__ import annotations

import json
from html import escape

from jupyter_starverse._format import format_count, html_table
from jupyter_starverse._format import format_elapsed as took_text

from ._types import DataReport, Histogram, draw_reports_with

__all__ = ["report_html", "took_text"]


_STYLE = (
    "<style>.sv-data{font-family:system-ui,sans-serif;font-size:13px}.sv-data h3{margin:12px 0 4px}"
    ".sv-bar{display:inline-block;background:#4a90d9;height:10px;vertical-align:middle}"
    ".sv-data td,.sv-data th{padding:2px 8px}.sv-data .muted{color:#666}"
    ".sv-cluster{margin:2px 0}.sv-cluster summary{cursor:pointer}</style>"
)


def _bars(h: Histogram) -> str:
    top = max(h.counts) or 1
    rows = []
    for i, c in enumerate(h.counts):
        width = int(200 * c / top)
        label = f"{h.edges[i]:.3g} to {h.edges[i + 1]:.3g}"
        rows.append(
            f"<tr><td class='muted'>{escape(label)}</td>"
            f"<td><span class='sv-bar' style='width:{width}px'></span> {c}</td></tr>"
        )
    cut = "" if h.threshold is None else f" (removes {'below' if h.remove_below else 'above'} {h.threshold:g})"
    return f"<h3>{escape(h.name)}{escape(cut)}</h3><table>{''.join(rows)}</table>"


def _slider(report: DataReport, standalone: bool) -> str:
    if not report.preview:
        return ""
    default = float(report.params.get("threshold", report.preview[0][0]))
    table = json.dumps([[t, n] for t, n in report.preview])
    current = report.removed_at(default)
    head = (
        f"<h3>Near-duplicate threshold preview</h3><div>Jaccard ≥ <b class='sv-t'>{default:.2f}</b> removes "
        f"<b class='sv-n'>{current}</b> documents</div>"
    )
    if not standalone:  # notebooks strip scripts: the table says the same
        rows = [(f"{t:.2f}", str(n)) for t, n in report.preview[:: max(1, len(report.preview) // 11)]]
        return head + html_table(("threshold", "removed"), rows)
    lo, hi = report.preview[0][0], report.preview[-1][0]
    return (
        head + f"<input type='range' class='sv-slider' min='{lo}' max='{hi}' step='0.05' value='{default}'>"
        f"<script>(function(){{const t={table};const s=document.querySelector('.sv-slider');"
        "s.addEventListener('input',()=>{const v=parseFloat(s.value);let b=t[0];for(const p of t)"
        "{if(Math.abs(p[0]-v)<Math.abs(b[0]-v))b=p;}document.querySelector('.sv-t').textContent=v.toFixed(2);"
        "document.querySelector('.sv-n').textContent=b[1];});})();</script>"
    )


def _clusters(report: DataReport) -> str:
    """One collapsed ``<details>`` per cluster: the kept document and how many were removed as its
    duplicates; opened, the removed ones (a sample of at most 20) with how and how similar."""
    shown = sum(c.count for c in report.clusters)
    out = [
        f"<h3>Duplicate clusters</h3><div class='muted'>{format_count(len(report.clusters))} cluster(s), "
        f"{format_count(shown)} removed document(s); open one to see its duplicates</div>"
    ]
    for c in report.clusters:
        methods = sorted({m.method for m in c.members})
        low = min((m.similarity for m in c.members), default=1.0)
        rows = [(m.doc.where, m.method, f"{m.similarity:.3f}", m.doc.snippet) for m in c.members]
        more = c.count - len(c.members)
        tail = f"<div class='muted'>and {format_count(more)} more</div>" if more > 0 else ""
        out.append(
            f"<details class='sv-cluster' data-count='{c.count}'><summary><b>{format_count(c.count)}</b> "
            f"duplicate(s) of <code>{escape(c.kept.where)}</code> ({escape(', '.join(methods))}, similarity "
            f"&ge; {low:.2f}): <span class='muted'>{escape(c.kept.snippet)}</span></summary>"
            + html_table(("removed", "how", "similarity", "text"), rows)
            + tail
            + "</details>"
        )
    return "".join(out)


def report_html(report: DataReport, *, standalone: bool = True) -> str:
    """The report as HTML (a whole page when ``standalone``)."""
    parts = [
        f"<h2>{escape(report.step)} {escape(report.source)}"
        + (f" → {escape(report.output)}" if report.output else "")
        + "</h2>",
        f"<div>{format_count(report.docs_in)} documents in, {format_count(report.docs_out)} out; removed "
        f"{format_count(report.removed_total)} ({report.removed_share:.1%}); malformed lines "
        f"{report.malformed_total}; took {took_text(report.elapsed_s)} ({report.lines_per_s:,.0f} lines/s)</div>",
    ]
    if report.estimate:
        parts.append(f"<div class='muted'>{escape(str(report.estimate))}</div>")
    if report.removed:
        parts.append(
            "<h3>Removed</h3>"
            + html_table(("reason", "documents"), [(k, format_count(v)) for k, v in sorted(report.removed.items())])
        )
    if report.pii:
        rows = [
            (
                p.type,
                format_count(p.count),
                format_count(p.docs),
                p.action,
                p.why,
                p.examples[0].before if p.examples else "",
            )
            for p in report.pii
        ]
        parts.append(
            "<h3>Sensitive fields</h3>"
            + html_table(("type", "values", "docs", "action", "why", "example (masked)"), rows)
        )
    parts.append(_slider(report, standalone))
    if report.clusters:
        parts.append(_clusters(report))
    parts += [_bars(h) for h in report.histograms]
    if report.examples:
        ex_rows = [(e.where, e.before, e.after, e.note) for e in report.examples]
        parts.append("<h3>Before / after (masked)</h3>" + html_table(("where", "before", "after", "note"), ex_rows))
    if report.malformed:
        bad_rows = [(f"{m['file']}:{m['line']}", str(m["kind"]), str(m["reason"])) for m in report.malformed]
        parts.append("<h3>Malformed lines</h3>" + html_table(("where", "kind", "reason"), bad_rows))
    if report.ranks:
        rank_rows = [
            (str(r["rank"]), str(st["stage"]), f"{st['wall_s']:.1f} s", f"{st['peak_rss_mib']:,.0f} MiB")
            for r in report.ranks
            for st in r.get("stages", ())
        ]
        parts.append("<h3>Ranks</h3>" + html_table(("rank", "stage", "wall", "peak RSS"), rank_rows))
    if report.provenance:
        prov_rows = [
            (str(p.get("step")), str(p.get("source")), str(p.get("output")), json.dumps(p.get("params", {})))
            for p in report.provenance
        ]
        parts.append("<h3>Provenance</h3>" + html_table(("step", "source", "output", "parameters"), prov_rows))
    body = f"<div class='sv-data'>{''.join(parts)}</div>"
    if not standalone:
        return _STYLE + body
    head = f"<meta charset='utf-8'><title>{escape(report.id)}</title>{_STYLE}"
    return f"<!doctype html><html><head>{head}</head><body>{body}</body></html>"


draw_reports_with(report_html)
