"""Dedup as five stages over files, none of which holds the corpus.

Each stage is a plain function of a work folder and its share (a shard of documents, or a
partition of bucket keys); what it needs from other stages it reads from their files, what
it produces it writes by temp + rename. A job wrapper (``_shard.py``) runs them on the ranks
of one job; the in-process path (``_steps.dedup``) runs them one after the other.

1. :func:`sign_shard` (per shard): normalized text spilled for verification, and for every
   document its band keys, exact hash and paragraph hashes, each record appended to the file
   of its *partition* (``key % partitions``) for this rank.
2. :func:`sort_partition` (per partition): that partition's records from every rank, sorted:
   one worker holds ``1 / partitions`` of the band table.
3. :func:`partition_pairs` (per partition): documents sharing a band key are candidates;
   each is checked by the exact Jaccard of its shingles (texts read back by offset), and the
   pairs at ``lsh_threshold`` or more are written sorted by the later document. Exact copies
   and shared paragraphs become records of their own.
4. :func:`components` (one worker, over the pair files): a keep-first union-find. Documents
   are visited in order; one joins the component of the earliest *kept* document it matches
   at the threshold, so a removed document never bridges two others. It holds a flag per
   document (not the corpus) and one range of documents' pairs at a time.
5. :func:`filter_shard` (per shard): drop the removed documents, strip boilerplate lines.

The paragraph rule: a paragraph (a line of at least ``para_min`` characters) found in
``boilerplate_docs`` documents or more is boilerplate: it is stripped from every document
but the first and is never a reason to remove one. A document is removed when more than
``paragraph_share`` of its characters lie in paragraphs that an earlier kept document has and
that are not boilerplate (the seed's "over 15% duplicate paragraphs").
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._minhash import MinHasher, lsh_params, normalize
from ._read import Doc

__all__ = [
    "METHODS",
    "StageConfig",
    "components",
    "filter_shard",
    "partition_pairs",
    "sign_shard",
    "sort_partition",
]

METHODS = ("exact", "near", "paragraph", "semantic")
_PARA_MIN = 20
_FLUSH = 1 << 16  # band keys (numpy) buffered before they are appended to their partition files
_FLUSH_ROWS = 1 << 12  # Python rows (offsets, exact and paragraph records) buffered: ~100 bytes each
_COLS = 6  # offsets: doc, text offset, text bytes, non-space characters, snippet offset, snippet bytes
_SNIPPET = 160


def _np() -> Any:
    import numpy as np

    return np


def _pair_dtype() -> Any:
    np = _np()
    return np.dtype([("later", "<i8"), ("earlier", "<i8"), ("sim", "<f4"), ("method", "u1")])


def _para_dtype() -> Any:
    np = _np()
    return np.dtype([("doc", "<i8"), ("first", "<i8"), ("hash", "<u8"), ("chars", "<i4"), ("boiler", "u1")])


def _decision_dtype() -> Any:
    np = _np()
    return np.dtype([("doc", "<i8"), ("kept", "<i8"), ("sim", "<f4"), ("method", "u1")])


def hash64(text: str) -> int:
    """64 bits naming a normalized text (exact copies and shared paragraphs share it)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def paragraphs(text: str, para_min: int = _PARA_MIN) -> list[tuple[int, str]]:
    """``(line number, line)`` of the lines long enough to count as paragraphs."""
    return [(i, ln) for i, ln in enumerate(text.split("\n")) if len(ln.strip()) >= para_min]


