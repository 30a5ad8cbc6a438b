"""Semantic dedup without all pairs (SemDedup's approach): embed, cluster, compare inside clusters.

Stages over files, like the MinHash ones (:mod:`._stages`), each a plain function:

1. :func:`embed_shard` (per shard): unit vectors of the documents, appended to a file a batch
   at a time (float32, one row per document) beside their document numbers.
2. :func:`train_centroids` (one worker): spherical k-means on a sample of the vectors read
   from every shard (at most ``sample`` rows in memory), ``k`` centroids written.
3. :func:`assign_shard` (per shard): each vector goes to its nearest centroid; the rows of a
   cluster are appended to the file of its group (``cluster % groups``).
4. :func:`group_pairs` (per group): inside each cluster, every document against the earlier
   ones (a block of rows at a time); each document's ``max_checks`` most similar earlier ones
   at ``semantic_threshold`` or more are written sorted by the later document, the input of
   the MinHash stages' union-find (stage 4).

Comparisons are the sum of the squared cluster sizes, not the square of the corpus.

Incremental (``--against``): a version semantic dedup wrote keeps its vectors, the encoder's id
and the centroids beside it (``_starverse/dedup/sem``, :mod:`._incremental`); a new batch is
embedded alone and its rows are compared with the kept rows of the clusters they fall in
(:func:`attach_old`), never re-embedding the old version unless it keeps no vectors of this
encoder (then it is embedded once, and the report says so).

The default threshold is per encoder kind (:data:`DEFAULT_THRESHOLDS`): on the planted
paraphrases of ``benchmarks/bench_dedup_scale.py --paraphrases`` the static encoder distilled
from MiniLM did better at 0.96 than at 0.95 (recall 0.839, 8 false positives, as semhash with
the same encoder); the transformer keeps 0.95.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ._read import Doc
from ._stages import METHODS, StageConfig, _atomic_bytes, _pair_dtype

__all__ = [
    "DEFAULT_THRESHOLDS",
    "assign_shard",
    "attach_old",
    "default_threshold",
    "encoder_id",
    "default_clusters",
    "embed_dim",
    "embed_shard",
    "group_pairs",
    "groups_for",
    "semantic_note",
    "semantic_stage",
    "train_centroids",
]

_BATCH = 256
_BLOCK = 2048  # rows of a cluster compared at once ...
_CELLS = 1 << 20  # ... fewer in a large cluster: one block's similarity matrix stays ~4 MB
OLD_RANK = 9999  # the shard number of an old version's kept vectors in a work folder
DEFAULT_THRESHOLDS = {"static": 0.96, "transformer": 0.95}
SPILL = 2  # a row is compared in up to this many clusters ...
MARGIN = 0.05  # ... those whose centroid is this close to its nearest one


def _np() -> Any:
    import numpy as np

    return np


def _release(arr: Any) -> None:
    """Drop the pages of a memory-mapped file this process has read (they stay in the page cache):
    a worker that reads a whole vector file through a map would otherwise hold all of it in its RSS."""
    import mmap

    np = _np()
    m = arr
    while m is not None and not isinstance(m, np.memmap):
        m = m.base
    handle = getattr(m, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_DONTNEED"):
        handle.madvise(mmap.MADV_DONTNEED)


def encoder_id(encoder: Any) -> str:
    """What names an encoder in reports and beside kept vectors: its store reference when it came from
    the store (``hf:ORG/REPO``), else its folder's name; with its kind."""
    name = getattr(encoder, "ref", None) or getattr(encoder, "name", type(encoder).__name__)
    return f"{name} ({getattr(encoder, 'kind', 'transformer')})"


def default_threshold(encoder: Any) -> float:
    """The cosine threshold for an encoder's kind when the user gives none (:data:`DEFAULT_THRESHOLDS`)."""
    return DEFAULT_THRESHOLDS.get(str(getattr(encoder, "kind", "transformer")), 0.95)


def default_clusters(docs: int) -> int:
    """About 1,000 documents a cluster, at most 1,024 clusters."""
    return max(1, min(1024, math.ceil(docs / 1000)))


