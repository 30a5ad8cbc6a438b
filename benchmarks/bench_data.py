"""Data preparation benchmark: lines/s per step, and PII / dedup quality on planted corpora.

Prints, measured in this run on corpora it generates (nothing asserted):

1. PII detection on a planted corpus (valid and invalid-checksum ID cards and bank cards,
   mobiles, emails, IPs, phones, Chinese names): recall and precision per type and overall,
   lines/s for every type and for the number types alone, next to a bare regex loop (``\\b``
   boundaries, no checksums) measured on the same lines (goal: recall >= 0.98, precision >= 0.95).
2. Near-duplicate search on a planted corpus (random documents plus copies with 3 characters
   changed): recall, false positives and lines/s of our dedup (signatures in numpy, band tables
   on disk, Jaccard verification, paragraph rule off) against a bare datasketch loop
   (``MinHash.update_batch`` over the 5-gram shingles, ``MinHashLSH(threshold=0.5)``, Jaccard >= 0.7)
   in the same run (goal: recall >= 0.95, no false positives, throughput within 1.2x of the loop).
3. Each step through the store (scan, clean, dedup, score; reading and writing included): lines/s.

Medians of ``--repeat`` runs. Usage: ``python benchmarks/bench_data.py [--docs 5000] [--pii-docs 2000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import show_load  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")

from jupyter_starverse.data import PII_TYPES, find_pii, normalize  # noqa: E402
from jupyter_starverse.data._read import Doc  # noqa: E402
from jupyter_starverse.data._steps import DedupParams, dedup  # noqa: E402
from tests.data.corpus import dup_corpus, pii_corpus  # noqa: E402

_BARE = {  # what a first attempt looks like: \b boundaries, no checksums, no names
    "id_card": re.compile(r"\b\d{17}[\dXx]\b"),
    "bank_card": re.compile(r"\b(?:\d{4}[ -]?){3,4}\d{1,3}\b"),
    "mobile": re.compile(r"\b(?:\+86 )?1[3-9]\d{9}\b"),
    "email": re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+"),
    "ip": re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"),
    "phone": re.compile(r"\b0\d{2,3}-\d{7,8}\b"),
}


def median_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def traced_peak(fn: Callable[[], object]) -> int:
    """Peak Python/numpy allocations while ``fn`` runs (tracemalloc; not timed)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _pr(truth: set[tuple[int, str, str]], found: set[tuple[int, str, str]]) -> tuple[float, float, int, int]:
    hit = len(truth & found)
    return hit / max(1, len(truth)), hit / max(1, len(found)), len(truth), len(found)


def bench_pii(n: int, repeat: int) -> None:
    corpus = pii_corpus(n, seed=42)
    find_pii("张伟住在北京")  # jieba's dictionary loads once
    truth = set(corpus.pii)
    planted_types = sorted({t for _, t, _ in truth})

    def ours() -> set[tuple[int, str, str]]:
        return {(i, f.type, f.value) for i, d in enumerate(corpus.docs) for f in find_pii(d) if f.type != "place"}

    numbers = [t for t in PII_TYPES if t not in ("person", "place")]

    def ours_numbers() -> set[tuple[int, str, str]]:
        return {(i, f.type, f.value) for i, d in enumerate(corpus.docs) for f in find_pii(d, numbers)}

    def bare() -> set[tuple[int, str, str]]:
        return {(i, t, m.group()) for i, d in enumerate(corpus.docs) for t, rx in _BARE.items() for m in rx.finditer(d)}

    t_all, found = median_time(ours, repeat)
    t_num, found_num = median_time(ours_numbers, repeat)
    t_bare, found_bare = median_time(bare, repeat)
    assert isinstance(found, set) and isinstance(found_num, set) and isinstance(found_bare, set)
    print(f"## PII detection, {n} planted lines ({len(truth)} valid values, {len(corpus.decoys)} invalid decoys)")
    print(f"  {'type':<10} {'recall':>7} {'precision':>9} {'planted':>8} {'found':>6}   bare loop recall/precision")
    for t in planted_types:
        tt = {x for x in truth if x[1] == t}
        r, p, a, b = _pr(tt, {x for x in found if x[1] == t})
        br, bp, _, _ = _pr(tt, {x for x in found_bare if x[1] == t}) if t in _BARE else (0.0, 0.0, 0, 0)
        bare_txt = f"{br:.3f} / {bp:.3f}" if t in _BARE else "(no names)"
        print(f"  {t:<10} {r:7.3f} {p:9.3f} {a:8d} {b:6d}   {bare_txt}")
    r, p, _, _ = _pr(truth, found)
    br, bp, _, _ = _pr(truth, found_bare)
    print(f"  {'all':<10} {r:7.3f} {p:9.3f}   (goal recall >= 0.98, precision >= 0.95); bare loop {br:.3f} / {bp:.3f}")
    print(
        f"  lines/s: every type {n / t_all:,.0f}; number types only {n / t_num:,.0f}; bare regex loop {n / t_bare:,.0f}"
    )


