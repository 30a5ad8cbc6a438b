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
import re
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._minhash import LshIndex, MinHasher, greedy, normalize, partitions_for
from ._pii import PII_TYPES, SUGGESTED, WHY, Deidentifier, Finding, display_mask, find_pii, masked_snippet
from ._read import Doc
from ._types import Cluster, DocRef, DupMember, Example, Histogram, PiiType

__all__ = ["DedupParams", "ScoreParams", "StepResult", "clean", "dedup", "mask_text", "quality", "scan", "score"]

Docs = Callable[[], Iterator[Doc]]
Write = Callable[[Doc, str], None]
Progress = Callable[[int], None]
_SNIPPET = 160
_PARA_MIN = 20
_PARA_SPLIT = re.compile(r"\n\s*\n|\n")


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
    semantic: Any = None  # an Encoder
    semantic_threshold: float = 0.95
    max_clusters: int = 200
    expected_docs: int = 0


class _Db:
    """Exact hashes, paragraph hashes, decisions and raw snippets: on disk, not in memory."""

    def __init__(self, path: Path) -> None:
        self.con = sqlite3.connect(path)
        self.con.execute("PRAGMA journal_mode=OFF")
        self.con.execute("PRAGMA synchronous=OFF")
        self.con.executescript(
            "CREATE TABLE exact(h BLOB PRIMARY KEY, doc INTEGER) WITHOUT ROWID;"
            "CREATE TABLE para(h BLOB PRIMARY KEY, doc INTEGER) WITHOUT ROWID;"
            "CREATE TABLE removed(doc INTEGER PRIMARY KEY, kept INTEGER, method TEXT, sim REAL);"
            "CREATE TABLE snip(doc INTEGER PRIMARY KEY, loc TEXT, text TEXT);"
        )

    def first(self, table: str, h: bytes, doc: int) -> int:
        cur = self.con.execute(f"INSERT OR IGNORE INTO {table}(h, doc) VALUES (?, ?)", (h, doc))  # noqa: S608 - fixed names
        if cur.rowcount:
            return doc
        return int(self.con.execute(f"SELECT doc FROM {table} WHERE h = ?", (h,)).fetchone()[0])  # noqa: S608

    def remove(self, doc: int, kept: int, method: str, sim: float) -> None:
        self.con.execute("INSERT OR REPLACE INTO removed VALUES (?, ?, ?, ?)", (doc, kept, method, sim))

    def removed(self, doc: int) -> bool:
        return self.con.execute("SELECT 1 FROM removed WHERE doc = ?", (doc,)).fetchone() is not None

    def close(self) -> None:
        self.con.close()


def exact_hash(text: str) -> bytes:
    """12 bytes naming a normalized text (exact duplicates share it)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).digest()


_h = exact_hash


def _bitmap(n: int, path: Path) -> Any:
    """One flag per document: in memory up to 64M documents, a file on disk beyond."""
    import numpy as np

    if n <= 1 << 26:
        return np.zeros(max(1, n), dtype=bool)
    return np.memmap(path, dtype=bool, mode="w+", shape=(n,))


def _preview(index: LshIndex, verified: Path, n: int, work: Path, floor: float) -> list[tuple[float, int]]:
    """How many near duplicates each threshold from ``floor`` to 1.0 (steps of 0.05) would remove.

    The same keep-first pass replayed over the verified pairs: what the report's slider shows.
    """
    out = []
    steps = round((1.0 - floor) / 0.05)
    for s in range(steps + 1):
        t = round(floor + s * 0.05, 2)
        removed = _bitmap(n, work / "preview.bin")
        count = sum(1 for batch in index.verified(verified) for _ in greedy(batch, t, removed))
        out.append((t, count))
    return out


Signed = Iterator[tuple[int, str, bytes, Any]]  # (doc, normalized text, exact hash, MinHash signature)


def sign(docs: Iterator[Doc], hasher: MinHasher) -> Signed:
    """Pass one's per-document work (what the ranks of a sharded run do)."""
    for doc in docs:
        norm = normalize(doc.text)
        yield doc.idx, norm, exact_hash(norm), hasher.signature(hasher.shingles(norm))