def embed_shard(docs: Iterable[Doc], encoder: Any, work: Path, rank: int, *, batch: int = _BATCH) -> tuple[int, float]:
    """Stage 1: this shard's unit vectors; returns (documents, seconds spent in the encoder)."""
    np = _np()
    sem = work / "sem"
    sem.mkdir(parents=True, exist_ok=True)
    vec_tmp, ids_tmp = sem / f".vec-{rank:04d}.tmp", sem / f".ids-{rank:04d}.tmp"
    n, spent, dim = 0, 0.0, 0
    pending: list[Doc] = []
    with open(vec_tmp, "wb") as vf, open(ids_tmp, "wb") as idf:

        def flush() -> None:
            nonlocal n, spent, dim
            if not pending:
                return
            t = time.perf_counter()
            vecs = np.ascontiguousarray(encoder.embed([d.text for d in pending]), dtype=np.float32)
            spent += time.perf_counter() - t
            dim = vecs.shape[1]
            vf.write(vecs.tobytes())
            idf.write(np.array([d.idx for d in pending], dtype=np.int64).tobytes())
            n += len(pending)
            pending.clear()

        for doc in docs:
            pending.append(doc)
            if len(pending) >= batch:
                flush()
        flush()
    vec_tmp.replace(sem / f"vec-{rank:04d}.bin")
    ids_tmp.replace(sem / f"ids-{rank:04d}.bin")
    _atomic_bytes(
        sem / f"embed-{rank:04d}.json",
        json.dumps({"docs": n, "seconds": spent, "dim": dim, "encoder": encoder_id(encoder)}).encode(),
    )
    return n, spent


def attach_old(work: Path, old_sem: Path, encoder: Any) -> bool:
    """Place an old version's kept vectors in ``work`` as shard :data:`OLD_RANK`, with its centroids.

    Returns False (nothing placed) when the version keeps no vectors, or vectors of another encoder.
    """
    meta = old_sem / f"embed-{OLD_RANK:04d}.json"
    if not meta.is_file():
        return False
    info = json.loads(meta.read_text())
    if info.get("encoder") != encoder_id(encoder):
        return False
    sem = work / "sem"
    sem.mkdir(parents=True, exist_ok=True)
    for name in (f"vec-{OLD_RANK:04d}.bin", f"ids-{OLD_RANK:04d}.bin", "centroids.npy", "centroids.json"):
        if (old_sem / name).is_file():
            _link(old_sem / name, sem / name)
    _atomic_bytes(sem / f"embed-{OLD_RANK:04d}.json", json.dumps({**info, "seconds": 0.0, "old": True}).encode())
    return (sem / "centroids.npy").is_file()


def prepare_old(
    work: Path,
    against: Path,
    encoder: Any,
    old_docs: Callable[[], Iterator[Doc]] | None,
    *,
    say: Callable[[str], None] | None = None,
) -> bool:
    """The old version's vectors in ``work``: its kept ones (True: its centroids too), or embedded once here
    when it keeps none of this encoder (False: k-means is trained on old and new rows together)."""
    if attach_old(work, against / "sem", encoder):
        return True
    if old_docs is None:
        return False
    why = "keeps no vectors" if not (against / "sem").is_dir() else "keeps vectors of another encoder"
    (say or (lambda text: None))(f"semantic: the old version {why}: embedding it once")
    embed_shard(old_docs(), encoder, work, OLD_RANK)
    meta = work / "sem" / f"embed-{OLD_RANK:04d}.json"
    _atomic_bytes(meta, json.dumps({**json.loads(meta.read_text()), "old": True, "why": why}).encode())
    return False