@dataclass(frozen=True)
class StageConfig:
    """Everything the five stages agree on (written beside the files: ``config.json``)."""

    num_perm: int = 128
    ngram: int = 5
    seed: int = 1
    lsh_threshold: float = 0.5
    threshold: float = 0.7
    partitions: int = 16
    paragraph_share: float | None = 0.15
    boilerplate_docs: int = 4
    para_min: int = _PARA_MIN
    max_checks: int = 8
    semantic_threshold: float = 0.95

    @property
    def bands_rows(self) -> tuple[int, int]:
        return lsh_params(self.lsh_threshold, self.num_perm)

    def hasher(self) -> MinHasher:
        return MinHasher(num_perm=self.num_perm, ngram=self.ngram, seed=self.seed)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def save(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        _atomic_bytes(work / "config.json", json.dumps(self.to_json()).encode())

    @classmethod
    def load(cls, work: Path) -> StageConfig:
        return cls.from_json(json.loads((work / "config.json").read_text()))


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


class _Band:
    """Band keys of a signature: ``bands`` 64-bit keys, each salted by its band."""

    def __init__(self, cfg: StageConfig) -> None:
        np = _np()
        self.np = np
        self.bands, self.rows = cfg.bands_rows
        rng = np.random.RandomState(12345)
        self._mult = (
            rng.randint(1, 1 << 62, size=(self.rows,), dtype=np.int64).astype(np.uint64) << np.uint64(1)
        ) | np.uint64(1)
        self._salt = rng.randint(1, 1 << 62, size=(self.bands,), dtype=np.int64).astype(np.uint64)

    def keys(self, signature: Any) -> Any:
        np = self.np
        sig = signature[: self.bands * self.rows].astype(np.uint64).reshape(self.bands, self.rows)
        keys = (sig * self._mult).sum(axis=1) ^ self._salt
        keys ^= keys >> np.uint64(29)
        return keys


class _Spill:
    """Appends records to ``KIND-PPPP-RRRR.bin`` per partition, a buffer at a time."""

    def __init__(self, folder: Path, kind: str, rank: int, partitions: int, dtype: Any) -> None:
        self.folder, self.kind, self.rank, self.partitions, self.dtype = folder, kind, rank, partitions, dtype
        self.buffers: list[list[tuple[Any, ...]]] = [[] for _ in range(partitions)]
        self.arrays = []
        self.buffered = 0
        for p in range(partitions):
            self.path(p).unlink(missing_ok=True)  # a rerun of this rank starts clean

    def path(self, p: int) -> Path:
        return self.folder / f"{self.kind}-{p:04d}-{self.rank:04d}.bin"

    def add(self, part: int, record: tuple[Any, ...]) -> None:
        self.buffers[part].append(record)
        self.buffered += 1
        if self.buffered >= _FLUSH_ROWS:
            self.flush()

    def add_keys(self, keys: Any, doc: int) -> None:
        """Many keys of one document at once (its band keys)."""
        self.arrays.append((keys, doc))
        self.buffered += len(keys)
        if self.buffered >= _FLUSH:
            self.flush()

    arrays: list[tuple[Any, int]]

    def flush(self) -> None:
        np = _np()
        pending: list[Any] = [[] for _ in range(self.partitions)]
        if getattr(self, "arrays", None):
            keys = np.concatenate([k for k, _ in self.arrays])
            rec = np.empty(len(keys), dtype=self.dtype)
            rec["key"] = keys
            rec["doc"] = np.repeat(
                np.array([d for _, d in self.arrays], dtype=np.int64), [len(k) for k, _ in self.arrays]
            )
            part = keys % np.uint64(self.partitions)
            for p in np.unique(part).tolist():
                pending[p].append(rec[part == p])
            self.arrays.clear()
        for p, rows in enumerate(self.buffers):
            if rows:
                pending[p].append(np.array(rows, dtype=self.dtype))
                rows.clear()
        for p, chunks in enumerate(pending):
            if chunks:
                with open(self.path(p), "ab") as f:
                    for c in chunks:
                        f.write(c.tobytes())
        self.buffered = 0


def _key_dtype() -> Any:
    np = _np()
    return np.dtype([("key", "<u8"), ("doc", "<i8")])


def _preg_dtype() -> Any:
    np = _np()
    return np.dtype([("key", "<u8"), ("doc", "<i8"), ("chars", "<i4")])


@dataclass(frozen=True)
class ShardStats:
    rank: int
    docs: int
    first: int
    last: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- stage 1 -----------------------------------------------------------------------------------
def sign_shard(
    docs: Iterable[Doc], cfg: StageConfig, work: Path, rank: int, *, tick: Callable[[int], None] | None = None
) -> ShardStats:
    """Stage 1 for one shard: texts spilled, band keys / exact hashes / paragraphs by partition."""
    np = _np()
    sig = work / "sig"
    sig.mkdir(parents=True, exist_ok=True)
    hasher, band = cfg.hasher(), _Band(cfg)
    parts = cfg.partitions
    bands = _Spill(sig, "band", rank, parts, _key_dtype())
    exact = _Spill(sig, "exact", rank, parts, _key_dtype())
    paras = _Spill(sig, "para", rank, parts, _preg_dtype())
    n, first, last, pos = 0, -1, -1, 0
    offsets: list[tuple[int, int, int, int, int, int]] = []
    texts_tmp = sig / f".texts-{rank:04d}.bin.tmp"
    offsets_tmp = sig / f".offsets-{rank:04d}.bin.tmp"
    snips_tmp = sig / f".snips-{rank:04d}.bin.tmp"
    spos = 0
    with open(texts_tmp, "wb") as texts, open(offsets_tmp, "wb") as offs, open(snips_tmp, "wb") as snips:
        for doc in docs:
            norm = normalize(doc.text)
            data = norm.encode("utf-8")
            texts.write(data)
            snip = json.dumps([doc.where, doc.text[: _SNIPPET + 1]], ensure_ascii=False).encode("utf-8")
            snips.write(snip)
            chars = sum(len(w) for w in doc.text.split()) or 1
            offsets.append((doc.idx, pos, len(data), chars, spos, len(snip)))
            pos += len(data)
            spos += len(snip)
            if len(offsets) >= _FLUSH_ROWS:
                offs.write(np.array(offsets, dtype=np.int64).tobytes())
                offsets.clear()
            h = hash64(norm)
            exact.add(h % parts, (h, doc.idx))
            bands.add_keys(band.keys(hasher.signature(hasher.shingles(norm))), doc.idx)
            if cfg.paragraph_share is not None:
                for p in {hash64(normalize(ln)): ln for _, ln in paragraphs(doc.text, cfg.para_min)}.items():
                    paras.add(p[0] % parts, (p[0], doc.idx, len("".join(p[1].split()))))
            n += 1
            first = doc.idx if first < 0 else first
            if doc.idx <= last:
                raise ValueError("documents of a shard must come in increasing idx")
            last = doc.idx
            if tick is not None and n % 1000 == 0:
                tick(n)
        offs.write(np.array(offsets, dtype=np.int64).reshape(-1, _COLS).tobytes())
    for spill in (bands, exact, paras):
        spill.flush()
    texts_tmp.replace(sig / f"texts-{rank:04d}.bin")
    snips_tmp.replace(sig / f"snips-{rank:04d}.bin")
    offsets_tmp.replace(sig / f"offsets-{rank:04d}.bin")
    stats = ShardStats(rank, n, first, last)
    _atomic_bytes(sig / f"stats-{rank:04d}.json", json.dumps(stats.to_json()).encode())
    return stats


def shard_stats(work: Path) -> list[ShardStats]:
    return [ShardStats(**json.loads(p.read_text())) for p in sorted((work / "sig").glob("stats-*.json"))]


# -- stage 2 -----------------------------------------------------------------------------------
def sort_partition(cfg: StageConfig, work: Path, partition: int, *, extra: Path | None = None) -> None:
    """Stage 2 for one partition: every rank's records of it, sorted by key then document.

    ``extra`` is a folder holding an earlier version's sorted files of the same partition
    (incremental dedup): they are merged in, not recomputed.
    """
    np = _np()
    out = work / "buckets"
    out.mkdir(parents=True, exist_ok=True)
    for kind, dtype in (("band", _key_dtype()), ("exact", _key_dtype()), ("para", _preg_dtype())):
        chunks = [np.fromfile(p, dtype=dtype) for p in sorted((work / "sig").glob(f"{kind}-{partition:04d}-*.bin"))]
        if extra is not None and (extra / f"{kind}-{partition:04d}.bin").is_file():
            chunks.append(np.fromfile(extra / f"{kind}-{partition:04d}.bin", dtype=dtype))
        rec = np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)
        rec = rec[np.lexsort((rec["doc"], rec["key"]))]
        _atomic_bytes(out / f"{kind}-{partition:04d}.bin", rec.tobytes())


