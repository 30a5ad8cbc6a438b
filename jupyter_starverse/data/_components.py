"""Dedup stages 4 and 5: the keep-first union-find over the pair files, and the filter per shard.

:func:`components` visits documents in order, a range at a time, and decides for each whether it
is an exact copy, a near duplicate of an earlier kept document, a paragraph-rule removal or a
semantic duplicate (``decisions.bin``, ``strip.bin``, ``components.json``); :func:`filter_shard`
writes a shard's kept documents with boilerplate lines stripped. :class:`Snippets` reads back
where a document came from for the report. Stages 1-3 are in :mod:`._stages`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._minhash import normalize
from ._read import Doc
from ._stagebase import (
    _COLS,
    METHODS,
    StageConfig,
    _atomic_bytes,
    _decision_dtype,
    _np,
    _pair_dtype,
    _para_dtype,
    hash64,
)


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


def _best(mine: Any, code: int, threshold: float, removed: Flags) -> tuple[int, float, int] | None:
    """The most similar earlier kept document among ``mine``'s pairs of ``method == code`` at ``threshold``."""
    best, best_sim = -1, -1.0
    for e, s, m in zip(mine["earlier"].tolist(), mine["sim"].tolist(), mine["method"].tolist(), strict=True):
        if m == code and s >= threshold and s > best_sim and not removed[e]:
            best, best_sim = e, s
    return (best, round(best_sim, 4), code) if best >= 0 else None


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
                    decision = _best(mine, near_code, cfg.threshold, removed)
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
                    decision = _best(mine, sem_code, cfg.semantic_threshold, removed)
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
