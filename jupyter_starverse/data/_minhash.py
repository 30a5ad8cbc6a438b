"""MinHash LSH near-duplicate search whose memory stays bounded: band tables live on disk.

Signatures are datasketch's ``affine32`` MinHash (the same values ``datasketch.MinHash`` gives
for the same 32-bit shingle hashes; a test checks it), computed with numpy for a whole document
at once. Each document's band keys go to one of ``partitions`` files on disk (by key); a
partition is read back, sorted and grouped on its own, so the peak memory is one partition,
whatever the corpus size. Candidates are then verified by the exact Jaccard similarity of their
character shingles, read back from a spill of the normalized texts.
"""

from __future__ import annotations

import functools
import math
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import MissingDependencyError

__all__ = ["PEAK_PER_BYTE", "LshIndex", "MinHasher", "Pair", "greedy", "lsh_params", "normalize"]

_FMIX32 = (16, 0x85EBCA6B, 13, 0xC2B2AE35, 16)
_WS = re.compile(r"\s+")
_RECORD = 16  # bytes per (band key, doc) record
_BLOCK = 1 << 20  # characters hashed at once into shingles
_SIG_ROWS = 4096  # shingles per block of the signature's (shingles x num_perm) products
PEAK_PER_BYTE = 16
"""Peak bytes per byte of the largest document while it is signed: its line and decoded text, the
normalized copy, its 4-byte shingle hashes, their sort and the unique ones (measured: see tests)."""


def _np() -> Any:
    try:
        import numpy as np
    except ImportError as e:  # pragma: no cover - numpy comes with datasketch
        raise MissingDependencyError("numpy", extra="data", purpose="dedup") from e
    return np


def normalize(text: str) -> str:
    """Lower case, runs of whitespace as one space: what shingles and exact hashes see."""
    return _WS.sub(" ", text).strip().lower()


@functools.lru_cache(maxsize=64)
def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """``(bands, rows)`` datasketch's MinHashLSH would pick (equal false positive/negative weights)."""
    try:
        from datasketch.lsh import _optimal_param  # type: ignore[import-untyped]
    except ImportError as e:
        raise MissingDependencyError("datasketch", extra="data", purpose="dedup") from e
    b, r = _optimal_param(threshold, num_perm, 0.5, 0.5)
    return int(b), int(r)


