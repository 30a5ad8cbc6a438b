"""The four steps over a stream of documents: scan, clean, dedup, score.

Each step takes ``docs()`` (a function returning a fresh iterator: dedup reads twice), a
``write(doc, text)`` for the documents it keeps (``None`` for a report-only step) and a work
folder, and returns the parts of a :class:`DataReport` it knows. Nothing here knows the store.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ._pii import PII_TYPES, SUGGESTED, WHY, Deidentifier, Finding, display_mask, find_pii, masked_snippet
from ._read import Doc
from ._stages import StageConfig, partitions_for
from ._types import Cluster, DocRef, DupMember, Example, Histogram, PiiType

__all__ = ["DedupParams", "ScoreParams", "StepResult", "clean", "dedup", "mask_text", "quality", "scan", "score"]

Docs = Callable[[], Iterator[Doc]]
Write = Callable[[Doc, str], None]
Progress = Callable[[int], None]
_SNIPPET = 160


@dataclass
class StepResult:
    """What a step found; the service adds the source, output, timing and provenance."""

    docs_in: int = 0
    docs_out: int = 0
    removed: dict[str, int] = field(default_factory=dict)
    pii: list[PiiType] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)
    preview: list[tuple[float, int]] = field(default_factory=list)
    histograms: list[Histogram] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    malformed: list[dict[str, Any]] = field(default_factory=list)  # read by the ranks of a sharded run
    ranks: list[dict[str, Any]] = field(default_factory=list)  # a sharded run: each rank's figures per stage


def mask_text(text: str, limit: int = _SNIPPET) -> str:
    """The start of ``text`` with every sensitive value masked (what reports show)."""
    cut = text[:limit]
    out, pos = [], 0
    for f in find_pii(cut):
        out += [cut[pos : f.start], display_mask(f)]
        pos = f.end
    out.append(cut[pos:])
    return "".join(out) + ("…" if len(text) > limit else "")


def _tick(progress: Progress | None, n: int) -> None:
    if progress is not None and n % 1000 == 0:
        progress(n)


# -- scan and clean ------------------------------------------------------------------------
class _PiiTally:
    def __init__(self, actions: dict[str, str], examples: int) -> None:
        self.actions = actions
        self.count: Counter[str] = Counter()
        self.docs: Counter[str] = Counter()
        self.examples: dict[str, list[Example]] = defaultdict(list)
        self.limit = examples

    def add(self, doc: Doc, findings: list[Finding], after: Callable[[Finding], str] | None = None) -> None:
        for kind in {f.type for f in findings}:
            self.docs[kind] += 1
        for f in findings:
            self.count[f.type] += 1
            shown = self.examples[f.type]
            if len(shown) < self.limit:
                before = masked_snippet(doc.text, findings, f)
                replaced = after(f) if after else display_mask(f)
                shown.append(Example(doc.where, before, replaced, f"{display_mask(f)} -> {replaced}"))

    def types(self) -> list[PiiType]:
        return [
            PiiType(
                t,
                self.count[t],
                self.docs[t],
                self.actions[t],
                SUGGESTED[t],
                WHY[self.actions[t]],
                tuple(self.examples[t]),
            )
            for t in PII_TYPES
            if self.count[t]
        ]


def scan(
    docs: Docs, *, types: Sequence[str] = PII_TYPES, examples: int = 3, progress: Progress | None = None
) -> StepResult:
    """Count each sensitive type, with masked examples and the suggested action."""
    tally = _PiiTally(dict(SUGGESTED), examples)
    res = StepResult()
    for doc in docs():
        res.docs_in += 1
        tally.add(doc, find_pii(doc.text, types))
        _tick(progress, res.docs_in)
    res.docs_out = res.docs_in
    res.pii = tally.types()
    return res


def clean(
    docs: Docs, write: Write, *, deid: Deidentifier, examples: int = 3, progress: Progress | None = None
) -> StepResult:
    """Apply ``deid``'s actions; documents with a ``drop`` type are left out."""
    tally = _PiiTally(deid.actions, examples)
    res = StepResult()
    dropped = 0
    for doc in docs():
        res.docs_in += 1
        findings = find_pii(doc.text, deid.types)
        text, acted = deid.apply(doc.text, findings)
        tally.add(doc, acted, lambda f: "(document dropped)" if deid.actions[f.type] == "drop" else deid.replacement(f))
        if text is None:
            dropped += 1
        else:
            write(doc, text)
            res.docs_out += 1
            if acted and len(res.examples) < examples:
                res.examples.append(
                    Example(doc.where, mask_text(doc.text), _mask_kept(text, deid), f"{len(acted)} values")
                )
        _tick(progress, res.docs_in)
    if dropped:
        res.removed["pii_drop"] = dropped
    res.pii = tally.types()
    return res


