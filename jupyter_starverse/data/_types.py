"""What data steps return: estimates, reports (JSON + HTML), report listings."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from jupyter_starverse._format import (
    format_bytes,
    format_count,
    format_duration,
    format_elapsed,
    html_table,
    pretty_text,
)

__all__ = [
    "MAX_SNIPPET",
    "Cluster",
    "DataReport",
    "DocRef",
    "DupMember",
    "Example",
    "Histogram",
    "PiiType",
    "ReportList",
    "ReportSummary",
    "StepEstimate",
]


#: Longest text a report keeps of one document (a snippet, a before/after example, a reason):
#: a report stays kilobytes whatever the corpus holds in one line.
MAX_SNIPPET = 400


def clip(text: str, limit: int = MAX_SNIPPET) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class StepEstimate:
    """Time and memory a step will need, from the corpus size and a timed sample, before it runs."""

    step: str
    source: str
    bytes: int
    docs: int
    seconds: float
    memory_bytes: int
    basis: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepEstimate:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})

    def __str__(self) -> str:
        return (
            f"estimate for {self.step} of {self.source}: ~{format_count(self.docs)} documents "
            f"({format_bytes(self.bytes)}), ~{format_duration(self.seconds)}, "
            f"peak memory ~{format_bytes(self.memory_bytes)} ({self.basis})"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


@dataclass(frozen=True)
class Example:
    """One document before and after a step, both masked (a report never shows a raw value)."""

    where: str
    before: str
    after: str
    note: str = ""

    def __post_init__(self) -> None:
        for name in ("where", "before", "after", "note"):
            object.__setattr__(self, name, clip(str(getattr(self, name))))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Example:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class PiiType:
    """Per sensitive type: how many values in how many documents, the action and masked examples."""

    type: str
    count: int
    docs: int
    action: str
    suggested: str
    why: str
    examples: tuple[Example, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PiiType:
        return cls(
            **{k: data[k] for k in cls.__dataclass_fields__ if k != "examples"},
            examples=tuple(Example.from_json(e) for e in data.get("examples", ())),
        )


@dataclass(frozen=True)
class DocRef:
    """A document in a report: its number, ``file:line`` and a short masked snippet."""

    idx: int
    where: str
    snippet: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "where", clip(str(self.where)))
        object.__setattr__(self, "snippet", clip(str(self.snippet)))


@dataclass(frozen=True)
class DupMember:
    """A removed document, which kept document it duplicated (``kept``), how, and how similar."""

    doc: DocRef
    method: str  # exact | near | paragraph | semantic
    similarity: float


@dataclass(frozen=True)
class Cluster:
    """A kept document and the documents removed as its duplicates: ``count`` of them in all,
    ``members`` a sample (the report lists at most 20; the removed-documents log has every one)."""

    kept: DocRef
    members: tuple[DupMember, ...]
    count: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", max(int(self.count), len(self.members)))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cluster:
        return cls(
            DocRef(**data["kept"]),
            tuple(DupMember(DocRef(**m["doc"]), m["method"], m["similarity"]) for m in data["members"]),
            int(data.get("count", 0)),
        )


@dataclass(frozen=True)
class Histogram:
    """Counts of a score in fixed bins (``edges`` has one more item than ``counts``)."""

    name: str
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    threshold: float | None = None
    remove_below: bool = True  # quality/relevance remove below; perplexity removes above

    @classmethod
    def build(
        cls, name: str, values: Iterable[float], edges: Sequence[float], *, threshold: float | None, remove_below: bool
    ) -> Histogram:
        counts = [0] * (len(edges) - 1)
        for v in values:
            if v is None or math.isnan(v):
                continue
            i = 0
            lo, hi = 0, len(edges) - 1
            if v <= edges[0]:
                i = 0
            elif v >= edges[-1]:
                i = len(counts) - 1
            else:
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if v < edges[mid]:
                        hi = mid
                    else:
                        lo = mid
                i = lo
            counts[i] += 1
        return cls(name, tuple(edges), tuple(counts), threshold, remove_below)

    def removed_at(self, threshold: float) -> int:
        """How many documents a threshold at a bin edge would remove (the slider preview)."""
        total = 0
        for i, c in enumerate(self.counts):
            lo, hi = self.edges[i], self.edges[i + 1]
            if (self.remove_below and hi <= threshold + 1e-12) or (not self.remove_below and lo >= threshold - 1e-12):
                total += c
        return total

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Histogram:
        return cls(
            data["name"],
            tuple(data["edges"]),
            tuple(data["counts"]),
            data.get("threshold"),
            data.get("remove_below", True),
        )


#: How a report draws itself in a notebook. ``data/_html.py`` registers its ``report_html`` here
#: when the package loads (:func:`draw_reports_with`): the renderer sits above the report it
#: draws, and the report never imports it.
_REPORT_HTML: list[Callable[..., str]] = []


def draw_reports_with(render: Callable[..., str]) -> None:
    """Make ``render(report, standalone=False)`` the HTML view of every :class:`DataReport`."""
    _REPORT_HTML[:] = [render]


@dataclass(frozen=True)
class DataReport:
    """What one step did: counts, removed share, sensitive types, duplicate clusters, score histograms.

    ``preview`` maps a near-duplicate threshold to how many documents it would remove (the
    report's slider); ``params`` names the salt only by reference, never its value.
    """

    id: str
    step: str
    source: str
    output: str | None
    params: dict[str, Any]
    docs_in: int
    docs_out: int
    removed: dict[str, int]
    malformed_total: int
    malformed: tuple[dict[str, Any], ...] = ()
    pii: tuple[PiiType, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    preview: tuple[tuple[float, int], ...] = ()
    histograms: tuple[Histogram, ...] = ()
    examples: tuple[Example, ...] = ()
    estimate: StepEstimate | None = None
    elapsed_s: float = 0.0
    created_at: float = 0.0
    provenance: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    #: a sharded run: per rank ``{"rank", "docs", "stages": [{"stage", "wall_s", "peak_rss_mib", ...}]}``
    ranks: tuple[dict[str, Any], ...] = ()

    @property
    def removed_total(self) -> int:
        return sum(self.removed.values())

    @property
    def removed_share(self) -> float:
        return self.removed_total / self.docs_in if self.docs_in else 0.0

    @property
    def lines_per_s(self) -> float:
        return self.docs_in / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["preview"] = [list(p) for p in self.preview]
        out["removed_share"] = self.removed_share
        out["lines_per_s"] = self.lines_per_s
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DataReport:
        est = data.get("estimate")
        return cls(
            id=data["id"],
            step=data["step"],
            source=data["source"],
            output=data.get("output"),
            params=dict(data.get("params", {})),
            docs_in=int(data["docs_in"]),
            docs_out=int(data["docs_out"]),
            removed=dict(data.get("removed", {})),
            malformed_total=int(data.get("malformed_total", 0)),
            malformed=tuple(data.get("malformed", ())),
            pii=tuple(PiiType.from_json(p) for p in data.get("pii", ())),
            clusters=tuple(Cluster.from_json(c) for c in data.get("clusters", ())),
            preview=tuple((float(t), int(n)) for t, n in data.get("preview", ())),
            histograms=tuple(Histogram.from_json(h) for h in data.get("histograms", ())),
            examples=tuple(Example.from_json(e) for e in data.get("examples", ())),
            estimate=StepEstimate.from_json(est) if est else None,
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            created_at=float(data.get("created_at", 0.0)),
            provenance=tuple(data.get("provenance", ())),
            notes=tuple(data.get("notes", ())),
            ranks=tuple(data.get("ranks", ())),
        )

    def summary(self) -> ReportSummary:
        return ReportSummary(
            self.id,
            self.step,
            self.source,
            self.output,
            self.docs_in,
            self.docs_out,
            self.removed_share,
            self.created_at,
        )

    def removed_at(self, threshold: float) -> int:
        """Near-duplicates a different Jaccard threshold would remove (nearest previewed point)."""
        if not self.preview:
            return self.removed.get("near", 0)
        return min(self.preview, key=lambda p: abs(p[0] - threshold))[1]

    def __str__(self) -> str:
        lines = [
            f"{self.step} {self.source}" + (f" -> {self.output}" if self.output else "  (report only)"),
            f"documents: {format_count(self.docs_in)} in, {format_count(self.docs_out)} out, "
            f"removed {format_count(self.removed_total)} ({self.removed_share:.1%})"
            + (f"; malformed lines: {self.malformed_total}" if self.malformed_total else ""),
        ]
        if self.removed:
            lines.append("removed: " + ", ".join(f"{k} {format_count(v)}" for k, v in sorted(self.removed.items())))
        if self.pii:
            lines.append("sensitive fields:")
            width = max(len(p.type) for p in self.pii)
            for p in self.pii:
                ex = f"  e.g. {p.examples[0].before}" if p.examples else ""
                lines.append(f"  {p.type:<{width}}  {p.count:>7} in {p.docs} docs  -> {p.action} ({p.why}){ex}")
        for c in self.clusters[:5]:
            more = f" and {format_count(c.count - 4)} more" if c.count > 4 else ""
            lines.append(
                f"kept {c.kept.where} ({format_count(c.count)} removed as its duplicates): "
                + ", ".join(f"{m.doc.where} ({m.method} {m.similarity:.2f})" for m in c.members[:4])
                + more
            )
        for h in self.histograms:
            lines.append(f"{h.name}: " + " ".join(str(c) for c in h.counts))
        for m in self.malformed[:5]:
            lines.append(f"malformed {m['file']}:{m['line']}: {m['reason']}")
        lines.append(f"took {format_elapsed(self.elapsed_s)} ({self.lines_per_s:,.0f} lines/s)")
        lines += list(self.notes)
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        if _REPORT_HTML:
            return _REPORT_HTML[0](self, standalone=False)
        return f"<pre>{html.escape(str(self))}</pre>"


@dataclass(frozen=True)
class ReportSummary:
    """One line of the report listing."""

    id: str
    step: str
    source: str
    output: str | None
    docs_in: int
    docs_out: int
    removed_share: float
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReportList:
    """Every data step report on the store, newest first."""

    reports: tuple[ReportSummary, ...] = field(default_factory=tuple)

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.reports]

    def __str__(self) -> str:
        if not self.reports:
            return "no data reports yet (run `starverse data scan NAME`)"
        rows = [
            f"{r.id:<40} {r.step:<6} {r.source:<24} {r.output or '-':<24} {r.docs_in:>9} {r.removed_share:>7.1%}"
            for r in self.reports
        ]
        return "\n".join([f"{'ID':<40} {'STEP':<6} {'SOURCE':<24} {'OUTPUT':<24} {'DOCS':>9} {'REMOVED':>7}", *rows])

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        rows = [
            (r.id, r.step, r.source, r.output or "-", format_count(r.docs_in), f"{r.removed_share:.1%}")
            for r in self.reports
        ]
        return html_table(("id", "step", "source", "output", "docs", "removed"), rows)