def dedup(
    docs: Docs,
    write: Write,
    work: Path,
    *,
    params: DedupParams,
    progress: Progress | None = None,
    signed: Signed | None = None,
) -> StepResult:
    """Exact, then MinHash near duplicates (Jaccard-verified), then the paragraph rule, then semantic.

    ``signed`` gives pass one's results computed elsewhere (the ranks of a sharded run, merged
    in document order); the banding and verification here then see every shard at once.
    """
    res = StepResult()
    work.mkdir(parents=True, exist_ok=True)
    db = _Db(work / "dedup.sqlite")
    hasher = MinHasher(num_perm=params.num_perm, ngram=params.ngram)
    try:
        from ._minhash import lsh_params

        bands, _ = lsh_params(params.lsh_threshold, params.num_perm)
        parts = partitions_for(max(params.expected_docs, 1), bands, params.max_memory)
        index = LshIndex(
            work / "lsh",
            hasher=hasher,
            threshold=params.lsh_threshold,
            partitions=parts,
            buffer_bytes=max(1 << 20, params.max_memory // 8),
        )
        n = 0
        for idx, norm, digest, signature in signed if signed is not None else sign(docs(), hasher):
            n += 1  # pass 1: exact hashes, then band keys (on disk) of what is not an exact copy
            first = db.first("exact", digest, idx)
            if first != idx:
                db.remove(idx, first, "exact", 1.0)
            else:
                index.add(idx, norm, signature)
            _tick(progress, n)
        db.con.commit()
        index.finish()
        res.docs_in = n
        verified = index.verify(floor=params.lsh_threshold, docs=n)
        removed = _bitmap(n, work / "removed.bin")
        for batch in index.verified(verified):
            for pair in greedy(batch, params.threshold, removed):
                db.remove(pair.dup, pair.kept, "near", pair.similarity)
        db.con.commit()
        res.preview = _preview(index, verified, n, work, params.lsh_threshold)
        exact_removed = db.con.execute("SELECT COUNT(*) FROM removed WHERE method = 'exact'").fetchone()[0]
        index.close()
        db.con.commit()
        _second_pass(docs, write, db, params, res, progress)
        counts = dict(db.con.execute("SELECT method, COUNT(*) FROM removed GROUP BY method").fetchall())
        res.removed = {k: int(v) for k, v in counts.items()}
        res.docs_out = res.docs_in - sum(res.removed.values())
        res.clusters = _clusters(db, params.max_clusters)
        _removed_log(db, work / "removed.jsonl")
        if exact_removed:
            res.notes.append(f"{exact_removed} exact duplicates (after normalizing case and whitespace)")
    finally:
        db.close()
    return res


def _second_pass(
    docs: Docs, write: Write, db: _Db, params: DedupParams, res: StepResult, progress: Progress | None
) -> None:
    """Paragraph rule and semantic duplicates on what survived, then write the kept documents in order."""
    import numpy as np

    enc = params.semantic
    kept_vecs: Any = None
    kept_ids: list[int] = []
    batch: list[Doc] = []

    def flush() -> None:
        nonlocal kept_vecs
        if not batch:
            return
        vecs = enc.embed([d.text for d in batch]) if enc is not None else None
        for i, doc in enumerate(batch):
            if vecs is not None:
                v = vecs[i]
                if kept_vecs is not None and len(kept_ids):
                    sims = kept_vecs[: len(kept_ids)] @ v
                    j = int(np.argmax(sims))
                    if float(sims[j]) >= params.semantic_threshold:
                        db.remove(doc.idx, kept_ids[j], "semantic", round(float(sims[j]), 4))
                        continue
                if kept_vecs is None:
                    kept_vecs = np.zeros((1024, len(v)), dtype=np.float32)
                elif len(kept_ids) == len(kept_vecs):
                    kept_vecs = np.concatenate([kept_vecs, np.zeros_like(kept_vecs)])
                kept_vecs[len(kept_ids)] = v
                kept_ids.append(doc.idx)
            write(doc, doc.text)
        batch.clear()

    n = 0
    for doc in docs():
        n += 1
        db.con.execute("INSERT OR REPLACE INTO snip VALUES (?, ?, ?)", (doc.idx, doc.where, doc.text[: _SNIPPET + 1]))
        if db.removed(doc.idx):
            continue
        if params.paragraph_share is not None and _paragraph_dup(db, doc, params.paragraph_share):
            continue
        batch.append(doc)
        if len(batch) >= 64 or enc is None:
            flush()
        _tick(progress, n)
    flush()
    db.con.commit()


def _paragraph_dup(db: _Db, doc: Doc, share: float) -> bool:
    paras = [p.strip() for p in _PARA_SPLIT.split(doc.text) if len(p.strip()) >= _PARA_MIN]
    if not paras:
        return False
    total = sum(len(p) for p in doc.text.split()) or 1
    dup_chars = 0
    first_kept: int | None = None
    hashes = [(_h(normalize(p)), p) for p in paras]
    for h, p in hashes:
        row = db.con.execute("SELECT doc FROM para WHERE h = ?", (h,)).fetchone()
        if row is not None and row[0] != doc.idx:
            dup_chars += len("".join(p.split()))
            first_kept = row[0] if first_kept is None else first_kept
    if first_kept is not None and dup_chars / total > share:
        db.remove(doc.idx, first_kept, "paragraph", round(dup_chars / total, 4))
        return True
    for h, _ in hashes:
        db.first("para", h, doc.idx)
    return False


def _removed_log(db: _Db, path: Path) -> None:
    """Every removed document, the kept one it duplicated and how similar (the report shows a sample)."""
    rows = db.con.execute(
        "SELECT r.doc, s.loc, r.kept, k.loc, r.method, r.sim FROM removed r "
        "LEFT JOIN snip s ON s.doc = r.doc LEFT JOIN snip k ON k.doc = r.kept ORDER BY r.doc"
    )
    with open(path, "w", encoding="utf-8") as f:
        for doc, where, kept, kept_where, method, sim in rows:
            record = {"doc": doc, "where": where, "kept": kept, "kept_where": kept_where, "method": method}
            f.write(json.dumps({**record, "similarity": sim}) + "\n")


def _clusters(db: _Db, limit: int) -> list[Cluster]:
    kept = [r[0] for r in db.con.execute("SELECT DISTINCT kept FROM removed ORDER BY kept LIMIT ?", (limit,))]
    out = []
    for k in kept:
        rows = db.con.execute(
            "SELECT r.doc, r.method, r.sim, s.loc, s.text FROM removed r LEFT JOIN snip s ON s.doc = r.doc "
            "WHERE r.kept = ? ORDER BY r.doc LIMIT 20",
            (k,),
        ).fetchall()
        row = db.con.execute("SELECT loc, text FROM snip WHERE doc = ?", (k,)).fetchone() or (f"#{k}", "")
        members = tuple(
            DupMember(DocRef(d, loc or f"#{d}", mask_text(t or "")), m, float(s)) for d, m, s, loc, t in rows
        )
        out.append(Cluster(DocRef(k, row[0], mask_text(row[1])), members))
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