def _mask_kept(text: str, deid: Deidentifier) -> str:
    """The cleaned text for a report: values the user chose to keep are masked for display."""
    kept = [t for t in PII_TYPES if deid.actions[t] == "keep"]
    cut = text[:_SNIPPET]
    if kept:
        out, pos = [], 0
        for f in find_pii(cut, kept):
            out += [cut[pos : f.start], display_mask(f)]
            pos = f.end
        cut = "".join([*out, cut[pos:]])
    return cut + ("…" if len(text) > _SNIPPET else "")


# -- dedup -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DedupParams:
    threshold: float = 0.7
    lsh_threshold: float = 0.5
    num_perm: int = 128
    ngram: int = 5
    paragraph_share: float | None = 0.15
    max_memory: int = 256 << 20
    semantic: Any = None  # an Encoder or a StaticEncoder
    semantic_threshold: float = 0.95
    max_clusters: int = 200
    expected_docs: int = 0
    boilerplate_docs: int = 4
    semantic_clusters: int = 0  # k-means clusters; 0: about sqrt(documents / 4)

    def stage_config(self, docs: int, *, ranks: int = 1) -> StageConfig:
        """The stages' settings for ``docs`` documents: enough bucket partitions that one holds at most
        ``max_memory`` of band records, and at least one per rank (rank r works partitions r, r + ranks, ...:
        fewer partitions than ranks would leave ranks idle while one holds all the buckets)."""
        cfg = StageConfig(
            num_perm=self.num_perm,
            ngram=self.ngram,
            lsh_threshold=self.lsh_threshold,
            threshold=self.threshold,
            paragraph_share=self.paragraph_share,
            boilerplate_docs=self.boilerplate_docs,
            semantic_threshold=self.semantic_threshold,
        )
        bands, _ = cfg.bands_rows
        return replace(cfg, partitions=max(ranks, partitions_for(max(docs, 1), bands, self.max_memory)))