def _link(src: Path, dst: Path) -> None:
    import os
    import shutil

    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _shards(work: Path) -> Iterator[tuple[int, Any, Any]]:
    np = _np()
    for meta in sorted((work / "sem").glob("embed-*.json")):
        rank = int(meta.stem.split("-")[1])
        info = json.loads(meta.read_text())
        if not info["docs"]:
            continue
        vecs = np.memmap(work / "sem" / f"vec-{rank:04d}.bin", dtype=np.float32, mode="r").reshape(-1, info["dim"])
        ids = np.memmap(work / "sem" / f"ids-{rank:04d}.bin", dtype=np.int64, mode="r")
        yield rank, ids, vecs


def train_centroids(work: Path, k: int, *, sample: int = 50_000, iters: int = 12, seed: int = 0) -> int:
    """Stage 2: spherical k-means on a sample drawn from every shard; returns the number of centroids."""
    np = _np()
    rng = np.random.default_rng(seed)
    shards = list(_shards(work))
    total = sum(len(ids) for _, ids, _ in shards)
    if not total:
        return 0
    take = min(total, max(sample, 0))
    parts = []
    for _, ids, vecs in shards:
        share = max(1, round(take * len(ids) / total))
        rows = np.sort(rng.choice(len(ids), size=min(share, len(ids)), replace=False))
        for at in range(0, len(rows), 4096):
            parts.append(np.array(vecs[rows[at : at + 4096]]))
            _release(vecs)
    x = np.concatenate(parts)
    k = max(1, min(k, len(x)))
    c = x[rng.choice(len(x), size=k, replace=False)].copy()
    for _ in range(iters):
        assign = np.concatenate([np.argmax(x[a : a + 8192] @ c.T, axis=1) for a in range(0, len(x), 8192)])
        sums = np.zeros_like(c)
        np.add.at(sums, assign, x)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        empty = norms[:, 0] == 0
        c = np.where(empty[:, None], c, sums / np.maximum(norms, 1e-12))
    np.save(work / "sem" / "centroids.npy", c.astype(np.float32))
    _atomic_bytes(work / "sem" / "centroids.json", json.dumps({"k": int(k), "sample": len(x)}).encode())
    return k