class _Texts:
    """Normalized texts by document number, read back from the spills of every shard (and an old version)."""

    def __init__(self, folders: Sequence[Path], hasher: MinHasher) -> None:
        np = _np()
        self.np, self.hasher = np, hasher
        self.shards: list[tuple[Any, Path]] = []
        for folder in folders:
            for off in sorted(folder.glob("offsets-*.bin")):
                index = np.memmap(off, dtype=np.int64, mode="r").reshape(-1, _COLS) if off.stat().st_size else None
                if index is not None:
                    self.shards.append((index, off.with_name(off.name.replace("offsets-", "texts-"))))
        self.files: dict[Path, Any] = {}
        self.cache: dict[int, Any] = {}

    def row(self, doc: int) -> tuple[Any, Path]:
        for index, path in self.shards:
            i = int(self.np.searchsorted(index[:, 0], doc))
            if i < len(index) and int(index[i, 0]) == doc:
                return index[i], path
        raise KeyError(doc)

    def shingles(self, doc: int) -> Any:
        if doc not in self.cache:
            if len(self.cache) > 4096:
                self.cache.clear()
            row, path = self.row(doc)
            f = self.files.get(path)
            if f is None:
                f = self.files[path] = open(path, "rb")  # noqa: SIM115 - closed in close()
            f.seek(int(row[1]))
            self.cache[doc] = self.hasher.shingles(f.read(int(row[2])).decode("utf-8"))
        return self.cache[doc]

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def _groups(rec: Any) -> Iterator[Any]:
    """Runs of equal ``key`` (at least two records) of records sorted by key."""
    np = _np()
    if len(rec) < 2:
        return
    keys = rec["key"]
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    ends = np.concatenate((starts[1:], [len(keys)]))
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e - s > 1:
            yield rec[s:e]


