"""A step's estimate before it runs: time and peak memory from the input's size and a timed sample.

:func:`estimate_step` reads the first documents, times the step's per-document work (PII
detection, MinHash signing, quality heuristics, the models' cost) and, for dedup, the longest
line of the corpus (:func:`_longest_record`, which bounds a signature's memory).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from jupyter_starverse._format import format_bytes
from jupyter_starverse.errors import BadInputError

from . import _steps
from ._inputs import STEPS, _Input
from ._pii import find_pii
from ._read import Doc, Source, read_docs
from ._types import StepEstimate

_SAMPLE = 200


def estimate_step(step: str, inp: _Input, options: Mapping[str, Any], models: Sequence[Any] = ()) -> StepEstimate:
    """Time and peak memory of ``step`` on ``inp``: its size, a timed sample of documents, the models' cost."""
    if step not in STEPS:
        raise BadInputError(f"unknown step {step!r}", field="step", hint=f"steps: {', '.join(STEPS)}")
    size = inp.source.size
    sample: list[Doc] = []
    started = time.perf_counter()
    for doc in read_docs(inp.source, text_field=options.get("text_field", "text")):
        sample.append(doc)
        if len(sample) >= _SAMPLE:
            break
    read_s = time.perf_counter() - started
    sample_bytes = sum(len(d.text.encode()) + 16 for d in sample) or 1
    docs = max(len(sample), round(size / (sample_bytes / max(1, len(sample))))) if sample else 0
    setup = time.perf_counter()
    if step in ("scan", "clean"):
        find_pii("张伟住在北京")  # loads jieba's dictionary once: a fixed cost, not a per-document one
    if step == "dedup":
        from ._minhash import MinHasher

        h = MinHasher(num_perm=int(options.get("num_perm", 128)))  # imports datasketch once
    setup_s = time.perf_counter() - setup
    started = time.perf_counter()
    per_doc_factor = 1.0
    if step in ("scan", "clean"):
        for d in sample:
            find_pii(d.text)
    elif step == "dedup":
        from ._minhash import normalize

        for d in sample:
            h.signature(h.shingles(normalize(d.text)))
        per_doc_factor = 2.0  # the second pass, verification and paragraphs
    else:
        for d in sample:
            _steps.quality(d.text)
    work_s = time.perf_counter() - started
    for m in models:
        if hasattr(m, "perplexity"):
            t = time.perf_counter()
            for d in sample[:8]:
                m.perplexity(d.text)
            work_s += (time.perf_counter() - t) * len(sample) / max(1, min(8, len(sample)))
        elif hasattr(m, "embed") and sample:
            t = time.perf_counter()
            m.embed([d.text for d in sample[:16]])
            work_s += (time.perf_counter() - t) * len(sample) / max(1, min(16, len(sample)))
    per_doc = (read_s + work_s * per_doc_factor) / max(1, len(sample))
    model_bytes = sum(getattr(m, "params", 0) * 4 * 3 for m in models)
    memory = 200 << 20  # the interpreter, numpy and jieba's dictionary
    basis = f"{len(sample)} sampled documents, {per_doc * 1e3:.2f} ms each"
    if setup_s >= 0.05:  # counted in the time: a dictionary or library loaded once per run
        what = "jieba's dictionary" if step in ("scan", "clean") else "datasketch" if step == "dedup" else "set-up"
        basis += f", plus {setup_s:.1f} s once ({what})"
    if step == "dedup":
        from ._minhash import PEAK_PER_BYTE

        # one document is signed at a time: its shingles bound the memory beyond the tables
        longest, scanned = _longest_record(inp.source, max((len(d.text.encode()) for d in sample), default=0))
        memory += int(options.get("max_memory", 256 << 20)) + docs * 24 + PEAK_PER_BYTE * longest
        if any(hasattr(m, "embed") for m in models):
            memory += docs * 4 * 384
        basis += f"; longest document {format_bytes(longest)}" + ("" if scanned else " (in the sample)")
        basis += "; comparing near duplicates is not in the time: it grows with how alike the documents are"
    memory += model_bytes
    return StepEstimate(step, inp.label, size, docs, setup_s + per_doc * docs, memory, basis)


_SCAN_BYTES = 4 << 30  # line lengths of up to this much of a corpus are measured for the estimate


def _longest_record(source: Source, sampled: int) -> tuple[int, bool]:
    """The longest line of the corpus's line files (JSON lines, text), in bytes, and whether all were measured.

    One pass over newline positions (numpy, no decoding: gigabytes a second). Other formats,
    compressed files and what lies past :data:`_SCAN_BYTES` count only by the sampled documents.
    """
    import numpy as np

    longest, budget, complete = sampled, _SCAN_BYTES, True
    for rel in source.files:
        if not rel.lower().endswith((".jsonl", ".ndjson", ".txt")):
            complete = False
            continue
        run = 0
        try:
            with source.fs.open(source._full(rel), "rb") as f:
                while budget > 0:
                    chunk = f.read(min(8 << 20, budget))
                    if not chunk:
                        break
                    budget -= len(chunk)
                    ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
                    if not len(ends):
                        run += len(chunk)
                        continue
                    longest = max(longest, run + int(ends[0]))
                    if len(ends) > 1:
                        longest = max(longest, int(np.diff(ends).max()) - 1)
                    run = len(chunk) - int(ends[-1]) - 1
                else:
                    complete = False
        except OSError:
            complete = False
        longest = max(longest, run)
    return longest, complete
