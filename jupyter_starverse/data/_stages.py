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

Stages 1-3 live here; stages 4-5 in :mod:`._components`, what they share (config, record types,
spill files) in :mod:`._stagebase`. Every name stays importable from this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._components import Components as Components
from ._components import Flags as Flags
from ._components import Snippets as Snippets
from ._components import components as components
from ._components import decisions as decisions
from ._components import filter_shard as filter_shard
from ._components import partitions_for as partitions_for
from ._minhash import MinHasher, normalize
from ._read import Doc
from ._stagebase import _COLS as _COLS
from ._stagebase import _FLUSH_ROWS, _SNIPPET, _Band, _np, _Spill, hash64, paragraphs
from ._stagebase import METHODS as METHODS
from ._stagebase import StageConfig as StageConfig
from ._stagebase import _atomic_bytes as _atomic_bytes
from ._stagebase import _decision_dtype as _decision_dtype
from ._stagebase import _key_dtype as _key_dtype
from ._stagebase import _pair_dtype as _pair_dtype
from ._stagebase import _para_dtype as _para_dtype
from ._stagebase import _preg_dtype as _preg_dtype

__all__ = [
    "METHODS",
    "StageConfig",
    "components",
    "filter_shard",
    "partition_pairs",
    "sign_shard",
    "sort_partition",
]


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