# -- stage 3 -----------------------------------------------------------------------------------
def partition_pairs(cfg: StageConfig, work: Path, partition: int, *, old: Path | None = None, new_from: int = 0) -> int:
    """Stage 3 for one partition: verified candidate pairs, exact copies and shared paragraphs.

    With ``old`` (an earlier version's kept files, documents numbered below ``new_from``) only
    pairs whose later document is new are made: the old version was deduplicated already.
    Returns the number of pairs written.
    """
    np = _np()
    b = work / "buckets"
    out = work / "pairs"
    out.mkdir(parents=True, exist_ok=True)
    pairs: list[tuple[int, int]] = []
    band = np.fromfile(b / f"band-{partition:04d}.bin", dtype=_key_dtype())
    for g in _groups(band):
        docs = sorted(set(g["doc"].tolist()))
        for j in range(1, len(docs)):
            if docs[j] < new_from:
                continue
            for o in dict.fromkeys([docs[0], *docs[max(1, j - cfg.max_checks) : j]]):
                pairs.append((docs[j], o))
    del band
    texts = _Texts([work / "sig", *([old] if old else [])], cfg.hasher())
    try:
        raw = np.unique(np.array(pairs, dtype=np.int64).reshape(-1, 2), axis=0)
        rec = np.zeros(len(raw), dtype=_pair_dtype())
        rec["later"], rec["earlier"] = raw[:, 0], raw[:, 1]
        rec["method"] = METHODS.index("near")
        rec["sim"] = [MinHasher.jaccard(texts.shingles(int(e)), texts.shingles(int(lt))) for lt, e in raw]
        rec = rec[rec["sim"] >= cfg.lsh_threshold]
    finally:
        texts.close()
    exact_rows: list[tuple[int, int, float, int]] = []
    for g in _groups(np.fromfile(b / f"exact-{partition:04d}.bin", dtype=_key_dtype())):
        docs = g["doc"].tolist()
        exact_rows += [(d, docs[0], 1.0, 0) for d in docs[1:] if d >= new_from]
    ex = np.array(exact_rows, dtype=_pair_dtype())
    allp = np.concatenate([rec, ex])
    allp = allp[np.lexsort((allp["earlier"], allp["later"]))]
    _atomic_bytes(out / f"pairs-{partition:04d}.bin", allp.tobytes())
    para_rows: list[tuple[int, int, int, int, int]] = []
    if cfg.paragraph_share is not None:
        for g in _groups(np.fromfile(b / f"para-{partition:04d}.bin", dtype=_preg_dtype())):
            docs, chars = g["doc"].tolist(), g["chars"].tolist()
            boiler = int(len(set(docs)) >= cfg.boilerplate_docs)
            key = int(g["key"][0])
            para_rows += [
                (d, docs[0], key, c, boiler) for d, c in zip(docs[1:], chars[1:], strict=True) if d >= new_from
            ]
    pr = np.array(para_rows, dtype=_para_dtype())
    pr = pr[np.argsort(pr["doc"], kind="stable")]
    _atomic_bytes(out / f"para-{partition:04d}.bin", pr.tobytes())
    return len(allp)


