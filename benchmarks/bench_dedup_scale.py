"""Dedup at scale: the five MinHash stages over 4 ranks, per stage, as the corpus grows.

A generated corpus (``--docs`` distinct documents plus 10% planted near duplicates with a
few characters changed; ``--full`` is 1,000,000) is split into 4 shards. Each stage runs as 4
worker processes (one fresh process per task, like the ranks of a job), and the benchmark
prints for every stage its wall time and the peak RSS of its largest worker, then the
recall and false positives on the planted copies and documents/s against, in the same run:

- a bare datasketch loop (``MinHash`` + ``MinHashLSH``, one process, insert then query);
- datatrove's four-stage MinHash pipeline, when ``--datatrove-python`` names the Python of a
  separate environment where datatrove is installed (never this project's);
- the same dedup end to end through the store and the local backend (``shards=(1, 4)``),
  with ``--through-store``.

``--grow 4`` runs the stages again on a corpus 4x larger: the per-stage peak RSS per worker
should stay flat (partitions grow with the corpus, a shard's buffers do not).
Semantic dedup: ``--static FOLDER`` (a static model, ``distill_static``) embeds the corpus;
``--transformer FOLDER`` times the transformer encoder on ``--subset`` documents.

    python benchmarks/bench_dedup_scale.py --docs 50000 --grow 4
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_starverse.data import _stages as st
from jupyter_starverse.data._read import Doc

WORLD = 4
_VOCAB = random.Random(12345)
_WORDS = ["".join(_VOCAB.choices("abcdefghijklmnopqrstuvwxyz", k=_VOCAB.randint(3, 9))) for _ in range(20_000)]


def generate(n: int, *, seed: int = 0, dup_share: float = 0.1) -> tuple[list[str], list[tuple[int, int]]]:
    """``n`` distinct documents of ~60 words plus ``dup_share * n`` copies with 3 characters changed."""
    rng = random.Random(seed)
    docs = [" ".join(rng.choices(_WORDS, k=60)) for _ in range(n)]
    near = []
    for _ in range(int(n * dup_share)):
        src = rng.randrange(n)
        chars = list(docs[src])
        for _ in range(3):
            chars[rng.randrange(len(chars))] = rng.choice("abcdefghijklmnopqrstuvwxyz")
        near.append((src, len(docs)))
        docs.append("".join(chars))
    return docs, near


def _write_shards(docs: list[str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    files = [open(folder / f"shard-{r}.jsonl", "w", encoding="utf-8") for r in range(WORLD)]  # noqa: SIM115
    for i, t in enumerate(docs):
        files[i % WORLD].write(json.dumps({"i": i, "text": t}) + "\n")
    for f in files:
        f.close()


def _shard_docs(folder: Path, rank: int) -> Any:
    with open(folder / f"shard-{rank}.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            yield Doc(int(row["i"]), f"shard-{rank}.jsonl", 0, row["text"])


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _task(args: tuple[str, str, str, int, int]) -> tuple[float, float]:
    stage, folder, work, rank, docs = args
    base = _rss_mib()  # the worker before its share: the interpreter, numpy, datasketch
    w, f = Path(work), Path(folder)
    cfg = st.StageConfig.load(w)
    if stage == "1 signatures":
        st.sign_shard(_shard_docs(f, rank), cfg, w, rank)
    elif stage == "2+3 buckets, pairs":
        for p in range(rank, cfg.partitions, WORLD):
            st.sort_partition(cfg, w, p)
            st.partition_pairs(cfg, w, p)
    elif stage == "4 components":
        st.components(cfg, w, docs)
    elif stage == "5 filter":
        with open(w / f"kept-{rank}.txt", "w") as out:
            st.filter_shard(_shard_docs(f, rank), cfg, w, lambda d, t: out.write(f"{d.idx}\n"))
    return _peak_mib(), _peak_mib() - base


_CTX: Any = None


def _context() -> Any:
    """A fork server started before any corpus exists: each worker starts small and owns only its share."""
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["jupyter_starverse.data._stages", "numpy", "datasketch"])
    return _CTX


def run_stages(docs: list[str], near: list[tuple[int, int]], root: Path, *, max_memory: int) -> dict[str, Any]:
    folder, work = root / "corpus", root / "work"
    _write_shards(docs, folder)
    bands, _ = st.StageConfig().bands_rows
    cfg = st.StageConfig(partitions=st.partitions_for(len(docs), bands, max_memory), paragraph_share=None)
    cfg.save(work)
    out: dict[str, Any] = {"docs": len(docs), "partitions": cfg.partitions, "stages": []}
    ctx = _context()
    total = time.perf_counter()
    for stage in ("1 signatures", "2+3 buckets, pairs", "4 components", "5 filter"):
        ranks = [0] if stage == "4 components" else list(range(WORLD))
        t = time.perf_counter()
        with ctx.Pool(len(ranks), maxtasksperchild=1) as pool:
            peaks = pool.map(_task, [(stage, str(folder), str(work), r, len(docs)) for r in ranks])
        out["stages"].append(
            {
                "stage": stage,
                "wall_s": time.perf_counter() - t,
                "peak_rss_mib": max(p for p, _ in peaks),
                "own_mib": max(d for _, d in peaks),
            }
        )
    out["wall_s"] = time.perf_counter() - total
    kept = {int(x) for r in range(WORLD) for x in (work / f"kept-{r}.txt").read_text().split()}
    removed = set(range(len(docs))) - kept
    planted = {c for _, c in near}
    out["recall"] = len(removed & planted) / max(1, len(planted))
    out["false_positives"] = len(removed - planted)
    return out


def bare_datasketch(docs: list[str], threshold: float = 0.7, num_perm: int = 128) -> tuple[float, set[int]]:
    from datasketch import MinHash, MinHashLSH

    t = time.perf_counter()
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    removed: set[int] = set()
    for i, text in enumerate(docs):
        norm = " ".join(text.lower().split())
        m = MinHash(num_perm=num_perm)
        m.update_batch([norm[j : j + 5].encode() for j in range(max(1, len(norm) - 4))])
        if lsh.query(m):
            removed.add(i)
        else:
            lsh.insert(str(i), m)
    return time.perf_counter() - t, removed


_DATATROVE = """
import sys, time
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
    MinhashDedupFilter, MinhashDedupSignature)
