"""bench_dedup_scale.py --chain: scan -> clean -> dedup (MinHash + semantic) -> score as jobs through the store.

A generated corpus streamed to disk (no corpus in memory), each step a job of ``WORLD`` ranks on the local
backend as a pipeline runs them; each step's wall time and every rank's per-stage wall time and peak RSS
(the report's ``ranks``), and with ``--chain-grow G`` each stage's peak at N against N / G documents.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks._common import load

WORLD = 4

_CHAIN_WORDS: list[str] = []


def chain_vocabulary(static: Path) -> list[str]:
    """Whole English words of the encoder's vocabulary: random words of it embed apart, as unrelated text does
    (random letter strings split into the same few word pieces and all embed alike)."""
    vocab = json.loads((static / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    return sorted(w for w in vocab if w.isascii() and w.isalpha() and w.islower() and len(w) >= 3)


def _chain_text(i: int, words: int) -> str:
    rng = random.Random(i * 7919 + 17)
    return " ".join(rng.choices(_CHAIN_WORDS, k=words))


def write_chain_corpus(folder: Path, n: int, *, words: int, dup_share: float = 0.1) -> tuple[int, set[int]]:
    """``n`` documents streamed to 4 JSON-lines files (no corpus in memory): ``dup_share`` of them near copies
    (3 characters changed) of an earlier one, 2% with a planted mobile number and e-mail; returns (bytes, copies)."""
    from tests.data.corpus import email, mobile

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(99)
    files = [open(folder / f"part-{r}.jsonl", "w", encoding="utf-8") for r in range(WORLD)]  # noqa: SIM115
    copies: set[int] = set()
    originals: list[int] = []
    size = 0
    try:
        for i in range(n):
            if i > 10 and rng.random() < dup_share:
                chars = list(_chain_text(rng.choice(originals), words))
                for _ in range(3):
                    chars[rng.randrange(len(chars))] = rng.choice("abcdefghijklmnopqrstuvwxyz")
                text = "".join(chars)
                copies.add(i)
            else:
                text = _chain_text(i, words)
                originals.append(i)
            if rng.random() < 0.02:
                text += f" 联系电话 {mobile(rng)}, email {email(rng)}"
            line = json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n"
            size += len(line.encode("utf-8"))
            files[0].write(line)  # one file, read in order: document i is line i
    finally:
        for f in files:
            f.close()
    for r in range(1, WORLD):
        (folder / f"part-{r}.jsonl").unlink()
    return size, copies


def chain(args: Any, root: Path, static: Path, n: int) -> dict[str, tuple[float, float]]:
    """The four steps as jobs of ``WORLD`` ranks on the local backend, through the store, as a pipeline runs them,
    on ``n`` documents. Returns each stage's peak RSS on its largest rank and the largest rank's growth of it
    over the RSS the stage began with (MiB)."""
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse

    root.mkdir(parents=True, exist_ok=True)
    os.environ["STARVERSE_HOME"] = str(root / "home")
    peaks: dict[str, tuple[float, float]] = {}
    os.environ["BENCH_SALT"] = "bench-secret"
    client = Starverse(Settings.from_env())
    t = time.perf_counter()
    _CHAIN_WORDS[:] = chain_vocabulary(static)
    size, copies = write_chain_corpus(root / "corpus", n, words=args.chain_words)
    print(f"chain through the store: {n:,} documents ({size / 1e9:.2f} GB, {len(copies):,} near "
          f"copies; {len(_CHAIN_WORDS):,}-word vocabulary), written in {time.perf_counter() - t:.0f} s; "
          f"each step a job of {WORLD} ranks on the local "
          f"backend (scores: one rank), load {load()}")  # fmt: skip
    client.catalog.add_dataset("gen", str(root / "corpus"), version="1")
    client.catalog.import_model(str(static), repo="bench/static")
    steps = [
        ("scan", "gen@1", None, {}),
        ("clean", "gen@1", "gen@clean", {"salt": "env:BENCH_SALT"}),
        ("dedup", "gen@clean", "gen@dedup", {"semantic_model": "hf:bench/static", "semantic_threshold": 0.96}),
        ("score", "gen@dedup", "gen@score", {}),
    ]
    backend = client.backend("local")
    total = time.perf_counter()
    for step, src, to, opts in steps:
        t = time.perf_counter()
        shards = (1, 1) if step == "score" else (1, WORLD)
        job = client.data_job(step, src, to=to, options=opts, shards=shards, backend="local")
        done = backend.wait(job.id, timeout=None)
        wall = time.perf_counter() - t
        path = Path(done.experiment_dir) / "data-report.json"
        if done.state.value != "succeeded" or not path.is_file():
            print(f"  {step}: job {job.id} ended {done.state.value}; see `starverse jobs logs {job.id}`")
            return peaks
        rep = json.loads(path.read_text(encoding="utf-8"))
        removed = sum(rep["removed"].values())
        print(f"  {step:<5} {wall:7.1f} s (job; the step itself {rep['elapsed_s']:.1f} s) "
              f"{rep['docs_in'] / wall:9,.0f} documents/s, {removed:,} removed, load {load()}")  # fmt: skip
        per_stage: dict[str, list[tuple[float, float, float]]] = {}
        for r in rep.get("ranks", []):
            for s in r["stages"]:
                grew = s["peak_rss_mib"] - s.get("start_rss_mib", s["peak_rss_mib"])
                per_stage.setdefault(s["stage"], []).append((s["wall_s"], s["peak_rss_mib"], grew))
        for name, vals in per_stage.items():
            peak, grew = max(m for _, m, _ in vals), max(g for _, _, g in vals)
            peaks[f"{step}: {name}" if name != step else step] = (peak, grew)
            print(f"        {name:<16} {max(w for w, _, _ in vals):7.1f} s slowest rank, peak RSS "
                  f"{peak:7.1f} MiB largest rank (+{grew:.1f} in the stage; {len(vals)} ranks)")  # fmt: skip
        for note in rep.get("notes", []):
            if note.startswith("semantic:"):
                print(f"        {note}")
        if step == "dedup":
            found = _removed_docs(client, to or "")
            print(f"        planted near copies: recall {len(found & copies) / max(1, len(copies)):.3f}, "
                  f"{len(found - copies):,} others removed")  # fmt: skip
    print(f"  chain: {time.perf_counter() - total:.0f} s in all")
    return peaks


def _removed_docs(client: Any, version: str) -> set[int]:
    path = client.catalog.mount(version) / "_starverse" / "removed.jsonl"
    out = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            out.add(int(json.loads(line)["doc"]))
    return out


def chain_runs(args: Any, root: Path, static: Path) -> None:
    """The chain on ``--chain-docs`` documents, first on ``--chain-docs / --chain-grow`` when that is over 1,
    then each stage's peak RSS on its largest rank, the larger run against the smaller."""
    sizes = [args.chain_docs // args.chain_grow, args.chain_docs] if args.chain_grow > 1 else [args.chain_docs]
    runs = []
    for size in sizes:
        runs.append(chain(args, root / f"chain-{size}", static, size))
        shutil.rmtree(root / f"chain-{size}", ignore_errors=True)
    if len(runs) == 2:
        print(f"chain: each stage's peak RSS on its largest rank, {sizes[1]:,} / {sizes[0]:,} documents:")
        for name, (small, small_grew) in runs[0].items():
            if name in runs[1]:
                big, big_grew = runs[1][name]
                print(f"    {name:<26} {big / small:5.2f}x   ({big:,.0f} / {small:,.0f} MiB; "
                      f"grown in the stage {big_grew:,.1f} / {small_grew:,.1f} MiB)")  # fmt: skip