# -- stage 4 -----------------------------------------------------------------------------------
def _ranges(files: Sequence[Path], dtype: Any, field: str, lo: int, hi: int) -> Any:
    """The records with ``lo <= field < hi`` of files sorted by ``field`` (memory-mapped, sliced)."""
    np = _np()
    parts = []
    for path in files:
        if not path.stat().st_size:
            continue
        m = np.memmap(path, dtype=dtype, mode="r")
        a, z = np.searchsorted(m[field], [lo, hi])
        if z > a:
            parts.append(np.array(m[a:z]))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


class Flags:
    """One bit per document (stage 4's "removed" marks): an eighth of a byte each, not the corpus."""

    def __init__(self, n: int) -> None:
        np = _np()
        self.np = np
        self.bits = np.zeros((max(1, n) + 7) >> 3, dtype=np.uint8)

    def __getitem__(self, doc: Any) -> Any:
        if isinstance(doc, int):
            return bool((int(self.bits[doc >> 3]) >> (doc & 7)) & 1)
        np = self.np
        d = np.asarray(doc, dtype=np.int64)
        out = (self.bits[d >> 3] >> (d & 7).astype(np.uint8)) & np.uint8(1)
        return out.astype(bool) if out.ndim else bool(out)

    def __setitem__(self, doc: int, value: bool) -> None:
        if value:
            self.bits[doc >> 3] |= 1 << (doc & 7)
        else:
            self.bits[doc >> 3] &= 0xFF ^ (1 << (doc & 7))


