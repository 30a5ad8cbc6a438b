"""MinHash signatures: the hashing that the dedup stages (:mod:`._stages`) band, sort and verify.

Signatures are datasketch's ``affine32`` MinHash (the same values ``datasketch.MinHash`` gives
for the same 32-bit shingle hashes; a test checks it), computed with numpy for a whole document
at once. What is done with them (band keys partitioned on disk, pairs verified by exact Jaccard,
keep-first components) lives in :mod:`._stages`, where no stage holds the corpus.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from jupyter_starverse.errors import MissingDependencyError

__all__ = ["PEAK_PER_BYTE", "MinHasher", "lsh_params", "normalize"]

_FMIX32 = (16, 0x85EBCA6B, 13, 0xC2B2AE35, 16)
_WS = re.compile(r"\s+")
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
        self._buf: Any = None  # the (rows x num_perm) products, reused: no temporaries per document
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
        rows = _SIG_ROWS
        if self._buf is None or self._buf.shape[0] != rows:
            self._buf = np.empty((rows, self.num_perm), dtype=np.uint32)
        for at in range(0, max(1, len(shingles)), rows):
            hv = shingles[at : at + rows].astype(np.uint32)  # a copy: mixed in place below
            if not len(hv):
                break
            hv ^= hv >> np.uint32(s1)
            hv *= np.uint32(m1)
            hv ^= hv >> np.uint32(s2)
            hv *= np.uint32(m2)
            hv ^= hv >> np.uint32(s3)
            prod = self._buf[: len(hv)]
            np.multiply(hv[:, None], self._a, out=prod)
            np.add(prod, self._b, out=prod)
            np.minimum(sig, prod.min(axis=0), out=sig)
        return sig

    @staticmethod
    def jaccard(a: Any, b: Any) -> float:
        """Exact Jaccard similarity of two sorted unique shingle arrays."""
        np = _np()
        if not len(a) and not len(b):
            return 1.0
        inter = len(np.intersect1d(a, b, assume_unique=True))
        return inter / (len(a) + len(b) - inter)
