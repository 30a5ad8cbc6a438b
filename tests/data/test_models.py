"""Models from the store: semantic dedup with a tiny BERT encoder, perplexity under a tiny Llama."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.client import Starverse
from tests._tiny import build_tiny_llama, publish
from tests.data.corpus import _EN
from tests.data.tiny_encoder import build_tiny_encoder


def _raw(client: Starverse, tmp_path: Path, texts: list[str]) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    client.catalog.add_dataset("raw", str(folder))


@pytest.mark.slow
def test_semantic_duplicates_are_removed_with_the_kept_document_and_similarity(
    client: Starverse, tmp_path: Path
) -> None:
    client.catalog.import_model(str(build_tiny_encoder(tmp_path / "enc")), repo="test/tiny-encoder")
    rng = random.Random(1)
    docs = [" ".join(rng.choice(_EN) for _ in range(30)) for _ in range(30)]
    shuffled = []
    for i in range(5):
        words = docs[i].split()
        rng.shuffle(words)  # same meaning to a bag-of-words encoder, Jaccard of 5-grams ~0.45
        shuffled.append(" ".join(words))
    _raw(client, tmp_path, docs + shuffled)
    plain = client.data.dedup("raw", to="raw@plain")
    assert plain.removed == {}  # MinHash alone does not see them
    rep = client.data.dedup("raw", semantic_model="hf:test/tiny-encoder", semantic_threshold=0.995)
    assert rep.removed == {"semantic": 5}
    found = {m.doc.idx: (c.kept.idx, m.similarity) for c in rep.clusters for m in c.members}
    assert {d: k for d, (k, _) in found.items()} == {30 + i: i for i in range(5)}
    assert all(s >= 0.995 for _, s in found.values())
    assert rep.estimate is not None and rep.estimate.memory_bytes > 0


@pytest.mark.slow
def test_perplexity_and_relevance_scores_remove_past_their_thresholds(
    client: Starverse, tmp_path: Path, hub: Any
) -> None:
    publish(hub, "test/tiny-llama", build_tiny_llama(tmp_path / "llama"))
    good = [
        "Large models are trained on rented GPUs from a notebook.",
        "Checkpoints are saved every ten steps and the job resumes after a preemption.",
        "训练一个大模型需要很多显卡和数据。",
    ]
    noise = ["zxq vvk qpl wmm 9f3k2 ##@@ !!!", "kkkkkkkkkkkkkkkkkkkkkkkkkkkkk"]
    _raw(client, tmp_path, good + noise)
    rep = client.data.score(
        "raw",
        min_quality=None,
        lm="hf:test/tiny-llama",
        max_perplexity=1e9,
        examples=["GPUs train large models from notebooks with checkpoints."],
    )
    hists = {h.name: h for h in rep.histograms}
    assert set(hists) == {"quality", "perplexity", "relevance"}
    assert sum(hists["perplexity"].counts) == 5 and sum(hists["quality"].counts) == 5
    assert rep.removed == {} and rep.docs_out == 5
    ppl = sorted(h for h in hists["perplexity"].edges)
    cut = ppl[len(ppl) // 2]
    strict = client.data.score("raw", to="raw@strict", min_quality=0.5, lm="hf:test/tiny-llama", max_perplexity=cut)
    assert strict.removed.get("quality", 0) >= 2  # the noise lines
    assert strict.docs_out == len(good) + len(noise) - sum(strict.removed.values())
    assert hists["quality"].removed_at(0.5) >= 2