@dataclass
class Components:
    """What stage 4 decided: counts per method, the slider's preview, where the decisions are."""

    docs: int
    removed: dict[str, int]
    preview: list[tuple[float, int]]
    stripped_docs: int
    offset: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def components(
    cfg: StageConfig, work: Path, docs: int, *, new_from: int = 0, chunk_docs: int = 1 << 16, start: int = 0
) -> Components:
    """Stage 4: the keep-first union-find over every pair file, a range of documents at a time.

    A document is removed (in this order of reasons) as an exact copy, as a near duplicate of
    an earlier kept document at ``threshold``, by the paragraph rule, or as a semantic
    duplicate (``pairs/sem-*.bin``) at ``semantic_threshold``. Its ``kept`` is the earliest
    such kept document's root. Writes ``decisions.bin`` (removed documents, sorted) and
    ``strip.bin`` (boilerplate paragraphs to strip, by document).
    """
    np = _np()
    pair_files = sorted((work / "pairs").glob("pairs-*.bin")) + sorted((work / "pairs").glob("sem-*.bin"))
    para_files = sorted((work / "pairs").glob("para-*.bin"))
    removed = Flags(docs)  # one bit per document: not the corpus
    totals = _Totals(work)
    counts = dict.fromkeys(METHODS, 0)
    near_code, sem_code = METHODS.index("near"), METHODS.index("semantic")
    stripped = 0
    steps = round((1.0 - cfg.lsh_threshold) / 0.05)
    grid = [round(cfg.lsh_threshold + s * 0.05, 2) for s in range(steps + 1)]
    pv_removed = [Flags(docs) for _ in grid]
    pv_count = [0] * len(grid)
    with open(work / ".decisions.tmp", "wb") as dec, open(work / ".strip.tmp", "wb") as strip:
        for lo in range(start, max(start, docs), chunk_docs):
            hi = min(docs, lo + chunk_docs)
            pairs = _ranges(pair_files, _pair_dtype(), "later", lo, hi)
            pairs = pairs[np.lexsort((pairs["earlier"], pairs["later"]))]
            paras = _ranges(para_files, _para_dtype(), "doc", lo, hi)
            paras = paras[np.argsort(paras["doc"], kind="stable")]
            p_docs = paras["doc"]
            later = pairs["later"]
            cand = np.union1d(np.unique(later), np.unique(p_docs))
            out: list[tuple[int, int, float, int]] = []
            strip_rows: list[tuple[int, int]] = []
            for doc in cand.tolist():
                if doc < new_from:
                    continue
                a, z = np.searchsorted(later, [doc, doc + 1])
                mine = pairs[a:z]
                decision: tuple[int, float, int] | None = None
                ex = mine[mine["method"] == 0]
                if len(ex):
                    decision = (int(ex["earlier"].min()), 1.0, 0)
                if decision is None:
                    best, best_sim = -1, -1.0
                    for e, s, m in zip(
                        mine["earlier"].tolist(), mine["sim"].tolist(), mine["method"].tolist(), strict=True
                    ):
                        if m == near_code and s >= cfg.threshold and s > best_sim and not removed[e]:
                            best, best_sim = e, s
                    if best >= 0:
                        decision = (best, round(best_sim, 4), near_code)
                a2, z2 = np.searchsorted(p_docs, [doc, doc + 1])
                my_paras = paras[a2:z2]
                if decision is None and cfg.paragraph_share is not None and len(my_paras):
                    dup = my_paras[(my_paras["boiler"] == 0) & ~removed[my_paras["first"]]]
                    if len(dup):
                        total = totals(doc)
                        share = float(dup["chars"].sum()) / total
                        if share > cfg.paragraph_share:
                            decision = (int(dup["first"].min()), round(share, 4), METHODS.index("paragraph"))
                if decision is None:
                    best, best_sim = -1, -1.0
                    for e, s, m in zip(
                        mine["earlier"].tolist(), mine["sim"].tolist(), mine["method"].tolist(), strict=True
                    ):
                        if m == sem_code and s >= cfg.semantic_threshold and s > best_sim and not removed[e]:
                            best, best_sim = e, s
                    if best >= 0:
                        decision = (best, round(best_sim, 4), sem_code)
                if decision is not None:
                    removed[doc] = True
                    counts[METHODS[decision[2]]] += 1
                    out.append((doc, decision[0], decision[1], decision[2]))
                else:
                    boiler = my_paras[my_paras["boiler"] == 1]
                    if len(boiler):
                        stripped += 1
                        strip_rows += [(doc, int(h)) for h in boiler["hash"].tolist()]
                # the slider: near duplicates alone at each threshold (exact copies never count)
                is_exact = bool(len(ex))
                for t_i, t in enumerate(grid):
                    if is_exact:
                        pv_removed[t_i][doc] = True
                        continue
                    for e, s, m in zip(
                        mine["earlier"].tolist(), mine["sim"].tolist(), mine["method"].tolist(), strict=True
                    ):
                        if m == near_code and s >= t and not pv_removed[t_i][e]:
                            pv_removed[t_i][doc] = True
                            pv_count[t_i] += 1
                            break
            dec.write(np.array(out, dtype=_decision_dtype()).tobytes())
            strip.write(np.array(strip_rows, dtype=np.dtype([("doc", "<i8"), ("hash", "<u8")])).tobytes())
    (work / ".decisions.tmp").replace(work / "decisions.bin")
    (work / ".strip.tmp").replace(work / "strip.bin")
    res = Components(
        docs, {k: v for k, v in counts.items() if v}, list(zip(grid, pv_count, strict=True)), stripped, new_from
    )
    _atomic_bytes(work / "components.json", json.dumps(res.to_json()).encode())
    return res


