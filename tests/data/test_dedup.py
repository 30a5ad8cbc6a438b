# ruff: noqa: RUF001 - Chinese punctuation is part of the test texts
"""Near duplicates: planted copies found, no false positives, the same answer with band tables spilled."""

from __future__ import annotations

from pathlib import Path

from jupyter_starverse.data import MinHasher, normalize
from jupyter_starverse.data._read import Doc
from jupyter_starverse.data._steps import DedupParams, dedup
from tests.data.corpus import dup_corpus


def test_signatures_are_datasketch_minhashes() -> None:
    from datasketch import MinHash

    h = MinHasher(num_perm=64)
    shingles = h.shingles(normalize("Hello 世界, the quick brown fox"))
    m = MinHash(num_perm=64, seed=1, hashfunc=lambda x: x)
    m.update_batch([int(x) for x in shingles])
    assert (m.hashvalues == h.signature(shingles)).all()


def _run(texts: list[str], work: Path, **kw: object) -> tuple[list[int], object]:
    kept: list[int] = []
    docs = [Doc(i, "c.jsonl", i + 1, t) for i, t in enumerate(texts)]
    res = dedup(lambda: iter(docs), lambda d, t: kept.append(d.idx), work, params=DedupParams(**kw))  # type: ignore[arg-type]
    return kept, res


def test_planted_near_duplicates_are_found_without_false_positives(tmp_path: Path) -> None:
    corpus = dup_corpus(600, seed=4, dup_share=0.2)
    kept, res = _run(corpus.docs, tmp_path / "w", paragraph_share=None)
    removed = set(range(len(corpus.docs))) - set(kept)
    planted = {copy for _, copy in corpus.near}
    assert len(removed & planted) / len(planted) >= 0.95
    assert removed <= planted  # nothing that was not planted
    by_dup = {m.doc.idx: (c.kept.idx, m.similarity) for c in res.clusters for m in c.members}  # type: ignore[attr-defined]
    assert all(sim >= 0.7 for _, sim in by_dup.values())  # every removal names a kept document at the threshold
    for src, copy in corpus.near[:20]:
        if copy in by_dup:
            assert by_dup[copy][0] == src and 0.7 <= by_dup[copy][1] < 1.0  # which kept doc, and how similar
    preview = dict(res.preview)  # type: ignore[attr-defined]
    assert preview[0.7] == len(removed) and preview[0.95] <= preview[0.9] <= preview[0.7] <= preview[0.5]


def test_band_tables_spilled_to_many_partitions_give_the_same_answer(tmp_path: Path) -> None:
    corpus = dup_corpus(300, seed=5)
    one, _ = _run(corpus.docs, tmp_path / "a", paragraph_share=None)
    many, _ = _run(
        corpus.docs, tmp_path / "b", paragraph_share=None, max_memory=64 << 10, expected_docs=len(corpus.docs)
    )
    assert one == many
    from jupyter_starverse.data._stages import StageConfig

    # the small memory bound really split the band keys over several sorted partitions
    assert StageConfig.load(tmp_path / "a" / "stages").partitions == 1
    assert StageConfig.load(tmp_path / "b" / "stages").partitions > 1


def test_exact_and_paragraph_duplicates(tmp_path: Path) -> None:
    para = "这一段文字在两篇文档里都出现了，而且足够长，可以算作一个段落。"
    texts = [
        "Alpha document about GPUs and clusters, first version.",
        "alpha   DOCUMENT about GPUs and clusters, first version.",  # exact after normalizing
        f"{para}\n第一篇文档的其他内容，完全不同的句子，讲的是模型训练和数据准备。",
        f"{para}\n第二篇：另外一些话，关于账单和预算，和上一篇没有关系，还有一些别的内容。",
    ]
    kept, res = _run(texts, tmp_path / "w")
    assert kept == [0, 2]
    assert res.removed == {"exact": 1, "paragraph": 1}  # type: ignore[attr-defined]
    members = {m.doc.idx: (c.kept.idx, m.method) for c in res.clusters for m in c.members}  # type: ignore[attr-defined]
    assert members == {1: (0, "exact"), 3: (2, "paragraph")}


def test_a_chain_of_near_duplicates_never_removes_a_document_below_the_threshold(tmp_path: Path) -> None:
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)) for _ in range(40)]
    a, b, c = (" ".join(words[k : k + 32]) for k in (0, 4, 8))
    h = MinHasher()
    sim = lambda x, y: MinHasher.jaccard(h.shingles(normalize(x)), h.shingles(normalize(y)))  # noqa: E731
    assert sim(a, b) >= 0.7 and sim(b, c) >= 0.7 and sim(a, c) < 0.7  # b bridges a and c
    kept, res = _run([a, b, c], tmp_path / "w", paragraph_share=None)
    assert kept == [0, 2]  # c only resembled b, which was removed: c stays
    (cluster,) = res.clusters  # type: ignore[attr-defined]
    assert cluster.kept.idx == 0 and [(m.doc.idx, m.similarity >= 0.7) for m in cluster.members] == [(1, True)]