from datatrove.pipeline.readers import JsonlReader

if __name__ == "__main__":  # datatrove's workers import this file again
    src, work, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = MinhashConfig()
    t = time.perf_counter()
    LocalPipelineExecutor(pipeline=[JsonlReader(src, text_key="text"),
        MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg)], tasks=tasks, workers=tasks,
        logging_dir=f"{work}/l1").run()
    LocalPipelineExecutor(pipeline=[MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/b",
        config=cfg)], tasks=cfg.num_buckets, workers=tasks, logging_dir=f"{work}/l2").run()
    LocalPipelineExecutor(pipeline=[MinhashDedupCluster(input_folder=f"{work}/b", output_folder=f"{work}/ids",
        config=cfg)], tasks=1, logging_dir=f"{work}/l3").run()
    LocalPipelineExecutor(pipeline=[JsonlReader(src, text_key="text"),
        MinhashDedupFilter(input_folder=f"{work}/ids")], tasks=tasks, workers=tasks, logging_dir=f"{work}/l4").run()
    print("WALL", time.perf_counter() - t)
"""


def datatrove(python: str, folder: Path, work: Path) -> float | None:
    script = work / "dt.py"
    work.mkdir(parents=True, exist_ok=True)
    script.write_text(_DATATROVE)
    try:
        res = subprocess.run(
            [python, str(script), str(folder), str(work), str(WORLD)], capture_output=True, text=True, timeout=900
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"  datatrove did not run: {e}")
        return None
    for line in res.stdout.splitlines():
        if line.startswith("WALL"):
            return float(line.split()[1])
    print(f"  datatrove did not run: {res.stderr.strip().splitlines()[-1:] or res.returncode}")
    return None


def semantic(docs: list[str], folder: Path, name: str, make: Callable[[Path], Any], n: int) -> float:
    enc = make(folder)
    texts = docs[:n]
    t = time.perf_counter()
    for i in range(0, len(texts), 256):
        enc.embed(texts[i : i + 256])
    rate = len(texts) / (time.perf_counter() - t)
    print(f"  {name} encoder ({getattr(enc, 'kind', '?')}): {rate:,.0f} documents/s on {len(texts):,} documents")
    return rate


def _table(res: dict[str, Any]) -> None:
    print(f"  {res['docs']:,} documents, {res['partitions']} partitions, {WORLD} ranks: {res['wall_s']:.1f} s")
    for s in res["stages"]:
        print(
            f"    stage {s['stage']:<22} {s['wall_s']:7.2f} s   peak RSS / worker {s['peak_rss_mib']:7.1f} MiB"
            f" (its share: +{s['own_mib']:.1f} MiB)"
        )
    print(f"    recall {res['recall']:.3f} on planted near duplicates, {res['false_positives']} false positives")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20_000, help="distinct documents (10%% copies are added)")
    parser.add_argument("--full", action="store_true", help="1,000,000 documents")
    parser.add_argument("--grow", type=int, default=4, help="also run a corpus this many times larger (1: no)")
    parser.add_argument("--max-memory", type=int, default=32 << 20, help="bytes of band records per partition")
    parser.add_argument("--bare-subset", type=int, default=20_000, help="documents for the bare datasketch loop")
    parser.add_argument("--datatrove-python", default=None, help="python of a separate venv with datatrove")
    parser.add_argument("--static", default=None, help="a static model folder (distill_static)")
    parser.add_argument("--transformer", default=None, help="a sentence-transformer folder")
    parser.add_argument("--subset", type=int, default=2000, help="documents for the transformer encoder")
    parser.add_argument("--semantic-only", action="store_true", help="skip the MinHash stages and baselines")
    args = parser.parse_args()
    n = 1_000_000 if args.full else args.docs
    _context()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        docs, near = generate(n)
        if not args.semantic_only:
            _minhash_part(args, n, docs, near, root)
        if args.static or args.transformer:
            from tests.data.corpus import dup_corpus

            docs = dup_corpus(n, seed=3, dup_share=0.1).docs  # English and Chinese words: text an encoder reads
        if args.static:
            from jupyter_starverse.data._models import StaticEncoder

            semantic(docs, Path(args.static), "static", StaticEncoder, len(docs))
            semantic_whole(docs, Path(args.static), root / "sem")
        if args.transformer:
            from jupyter_starverse.data._models import Encoder

            os.environ.setdefault("OMP_NUM_THREADS", "2")
            semantic(docs, Path(args.transformer), "transformer", Encoder, args.subset)


def semantic_whole(docs: list[str], folder: Path, work: Path) -> None:
    """The semantic stages (embed, k-means, pairs inside clusters) with the static encoder on every document."""
    from jupyter_starverse.data._models import StaticEncoder
    from jupyter_starverse.data._semantic import semantic_stage

    enc = StaticEncoder(folder)
    cfg = st.StageConfig()
    t = time.perf_counter()
    note = semantic_stage(lambda: (Doc(i, "g", 0, x) for i, x in enumerate(docs)), enc, cfg, work)
    wall = time.perf_counter() - t
    print(f"semantic stages on all {len(docs):,} documents: {wall:.1f} s, peak RSS {_peak_mib():.0f} MiB")
    print(f"  {note}")


def _minhash_part(args: Any, n: int, docs: list[str], near: list[tuple[int, int]], root: Path) -> None:
    if n:
        print(f"dedup stages, {WORLD} ranks (max_memory {args.max_memory >> 20} MiB per partition)")
        res = run_stages(docs, near, root / "1x", max_memory=args.max_memory)
        _table(res)
        ours_rate = res["docs"] / res["wall_s"]
        if args.grow > 1:
            big, big_near = generate(n * args.grow, seed=1)
            res4 = run_stages(big, big_near, root / f"{args.grow}x", max_memory=args.max_memory)
            _table(res4)
            del big
            print(f"  peak RSS per worker, {args.grow}x / 1x (its share {args.grow}x / 1x):")
            for a, b in zip(res["stages"], res4["stages"], strict=True):
                share = f"{b['own_mib']:.1f} / {a['own_mib']:.1f} MiB"
                print(f"    stage {a['stage']:<22} {b['peak_rss_mib'] / a['peak_rss_mib']:5.2f}x   ({share})")
        sub, sub_near = generate(min(n, args.bare_subset), seed=2)
        wall, removed = bare_datasketch(sub)
        planted = {c for _, c in sub_near}
        bare_rate = len(sub) / wall
        print(f"bare datasketch loop (1 process) on {len(sub):,} documents: {bare_rate:,.0f} documents/s,")
        print(f"  recall {len(removed & planted) / max(1, len(planted)):.3f}, {len(removed - planted)} false positives")
        print(
            f"ours ({WORLD} ranks, all five stages): {ours_rate:,.0f} documents/s = {ours_rate / bare_rate:.1f}x bare"
        )
        if args.datatrove_python:
            wall_dt = datatrove(args.datatrove_python, root / "1x" / "corpus", root / "dt")
            if wall_dt:
                dt_rate = len(docs) / wall_dt
                print(f"datatrove MinHash ({WORLD} tasks): {dt_rate:,.0f} documents/s; ours {ours_rate / dt_rate:.2f}x")


if __name__ == "__main__":
    main()