def bare_datasketch(texts: list[str], threshold: float = 0.7) -> set[int]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=0.5, num_perm=128)
    shingle_sets: list[set[str]] = []
    removed: set[int] = set()
    for i, text in enumerate(texts):
        norm = normalize(text)
        shingles = {norm[j : j + 5] for j in range(max(1, len(norm) - 4))}
        shingle_sets.append(shingles)
        m = MinHash(num_perm=128)
        m.update_batch([s.encode("utf-8") for s in shingles])
        dup = False
        for key in lsh.query(m):
            other = shingle_sets[key]
            if len(shingles & other) / len(shingles | other) >= threshold:
                dup = True
                break
        if dup:
            removed.add(i)
        else:
            lsh.insert(i, m)
    return removed


def bench_dedup(n: int, repeat: int) -> None:
    corpus = dup_corpus(n, seed=42, dup_share=0.2)
    texts = corpus.docs
    planted = {copy for _, copy in corpus.near}
    docs = [Doc(i, "c.jsonl", i + 1, t) for i, t in enumerate(texts)]

    def ours() -> set[int]:
        kept: list[int] = []
        with tempfile.TemporaryDirectory() as work:
            dedup(
                lambda: iter(docs),
                lambda d, _t: kept.append(d.idx),
                Path(work),
                params=DedupParams(paragraph_share=None, max_memory=32 << 20, expected_docs=len(docs), max_clusters=0),
            )
        return set(range(len(texts))) - set(kept)

    t_ours, removed = median_time(ours, repeat)
    t_bare, removed_bare = median_time(lambda: bare_datasketch(texts), repeat)
    assert isinstance(removed, set) and isinstance(removed_bare, set)
    print(f"## near duplicates, {len(texts)} lines ({n} distinct + {len(planted)} copies with 3 characters changed)")
    for name, rem, t in (("ours", removed, t_ours), ("bare datasketch loop", removed_bare, t_bare)):
        recall = len(rem & planted) / len(planted)
        fp = len(rem - planted)
        print(f"  {name:<22} recall {recall:.3f}  false positives {fp:3d}  {len(texts) / t:8,.0f} lines/s")
    print(f"  throughput ours / bare loop = {t_bare / t_ours:.2f}x (goal >= 1/1.2 = 0.83)")
    peak_ours, peak_bare = traced_peak(ours), traced_peak(lambda: bare_datasketch(texts))
    print(
        f"  peak traced memory: ours {peak_ours / 2**20:.1f} MiB (band tables, pairs and texts on disk), "
        f"bare loop {peak_bare / 2**20:.1f} MiB (LSH, signatures and shingle sets in memory)"
    )


def bench_steps(n: int) -> None:
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse

    with tempfile.TemporaryDirectory() as home:
        os.environ["STARVERSE_HOME"] = home
        os.environ["BENCH_SALT"] = "bench-secret"
        client = Starverse(Settings.from_env())
        pii = pii_corpus(n, seed=7)
        dup = dup_corpus(n, seed=7, dup_share=0.2)
        src = Path(home) / "raw"
        src.mkdir()
        with open(src / "a.jsonl", "w", encoding="utf-8") as f:
            for t in [*pii.docs, *dup.docs]:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
        client.catalog.add_dataset("raw", str(src))
        client.catalog.pull("raw")
        lines = len(pii.docs) + len(dup.docs)
        print(f"## steps through the store ({lines} lines, reading, writing and the report included)")
        for step, call in (
            ("scan", lambda: client.data.scan("raw@1")),
            ("clean", lambda: client.data.clean("raw@1", salt="env:BENCH_SALT")),
            ("dedup", lambda: client.data.dedup("raw@1-clean")),
            ("score", lambda: client.data.score("raw@1-clean-dedup")),
        ):
            t0 = time.perf_counter()
            rep = call()
            dt = time.perf_counter() - t0
            guess = rep.estimate.seconds if rep.estimate else 0.0
            took = f"estimate {guess:.1f}s, took {dt:.1f}s"
            print(f"  {step:<6} {lines / dt:8,.0f} lines/s   removed {rep.removed_share:6.1%}   {took}")
            lines = rep.docs_out if step != "scan" else lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=5000, help="distinct documents of the dedup corpus")
    parser.add_argument("--pii-docs", type=int, default=2000, help="lines of the PII corpus")
    parser.add_argument("--step-docs", type=int, default=1000, help="lines per corpus of the store steps")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    show_load()
    bench_pii(args.pii_docs, args.repeat)
    bench_dedup(args.docs, args.repeat)
    bench_steps(args.step_docs)


if __name__ == "__main__":
    main()
