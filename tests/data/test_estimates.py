"""Issue 34: dedup's estimates — memory bounded by the largest document, no ETA claimed that nothing measured."""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.data import StepProgress, _minhash
from jupyter_starverse.data._minhash import PEAK_PER_BYTE, MinHasher, normalize

pytest.importorskip("datasketch")


_RNG = random.Random(0)
_VOCAB = ["".join(_RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_RNG.randint(2, 9))) for _ in range(20000)]


def _words(n: int, seed: int) -> str:
    return " ".join(random.Random(seed).choices(_VOCAB, k=n))


def _corpus(client: Starverse, tmp_path: Path, texts: list[str], name: str) -> None:
    folder = tmp_path / f"{name}-src"
    folder.mkdir()
    with open(folder / "part.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    client.catalog.add_dataset(name, str(folder))


def test_the_memory_estimate_counts_the_largest_document_and_bounds_what_signing_it_takes(
    client: Starverse, tmp_path: Path
) -> None:
    """A 100 MB line was estimated at 456 MiB and used 3.2 GB: the estimate ignored the longest document and
    signing one document took ~270 bytes per byte of it (shingles x permutations at once)."""
    big = _words(500_000, seed=3)  # ~3 MB on one line, far past the sampled documents
    texts = [_words(50, seed=i) for i in range(400)] + [big]
    _corpus(client, tmp_path, texts, "oneline")
    small = [_words(50, seed=i) for i in range(401)]
    _corpus(client, tmp_path, small, "even")
    est, even = client.data.estimate("dedup", "oneline"), client.data.estimate("dedup", "even")
    assert est.memory_bytes - even.memory_bytes >= PEAK_PER_BYTE * (len(big) - 1000)
    assert "longest document 2." in est.basis or "longest document 3." in est.basis
    h = MinHasher()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        text = json.loads(json.dumps({"text": big}))["text"]
        h.signature(h.shingles(normalize(text)))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak <= PEAK_PER_BYTE * len(big)  # what the estimate adds for it covers it


def test_shingles_and_signatures_in_blocks_are_those_of_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    h = MinHasher()
    text = normalize(_words(3000, seed=5))
    whole, sig = h.shingles(text), h.signature(h.shingles(text))
    monkeypatch.setattr(_minhash, "_BLOCK", 97)
    monkeypatch.setattr(_minhash, "_SIG_ROWS", 13)
    assert (h.shingles(text) == whole).all()
    assert (h.signature(whole) == sig).all()


def test_a_low_entropy_corpus_says_eta_unknown_while_it_compares(client: Starverse, tmp_path: Path) -> None:
    """A corpus of near-identical documents sat at 50% with the reading rate's ETA (5 minutes) for 75 minutes:
    comparing candidate pairs between the passes has no measure. It says so now."""
    base = _words(120, seed=9).split()
    rng = random.Random(1)
    texts = []
    for _ in range(300):
        doc = list(base)
        doc[rng.randrange(len(doc))] = "x"
        texts.append(" ".join(doc))
    _corpus(client, tmp_path, texts, "alike")
    seen: list[StepProgress] = []
    client.data.dedup("alike", progress=seen.append)
    comparing = [p for p in seen if p.phase == "comparing"]
    assert comparing and all(p.fraction is None and p.eta_s is None for p in comparing)
    assert "ETA unknown" in str(comparing[0]) and "pass 1/2" in str(comparing[0])
    between = seen[seen.index(comparing[0]) :]
    next_read = next(i for i, p in enumerate(between) if p.phase == "reading")
    assert all(p.eta_s is None for p in between[:next_read])  # no reading-rate ETA until pass 2 reads again
    assert "comparing near duplicates is not in the time" in client.data.estimate("dedup", "alike").basis


def test_clean_on_a_full_store_is_a_clear_error_and_publishes_nothing(
    tmp_path: Path, small_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: `data clean` on a full store ended in a raw OSError [Errno 28] traceback."""
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.errors import StoreError
    from tests._tmpfs import fill

    monkeypatch.setenv("PII_SALT", "s" * 32)
    client = Starverse(Settings.from_env({"STARVERSE_HOME": str(small_fs / "home")}))
    _corpus(client, tmp_path, [_words(40, seed=i) + " id 11010519491231002X" for i in range(200)], "raw")
    client.catalog.pull("raw")
    fill(small_fs)
    with pytest.raises(StoreError) as err:
        client.data.clean("raw", actions={"id_card": "hash"}, salt="env:PII_SALT")
    assert "is full" in str(err.value) and "wrote nothing" in str(err.value) and "evict" in (err.value.hint or "")
    prepared = client.data.prepared
    assert not (prepared / "raw").exists() or not any((prepared / "raw").iterdir())  # no half-written version
    assert not [p for p in prepared.iterdir() if p.name.startswith(".work-")]