class _Totals:
    """A document's non-space characters (stage 1 kept them beside its text offset)."""

    def __init__(self, work: Path) -> None:
        np = _np()
        self.np = np
        self.shards: list[tuple[Any, Any]] = []
        for off in sorted((work / "sig").glob("offsets-*.bin")):
            if off.stat().st_size:
                idx = np.memmap(off, dtype=np.int64, mode="r").reshape(-1, _COLS)
                self.shards.append((idx[:, 0], idx[:, 3]))

    def __call__(self, doc: int) -> int:
        for ids, totals in self.shards:
            i = int(self.np.searchsorted(ids, doc))
            if i < len(ids) and int(ids[i]) == doc:
                return max(1, int(totals[i]))
        return 1


class Snippets:
    """Where a document is and the start of its raw text, by document number (stage 1's spill)."""

    def __init__(self, *folders: Path) -> None:
        np = _np()
        self.np = np
        self.shards: list[tuple[Any, Any]] = []
        for off in sorted(p for folder in folders for p in folder.glob("offsets-*.bin")):
            if off.stat().st_size:
                idx = np.memmap(off, dtype=np.int64, mode="r").reshape(-1, _COLS)
                self.shards.append((idx, open(off.with_name(off.name.replace("offsets-", "snips-")), "rb")))  # noqa: SIM115

    def get(self, doc: int) -> tuple[str, str]:
        for idx, f in self.shards:
            i = int(self.np.searchsorted(idx[:, 0], doc))
            if i < len(idx) and int(idx[i, 0]) == doc:
                f.seek(int(idx[i, 4]))
                where, text = json.loads(f.read(int(idx[i, 5])).decode("utf-8"))
                return str(where), str(text)
        return f"#{doc}", ""

    def close(self) -> None:
        for _, f in self.shards:
            f.close()


def decisions(work: Path) -> Any:
    """Stage 4's removed documents (doc, kept, sim, method), sorted by document."""
    np = _np()
    path = work / "decisions.bin"
    return np.fromfile(path, dtype=_decision_dtype()) if path.stat().st_size else np.zeros(0, _decision_dtype())


# -- stage 5 -----------------------------------------------------------------------------------
def filter_shard(docs: Iterable[Doc], cfg: StageConfig, work: Path, write: Callable[[Doc, str], None]) -> int:
    """Stage 5 for one shard: its kept documents, boilerplate lines stripped, through ``write``."""
    np = _np()
    dec = (
        np.memmap(work / "decisions.bin", dtype=_decision_dtype(), mode="r")
        if (work / "decisions.bin").stat().st_size
        else None
    )
    sdt = np.dtype([("doc", "<i8"), ("hash", "<u8")])
    strip = np.memmap(work / "strip.bin", dtype=sdt, mode="r") if (work / "strip.bin").stat().st_size else None
    kept = 0
    for doc in docs:
        if dec is not None:
            i = int(np.searchsorted(dec["doc"], doc.idx))
            if i < len(dec) and int(dec["doc"][i]) == doc.idx:
                continue
        text = doc.text
        if strip is not None:
            a, z = np.searchsorted(strip["doc"], [doc.idx, doc.idx + 1])
            if z > a:
                gone = set(strip["hash"][a:z].tolist())
                lines = text.split("\n")
                keep = [ln for ln in lines if not (len(ln.strip()) >= cfg.para_min and hash64(normalize(ln)) in gone)]
                text = "\n".join(keep) if any(ln.strip() for ln in keep) else text
        write(doc, text)
        kept += 1
    return kept


def partitions_for(docs: int, bands: int, max_memory: int) -> int:
    """Partitions that keep one partition's band records (16 bytes, sorted: x3) in ``max_memory``."""
    need = docs * bands * 16 * 3
    return max(1, min(4096, math.ceil(need / max(1, max_memory))))