def assign_shard(
    work: Path, rank: int, groups: int, *, batch: int = 1 << 13, nearest: int = SPILL, margin: float = MARGIN
) -> None:
    """Stage 3: this shard's rows to the group files of their nearest centroid.

    A row also goes to its next nearest centroids (up to ``nearest`` in all) when they are
    within ``margin`` of the nearest: two near-identical documents on either side of a
    boundary still meet in one cluster (a probe of two lists, as an IVF index does).
    """
    np = _np()
    c = np.load(work / "sem" / "centroids.npy")
    nearest = max(1, min(nearest, len(c)))
    batch = max(256, min(batch, _CELLS // max(1, len(c))))  # a batch's scores against every centroid: ~4 MB
    for r, ids, vecs in _shards(work):
        if r != rank:
            continue
        files = {}
        try:
            for at in range(0, len(ids), batch):
                v = np.asarray(vecs[at : at + batch])
                sims = v @ c.T
                order = np.empty((len(v), nearest), dtype=np.int64)  # nearest first, one argmax each:
                top = np.empty((len(v), nearest), dtype=np.float32)  # no index matrix of every centroid
                every = np.arange(len(v))
                for j in range(nearest):
                    order[:, j] = np.argmax(sims, axis=1)
                    top[:, j] = sims[every, order[:, j]]
                    sims[every, order[:, j]] = -np.inf
                del sims
                rid = np.asarray(ids[at : at + batch])
                for j in range(nearest):
                    keep = top[:, j] >= top[:, 0] - margin if j else np.ones(len(v), dtype=bool)
                    cl = order[:, j]
                    for g in np.unique(cl[keep] % groups).tolist():
                        sel = keep & (cl % groups == g)
                        if g not in files:
                            files[g] = (
                                open(work / "sem" / f"grp-{g:04d}-{rank:04d}.ids", "wb"),  # noqa: SIM115
                                open(work / "sem" / f"grp-{g:04d}-{rank:04d}.vec", "wb"),  # noqa: SIM115
                            )
                        home = np.full(int(sel.sum()), int(j == 0), dtype=np.int64)  # 1: its nearest cluster
                        files[g][0].write(np.stack([cl[sel].astype(np.int64), rid[sel], home], axis=1).tobytes())
                        files[g][1].write(v[sel].tobytes())
                del v
                _release(vecs)
        finally:
            for a, b in files.values():
                a.close()
                b.close()


def group_pairs(cfg: StageConfig, work: Path, group: int, *, dim: int, new_from: int = 0) -> tuple[int, int]:
    """Stage 4: pairs inside each cluster of ``group``; returns (pairs written, comparisons made).

    Only the group's (cluster, document) records are read whole (16 bytes a row); the vectors
    of one cluster at a time are gathered from the memory-mapped group files. Documents below
    ``new_from`` (an old version's) are earlier candidates only, never queries.
    """
    np = _np()
    recs: list[Any] = []
    vecs: list[Any] = []
    for path in sorted((work / "sem").glob(f"grp-{group:04d}-*.ids")):
        rec = np.fromfile(path, dtype=np.int64).reshape(-1, 3)
        if not len(rec):
            continue
        where = np.stack([np.full(len(rec), len(vecs), np.int64), np.arange(len(rec), dtype=np.int64)], axis=1)
        recs.append(np.concatenate([rec, where], axis=1))  # cluster, document, home, file, row
        vecs.append(np.memmap(path.with_suffix(".vec"), dtype=np.float32, mode="r").reshape(-1, dim))
    out: list[Any] = []
    compared = 0
    if recs:
        rec = np.concatenate(recs)
        rec = rec[np.lexsort((rec[:, 1], rec[:, 0]))]  # by cluster, then document
        starts = np.flatnonzero(np.concatenate(([True], rec[1:, 0] != rec[:-1, 0])))
        ends = np.concatenate((starts[1:], [len(rec)]))
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            if e - s < 2:
                continue
            docs = rec[s:e, 1]
            v = np.empty((e - s, dim), dtype=np.float32)
            for f in np.unique(rec[s:e, 3]).tolist():
                sel = rec[s:e, 3] == f
                v[sel] = vecs[f][rec[s:e, 4][sel]]
                _release(vecs[f])
            home = (rec[s:e, 2] == 1) & (docs >= new_from)  # a spilled or old row is an earlier candidate only
            block = max(64, min(_BLOCK, _CELLS // (e - s)))  # a block's similarities: at most _CELLS floats
            for a in range(0, e - s, block):
                q = np.flatnonzero(home[a : a + block]) + a
                if not len(q):
                    continue
                sims = v[q] @ v[: a + block].T  # later rows against every earlier one
                compared += sims.size
                sims[np.arange(sims.shape[1])[None, :] >= q[:, None]] = -np.inf  # only earlier documents
                top = min(cfg.max_checks, sims.shape[1])  # a document's most similar earlier ones, no more
                best = np.argpartition(-sims, top - 1, axis=1)[:, :top]
                best_sims = np.take_along_axis(sims, best, axis=1)
                rows, k = np.nonzero(best_sims >= cfg.semantic_threshold)
                cols = best[rows, k]
                if len(rows):
                    p = np.zeros(len(rows), dtype=_pair_dtype())
                    p["later"], p["earlier"] = docs[q[rows]], docs[cols]
                    p["sim"] = sims[rows, cols]
                    p["method"] = METHODS.index("semantic")
                    out.append(p)
    pairs = np.concatenate(out) if out else np.zeros(0, dtype=_pair_dtype())
    pairs = pairs[np.lexsort((pairs["earlier"], pairs["later"]))]
    (work / "pairs").mkdir(parents=True, exist_ok=True)
    _atomic_bytes(work / "pairs" / f"sem-{group:04d}.bin", pairs.tobytes())
    stats = {"pairs": len(pairs), "compared": compared}
    _atomic_bytes(work / "sem" / f"pairs-{group:04d}.json", json.dumps(stats).encode())
    return len(pairs), compared


def groups_for(cfg: StageConfig, k: int) -> int:
    """Group files the clusters are spread over (one worker's share of stage 4 each)."""
    return max(1, min(cfg.partitions, k))


def embed_dim(work: Path) -> int:
    """The vectors' width (from the shards' stage-1 records; 0 when nothing was embedded)."""
    for meta in sorted((work / "sem").glob("embed-*.json")):
        info = json.loads(meta.read_text())
        if info["docs"]:
            return int(info["dim"])
    return 0


def semantic_note(work: Path, cfg: StageConfig, encoder: Any) -> tuple[str, list[dict[str, Any]]]:
    """The report's line about the semantic stages, and each rank's embedding figures, from their files."""
    ranks = []
    old = 0
    why = None
    for meta in sorted((work / "sem").glob("embed-*.json")):
        info = json.loads(meta.read_text())
        rank = int(meta.stem.split("-")[1])
        if info.get("old"):
            old += int(info["docs"])
            why = info.get("why")
            continue
        rate = info["docs"] / info["seconds"] if info["seconds"] > 0 else 0.0
        ranks.append({"rank": rank, "docs": int(info["docs"]), "embed_s": round(float(info["seconds"]), 3),
                      "docs_per_s": round(rate, 1)})  # fmt: skip
    n = sum(r["docs"] for r in ranks) + old
    cpath = work / "sem" / "centroids.json"
    k = int(json.loads(cpath.read_text())["k"]) if cpath.is_file() else 0
    if not n or not k:
        return "semantic: no documents to embed", ranks
    pairs = compared = 0
    for st in (work / "sem").glob("pairs-*.json"):
        info = json.loads(st.read_text())
        pairs, compared = pairs + int(info["pairs"]), compared + int(info["compared"])
    slowest = max((r["embed_s"] for r in ranks), default=0.0)
    rate = (n - old) / slowest if slowest > 0 else float("inf")
    per_rank = ""
    if len(ranks) > 1:
        per_rank = f" over {len(ranks)} ranks (" + ", ".join(f"{r['docs_per_s']:,.0f}" for r in ranks) + " each)"
    note = (
        f"semantic: encoder {encoder_id(encoder)}, {rate:,.0f} documents/s{per_rank}; "
        f"k-means {k} clusters, threshold {cfg.semantic_threshold}; "
        f"{compared:,} comparisons inside clusters ({n * (n - 1) // 2:,} for all pairs), {pairs:,} pairs"
    )
    if old and why:
        note += f"; the old version {why}: its {old:,} documents were embedded once (kept beside the output)"
    elif old:
        note += f"; against {old:,} kept vectors of the old version (read, not recomputed)"
    return note, ranks


def semantic_stage(
    docs: Callable[[], Iterator[Doc]],
    encoder: Any,
    cfg: StageConfig,
    work: Path,
    *,
    clusters: int = 0,
    against: Path | None = None,
    old_docs: Callable[[], Iterator[Doc]] | None = None,
    new_from: int = 0,
    say: Callable[[str], None] | None = None,
) -> str:
    """The four stages in one process (one shard); the report's line about what ran.

    With ``against`` (an old version's dedup folder) the new rows are compared with its kept
    vectors inside their clusters; when it keeps none of this encoder, ``old_docs`` are embedded
    once (and kept beside the new version for the next batch).
    """
    reused = against is not None and prepare_old(work, against, encoder, old_docs, say=say)
    embed_shard(docs(), encoder, work, 0)
    k = 0 if not reused else int(json.loads((work / "sem" / "centroids.json").read_text())["k"])
    if not k:
        total = sum(int(json.loads(p.read_text())["docs"]) for p in (work / "sem").glob("embed-*.json"))
        k = train_centroids(work, clusters or default_clusters(total))
    if k:
        groups = groups_for(cfg, k)
        assign_shard(work, 0, groups)
        if against is not None:
            assign_shard(work, OLD_RANK, groups)
        for g in range(groups):
            group_pairs(cfg, work, g, dim=embed_dim(work), new_from=new_from)
    return semantic_note(work, cfg, encoder)[0]