class MinHasher:
    """Character ``ngram`` shingles -> a ``num_perm`` MinHash signature (datasketch affine32)."""

    def __init__(self, *, num_perm: int = 128, ngram: int = 5, seed: int = 1) -> None:
        try:
            from datasketch import MinHash  # type: ignore[import-untyped]
        except ImportError as e:
            raise MissingDependencyError("datasketch", extra="data", purpose="dedup") from e
        np = _np()
        self.np = np
        self.num_perm, self.ngram, self.seed = num_perm, ngram, seed
        a, b = MinHash(num_perm=num_perm, seed=seed).permutations
        self._a = np.asarray(a, dtype=np.uint32)[None, :]
        self._b = np.asarray(b, dtype=np.uint32)[None, :]
        self._powers = np.array([pow(1_000_003, k, 1 << 64) for k in range(ngram)][::-1], dtype=np.uint64)

    def shingles(self, norm: str) -> Any:
        """Sorted unique 32-bit hashes of the character ``ngram``s of a normalized text.

        Computed :data:`_BLOCK` characters at a time: a document of L characters holds its 4-byte
        hashes (and their sort) at once, never the 8-byte code points and products of all of it.
        """
        np = self.np
        n = self.ngram
        if len(norm) < n:
            norm = norm + "\0" * (n - len(norm))
        count = len(norm) - n + 1
        out = np.empty(count, dtype=np.uint32)
        for at in range(0, count, _BLOCK):
            piece = norm[at : min(len(norm), at + _BLOCK + n - 1)]
            cps = np.frombuffer(piece.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
            m = len(cps) - n + 1
            h = np.zeros(m, dtype=np.uint64)
            for k in range(n):
                h += cps[k : k + m] * self._powers[k]
            h *= np.uint64(0x9E3779B97F4A7C15)
            out[at : at + m] = (h >> np.uint64(32)).astype(np.uint32)
        out.sort()
        keep = np.empty(len(out), dtype=bool)
        keep[:1] = True
        np.not_equal(out[1:], out[:-1], out=keep[1:])
        return out[keep]

    def signature(self, shingles: Any) -> Any:
        """The MinHash of a set of 32-bit hashes (what ``datasketch.MinHash.update_batch`` gives).

        Rows of :data:`_SIG_ROWS` shingles at a time: the ``shingles x num_perm`` products of one
        large document would otherwise be 512 bytes per shingle (a 100 MB line: tens of GB).
        """
        np = self.np
        s1, m1, s2, m2, s3 = _FMIX32
        sig = np.full(self.num_perm, np.iinfo(np.uint32).max, dtype=np.uint32)
        for at in range(0, max(1, len(shingles)), _SIG_ROWS):
            hv = shingles[at : at + _SIG_ROWS].astype(np.uint32)
            if not len(hv):
                break
            hv = hv ^ (hv >> np.uint32(s1))
            hv = hv * np.uint32(m1)
            hv = hv ^ (hv >> np.uint32(s2))
            hv = hv * np.uint32(m2)
            hv = hv ^ (hv >> np.uint32(s3))
            np.minimum(sig, (hv[:, None] * self._a + self._b).min(axis=0), out=sig)
        return sig

    @staticmethod
    def jaccard(a: Any, b: Any) -> float:
        """Exact Jaccard similarity of two sorted unique shingle arrays."""
        np = _np()
        if not len(a) and not len(b):
            return 1.0
        inter = len(np.intersect1d(a, b, assume_unique=True))
        return inter / (len(a) + len(b) - inter)


@dataclass(frozen=True)
class Pair:
    """A removed document (``dup``), the kept document it duplicates (``kept``, earlier), their Jaccard."""

    kept: int
    dup: int
    similarity: float


def _pair_dtype() -> Any:
    np = _np()
    return np.dtype([("later", "<i8"), ("earlier", "<i8"), ("sim", "<f4")])


def greedy(verified: Any, threshold: float, removed: Any) -> Iterator[Pair]:
    """Keep-first decisions over verified pairs sorted by ``later``.

    A document is removed when it is at least ``threshold`` similar to an earlier document that
    was kept; its most similar such document is recorded. ``removed`` (a bool array over the
    documents, updated in place) carries the decisions from one batch of pairs to the next.
    """
    i, n = 0, len(verified)
    later, earlier, sim = verified["later"], verified["earlier"], verified["sim"]
    while i < n:
        doc = int(later[i])
        j = i
        best, best_sim = -1, -1.0
        while j < n and later[j] == doc:
            s = float(sim[j])
            if s >= threshold and s > best_sim and not removed[int(earlier[j])]:
                best, best_sim = int(earlier[j]), s
            j += 1
        if best >= 0:
            removed[doc] = True
            yield Pair(best, doc, round(best_sim, 4))
        i = j


class LshIndex:
    """Band keys spilled to ``partitions`` files under ``folder``; texts spilled for verification.

    Add documents in order with :meth:`add` (``doc`` numbers increasing), then :meth:`candidates`
    yields groups of documents that share a band, one partition in memory at a time.
    """

    def __init__(
        self,
        folder: Path,
        *,
        hasher: MinHasher,
        threshold: float = 0.5,
        partitions: int = 16,
        buffer_bytes: int = 8 << 20,
    ) -> None:
        np = _np()
        self.np = np
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.hasher = hasher
        self.bands, self.rows = lsh_params(threshold, hasher.num_perm)
        self.partitions = max(1, partitions)
        rng = np.random.RandomState(12345)
        self._mult = (
            rng.randint(1, 1 << 62, size=(self.rows,), dtype=np.int64).astype(np.uint64) << np.uint64(1)
        ) | np.uint64(1)
        self._band_salt = rng.randint(1, 1 << 62, size=(self.bands,), dtype=np.int64).astype(np.uint64)
        self._buffers: list[list[Any]] = [[] for _ in range(self.partitions)]
        self._buffered = 0
        self._flush_at = max(1, buffer_bytes // (_RECORD * self.bands))
        self._texts = open(folder / "texts.bin", "wb")  # noqa: SIM115 - closed in finish()
        self._offsets_file = open(folder / "offsets.bin", "wb")  # noqa: SIM115
        self._pos = 0
        self.count = 0

    def band_keys(self, signature: Any) -> Any:
        np = self.np
        sig = signature[: self.bands * self.rows].astype(np.uint64).reshape(self.bands, self.rows)
        keys = (sig * self._mult).sum(axis=1) ^ self._band_salt
        keys ^= keys >> np.uint64(29)
        return keys

    def add(self, doc: int, norm: str, signature: Any) -> None:
        """Record ``doc``'s band keys and its normalized text."""
        np = self.np
        keys = self.band_keys(signature)
        part = keys % np.uint64(self.partitions)
        records = np.empty((self.bands, 2), dtype=np.uint64)
        records[:, 0] = keys
        records[:, 1] = doc
        for p in np.unique(part):
            self._buffers[int(p)].append(records[part == p])
        data = norm.encode("utf-8")
        self._texts.write(data)
        self._offsets_file.write(struct.pack("<qqq", doc, self._pos, len(data)))
        self._pos += len(data)
        self.count += 1
        self._buffered += 1
        if self._buffered >= self._flush_at:
            self._flush()

    def _flush(self) -> None:
        np = self.np
        for p, chunks in enumerate(self._buffers):
            if chunks:
                with open(self.folder / f"bands-{p:04d}.bin", "ab") as f:
                    f.write(np.concatenate(chunks).tobytes())
                chunks.clear()
        self._buffered = 0

    def finish(self) -> None:
        self._flush()
        self._texts.close()
        self._offsets_file.close()

    def _text_index(self) -> Any:
        np = self.np
        return np.fromfile(self.folder / "offsets.bin", dtype=np.int64).reshape(-1, 3)  # doc order

    def _reader(self, index: Any, texts: Any, cache: dict[int, Any]) -> Any:
        np = self.np

        def shingles(doc: int) -> Any:
            if doc not in cache:
                if len(cache) > 4096:
                    cache.clear()
                row = index[int(np.searchsorted(index[:, 0], doc))]
                texts.seek(int(row[1]))
                cache[doc] = self.hasher.shingles(texts.read(int(row[2])).decode("utf-8"))
            return cache[doc]

        return shingles

    def candidates(self) -> Iterator[list[int]]:
        """Groups (sorted document numbers, at least two) sharing a band key, partition by partition."""
        np = self.np
        for p in range(self.partitions):
            path = self.folder / f"bands-{p:04d}.bin"
            if not path.exists():
                continue
            rec = np.fromfile(path, dtype=np.uint64).reshape(-1, 2)
            if len(rec) < 2:
                continue
            order = np.lexsort((rec[:, 1], rec[:, 0]))
            rec = rec[order]
            keys = rec[:, 0]
            starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
            ends = np.concatenate((starts[1:], [len(keys)]))
            for s, e in zip(starts, ends, strict=True):
                if e - s > 1:
                    yield sorted({int(d) for d in rec[s:e, 1]})

    def verify(self, *, floor: float, docs: int, chunk_docs: int = 1 << 20, max_checks: int = 8) -> Path:
        """Exact Jaccard of the candidate pairs; those at ``floor`` or more, sorted by later document, on disk.

        Each member of a band group is paired with the group's first document and its
        ``max_checks`` nearest earlier members. Pairs go to files by range of the later document
        (``chunk_docs`` documents each), so sorting and verifying hold one range in memory.
        """
        np = self.np
        chunks = max(1, math.ceil(docs / chunk_docs))
        files = [open(self.folder / f"pairs-{c:04d}.bin", "wb") for c in range(chunks)]  # noqa: SIM115
        try:
            for group in self.candidates():
                for j in range(1, len(group)):
                    doc = group[j]
                    others = dict.fromkeys([group[0], *group[max(1, j - max_checks) : j]])
                    rows = np.array([(doc, o) for o in others], dtype=np.int64)
                    files[min(chunks - 1, doc // chunk_docs)].write(rows.tobytes())
        finally:
            for f in files:
                f.close()
        out = self.folder / "verified.bin"
        with open(out, "wb") as sink, open(self.folder / "texts.bin", "rb") as texts:
            shingles = self._reader(self._text_index(), texts, {})
            for c in range(chunks):
                path = self.folder / f"pairs-{c:04d}.bin"
                raw = np.fromfile(path, dtype=np.int64).reshape(-1, 2)
                path.unlink()
                if not len(raw):
                    continue
                raw = np.unique(raw, axis=0)  # sorted by (later, earlier), each pair once
                rec = np.zeros(len(raw), dtype=_pair_dtype())
                rec["later"], rec["earlier"] = raw[:, 0], raw[:, 1]
                rec["sim"] = [MinHasher.jaccard(shingles(int(e)), shingles(int(lt))) for lt, e in raw]
                sink.write(rec[rec["sim"] >= floor].tobytes())
        return out

    def verified(self, path: Path, *, batch: int = 1 << 20) -> Iterator[Any]:
        """The verified pairs in order, a batch at a time; a document's pairs never straddle two batches."""
        np = self.np
        dtype = _pair_dtype()
        total = path.stat().st_size // dtype.itemsize
        start = 0
        while start < total:
            rec = np.fromfile(path, dtype=dtype, count=batch, offset=start * dtype.itemsize)
            if start + len(rec) < total:
                whole = rec["later"] != rec["later"][-1]
                if whole.any():
                    rec = rec[whole]
            start += len(rec)
            yield rec

    def close(self) -> None:
        for path in self.folder.iterdir():
            path.unlink(missing_ok=True)


def partitions_for(docs: int, bands: int, max_memory: int) -> int:
    """How many band files keep one partition (``docs * bands`` records of 16 bytes, sorted) in ``max_memory``."""
    need = docs * bands * _RECORD * 3  # records, the sort order, the grouping
    return max(1, min(4096, math.ceil(need / max(1, max_memory))))