def exact_hash(text: str) -> bytes:
    """12 bytes naming a normalized text (exact duplicates share it)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()


def dedup(
    docs: Docs,
    write: Write,
    work: Path,
    *,
    params: DedupParams,
    progress: Progress | None = None,
    staged: Path | None = None,
    against: Path | None = None,
    old_version: Docs | None = None,
    say: Callable[[str], None] | None = None,
) -> StepResult:
    """Exact, MinHash near (Jaccard-verified), paragraph and semantic duplicates: the five stages in turn.

    In process the corpus is one shard; ``staged`` names a work folder whose stages 1 to 4 ran
    elsewhere (the ranks of a sharded job): only the report and stage 5 are left. ``against``
    is the dedup folder of an existing clean version (incremental: see :mod:`._incremental`).
    """
    from . import _stages as st

    res = StepResult()
    work.mkdir(parents=True, exist_ok=True)
    w = staged or work / "stages"
    offset = 0
    if staged is None:
        if against is not None:
            from ._incremental import old_config, old_docs

            cfg = old_config(against, params)
            offset = old_docs(against)
        else:
            cfg = params.stage_config(params.expected_docs)
        cfg.save(w)
        st.sign_shard(_offset(docs(), offset), cfg, w, 0, tick=None if progress is None else progress)
        if params.semantic is not None:
            from ._semantic import semantic_stage

            res.notes.append(
                semantic_stage(
                    lambda: _offset(docs(), offset),
                    params.semantic,
                    cfg,
                    w,
                    clusters=params.semantic_clusters,
                    against=against,
                    old_docs=old_version,
                    new_from=offset,
                    say=say,
                )
            )
        for p in range(cfg.partitions):
            st.sort_partition(cfg, w, p, extra=against / "buckets" if against is not None else None)
            st.partition_pairs(cfg, w, p, old=against / "sig" if against is not None else None, new_from=offset)
        total = offset + sum(s.docs for s in st.shard_stats(w))
        comp = st.components(cfg, w, total, new_from=offset, start=offset)
    else:
        cfg = st.StageConfig.load(w)
        comp = st.Components(**json.loads((w / "components.json").read_text()))
        total = comp.docs
        offset = comp.offset
    res.docs_in = total - offset
    kept = st.filter_shard(_offset(docs(), offset), cfg, w, write)
    res.removed = dict(comp.removed)
    res.docs_out = kept
    res.preview = [(float(t), int(c)) for t, c in comp.preview]
    dec = st.decisions(w)
    snips = st.Snippets(w / "sig", *([against / "sig"] if against is not None else []))
    try:
        res.clusters = _clusters(dec, snips, params.max_clusters)
        _removed_log(dec, snips, work / "removed.jsonl")
    finally:
        snips.close()
    if comp.removed.get("exact"):
        res.notes.append(f"{comp.removed['exact']} exact duplicates (after normalizing case and whitespace)")
    if comp.stripped_docs:
        res.notes.append(
            f"boilerplate lines (in {cfg.boilerplate_docs}+ documents) stripped from {comp.stripped_docs} documents,"
            " none removed for them"
        )
    res.notes.append(
        f"minhash: {cfg.partitions} bucket partitions, {cfg.bands_rows[0]} bands x {cfg.bands_rows[1]} rows"
    )
    return res


def _offset(docs: Iterator[Doc], offset: int) -> Iterator[Doc]:
    if not offset:
        yield from docs
        return
    for d in docs:
        yield Doc(d.idx + offset, d.file, d.line, d.text, d.row)


def _removed_log(dec: Any, snips: Any, path: Path) -> None:
    """Every removed document, the kept one it duplicated and how similar (the report shows a sample)."""
    from ._stages import METHODS

    with open(path, "w", encoding="utf-8") as f:
        for doc, kept, sim, method in dec.tolist():
            where, _ = snips.get(int(doc))
            kept_where, _ = snips.get(int(kept))
            record = {"doc": doc, "where": where, "kept": kept, "kept_where": kept_where, "method": METHODS[method]}
            f.write(json.dumps({**record, "similarity": round(float(sim), 4)}) + "\n")


def _clusters(dec: Any, snips: Any, limit: int) -> list[Cluster]:
    import numpy as np

    from ._stages import METHODS

    if not len(dec):
        return []
    out = []
    # the largest clusters first (50 copies of one line is the cluster to see), then by document
    kept, counts = np.unique(dec["kept"], return_counts=True)
    for i in np.argsort(-counts, kind="stable")[:limit].tolist():
        k = int(kept[i])
        rows = dec[dec["kept"] == k][:20]
        kw, kt = snips.get(k)
        members = []
        for d, _, s, m in rows.tolist():
            loc, text = snips.get(int(d))
            members.append(DupMember(DocRef(int(d), loc, mask_text(text)), METHODS[m], round(float(s), 4)))
        out.append(Cluster(DocRef(k, kw, mask_text(kt)), tuple(members), int(counts[i])))
    return out


# -- score -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScoreParams:
    min_quality: float | None = 0.5
    max_perplexity: float | None = None
    min_relevance: float | None = None
    examples: tuple[str, ...] = ()
    lm: Any = None  # a LanguageModel
    encoder: Any = None  # an Encoder (relevance); hashed character bigrams without one


_PUNCT_END = tuple("\u3002\uff01\uff1f.!?;\uff1b:\uff1a\u0022\u0027\u201d\u2019)\uff09\u3011\u300d")


def quality(text: str) -> float:
    """A 0-1 heuristic: letters vs symbols, repeated lines, length, line endings (higher is better)."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    letters = sum(1 for c in chars if c.isalpha())
    digits = sum(1 for c in chars if c.isdigit())
    symbols = len(chars) - letters - digits
    alpha = min(1.0, letters / len(chars) / 0.75)
    symbol = max(0.0, 1.0 - max(0.0, symbols / len(chars) - 0.1) / 0.3)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    repeat = 1.0 - (len(lines) - len(set(lines))) / len(lines) if lines else 0.0
    length = min(1.0, len(chars) / 40)
    ending = sum(1 for ln in lines if ln.endswith(_PUNCT_END)) / len(lines) if lines else 0.0
    return round(alpha * symbol * repeat * length * (0.7 + 0.3 * ending), 4)


