"""What the five dedup stages share: their settings, record layouts and spill files.

:class:`StageConfig` (thresholds, MinHash and paragraph parameters, saved in the work folder), the
numpy record types of pair, paragraph and decision files, the band keys of a signature
(:class:`_Band`) and the per-partition spill buffers (:class:`_Spill`) that stage 1 appends to.
The stages themselves live in :mod:`._stages` (1-3) and :mod:`._components` (4-5).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._minhash import MinHasher, lsh_params

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