def score(docs: Docs, write: Write, *, params: ScoreParams, progress: Progress | None = None) -> StepResult:
    """Quality heuristics, perplexity and domain relevance; documents past a threshold are removed."""
    import numpy as np

    from ._models import char_vectors

    res = StepResult()
    values: dict[str, list[float]] = defaultdict(list)
    worst: list[tuple[float, int, str, str]] = []
    examples_vec = None
    if params.examples:
        examples_vec = params.encoder.embed(list(params.examples)) if params.encoder else char_vectors(params.examples)
    batch: list[Doc] = []

    def judge(doc: Doc, rel: float | None) -> None:
        q = quality(doc.text)
        values["quality"].append(q)
        reasons = []
        if params.min_quality is not None and q < params.min_quality:
            reasons.append("quality")
        if params.lm is not None:
            ppl = params.lm.perplexity(doc.text)
            values["perplexity"].append(ppl)
            if params.max_perplexity is not None and not math.isnan(ppl) and ppl > params.max_perplexity:
                reasons.append("perplexity")
        if rel is not None:
            values["relevance"].append(rel)
            if params.min_relevance is not None and rel < params.min_relevance:
                reasons.append("relevance")
        if reasons:
            res.removed[reasons[0]] = res.removed.get(reasons[0], 0) + 1
            item = (-q, doc.idx, doc.where, doc.text)
            if len(worst) < 5:
                heapq.heappush(worst, item)
            else:
                heapq.heappushpop(worst, item)
        else:
            write(doc, doc.text)
            res.docs_out += 1

    def flush() -> None:
        rels: list[float | None] = [None] * len(batch)
        if examples_vec is not None and batch:
            vecs = (
                params.encoder.embed([d.text for d in batch])
                if params.encoder
                else char_vectors([d.text for d in batch])
            )
            rels = [round(float(x), 4) for x in (vecs @ examples_vec.T).max(axis=1)]
        for doc, rel in zip(batch, rels, strict=True):
            judge(doc, rel)
        batch.clear()

    for doc in docs():
        res.docs_in += 1
        batch.append(doc)
        if len(batch) >= 32:
            flush()
        _tick(progress, res.docs_in)
    flush()
    unit = [i / 20 for i in range(21)]
    res.histograms.append(
        Histogram.build("quality", values["quality"], unit, threshold=params.min_quality, remove_below=True)
    )
    if values["perplexity"]:
        finite = [v for v in values["perplexity"] if not math.isnan(v)]
        top = max(finite) if finite else 10.0
        edges = [round(float(x), 3) for x in np.geomspace(1.0, max(top, 2.0) * 1.001, 21)]
        res.histograms.append(
            Histogram.build(
                "perplexity", values["perplexity"], edges, threshold=params.max_perplexity, remove_below=False
            )
        )
    if values["relevance"]:
        res.histograms.append(
            Histogram.build("relevance", values["relevance"], unit, threshold=params.min_relevance, remove_below=True)
        )
    for neg_q, _, where, text in sorted(worst, reverse=True):
        res.examples.append(Example(where, mask_text(text), "(removed)", f"quality {-neg_q:.2f}"))
    return res


def _now() -> float:
    return time.time()
