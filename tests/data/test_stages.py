"""The five dedup stages as plain functions over shard files: shards and partitions change nothing."""

from __future__ import annotations

from pathlib import Path

from jupyter_starverse.client import Starverse
from jupyter_starverse.data import _stages as st
from jupyter_starverse.data._read import Doc
from tests.data.corpus import dup_corpus


def _staged(texts: list[str], work: Path, *, shards: int, partitions: int) -> tuple[list[int], dict[str, int]]:
    cfg = st.StageConfig(partitions=partitions, paragraph_share=None)
    cfg.save(work)
    docs = [Doc(i, "c.jsonl", i + 1, t) for i, t in enumerate(texts)]
    for r in range(shards):  # each shard's stage 1 sees only its own documents
        st.sign_shard((d for d in docs if d.idx % shards == r), cfg, work, r)
    for p in range(partitions):
        st.sort_partition(cfg, work, p)
        st.partition_pairs(cfg, work, p)
    comp = st.components(cfg, work, len(docs), chunk_docs=64)  # several ranges of documents
    kept: list[int] = []
    for r in range(shards):
        st.filter_shard((d for d in docs if d.idx % shards == r), cfg, work, lambda d, t: kept.append(d.idx))
    return sorted(kept), comp.removed


def test_shards_and_partitions_give_the_same_answer_and_split_the_bucket_table(tmp_path: Path) -> None:
    corpus = dup_corpus(200, seed=3, dup_share=0.25)
    one = _staged(corpus.docs, tmp_path / "one", shards=1, partitions=1)
    many = _staged(corpus.docs, tmp_path / "many", shards=3, partitions=8)
    assert one == many
    planted = {c for _, c in corpus.near}
    removed = set(range(len(corpus.docs))) - set(many[0])
    assert removed <= planted and len(removed) >= 0.95 * len(planted)
    # stage 2 of one partition holds about 1/8 of the band records, not the table
    sizes = [p.stat().st_size for p in (tmp_path / "many" / "buckets").glob("band-*.bin")]
    assert len(sizes) == 8 and max(sizes) < 2.5 * sum(sizes) / 8
    # every shard's records went to the partition files of its rank
    assert len(list((tmp_path / "many" / "sig").glob("band-0003-*.bin"))) == 3


def test_boilerplate_is_stripped_never_a_reason_to_remove_and_the_share_is_a_setting(tmp_path: Path) -> None:
    import random

    from jupyter_starverse.data._steps import DedupParams, dedup
    from tests.data.corpus import filler

    rng = random.Random(2)
    footer = "Copyright 2024 Example Corp. All rights reserved worldwide."
    shared = "This paragraph was copied into a second document and is long enough."
    bodies = [filler(rng, 60) for _ in range(6)]
    texts = [f"{b}\n{footer}" for b in bodies]  # the footer is ~50% of each: boilerplate, in 6 documents
    texts += [f"{shared}\n{filler(rng, 40)}", f"{shared}\n{filler(rng, 40)}"]  # in 2: a duplicated paragraph
    out: dict[int, str] = {}

    def run(**kw: object) -> object:
        out.clear()
        docs = [Doc(i, "c.jsonl", i + 1, t) for i, t in enumerate(texts)]
        return dedup(
            lambda: iter(docs),
            lambda d, t: out.__setitem__(d.idx, t),
            tmp_path / str(len(kw)),
            params=DedupParams(**kw),
        )  # type: ignore[arg-type]

    res = run()
    assert sorted(out) == [0, 1, 2, 3, 4, 5, 6]  # no footer-bearing document removed; 7 copies a paragraph
    assert res.removed == {"paragraph": 1}
    assert footer in out[0] and all(footer not in out[i] and out[i] == bodies[i] for i in range(1, 6))
    kept_all = run(paragraph_share=0.9)  # the share is the user's: 7's copied paragraph is ~60% of it
    assert sorted(out) == list(range(8)) and "paragraph" not in kept_all.removed
    as_dups = run(boilerplate_docs=10)  # a footer in fewer documents than boilerplate_docs is a duplicate
    assert as_dups.removed["paragraph"] == 6


def test_incremental_dedup_against_a_clean_version_writes_the_union_with_provenance(
    client: Starverse, tmp_path: Path
) -> None:
    import json

    corpus = dup_corpus(60, seed=11, dup_share=0.0)
    new_docs = [corpus.docs[3], corpus.docs[7][:-3] + "xyz", "a brand new document " * 8, "a brand new document " * 8]
    for name, texts in (("clean", corpus.docs), ("batch", new_docs)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        client.catalog.add_dataset(name, str(folder))
    first = client.data.dedup("clean", to="clean@d1")
    assert first.docs_out == 60
    beside = client.catalog.mount("clean@d1") / "_starverse" / "dedup"
    assert (beside / "meta.json").is_file() and list(beside.glob("buckets/band-*.bin"))
    rep = client.data.dedup("batch", against="clean@d1", paragraph_share=None)
    assert rep.output == "clean@d1-plus-batch-1"
    assert rep.docs_in == 4 and rep.docs_out == 1  # a copy, an edited copy and a self-duplicate removed
    assert rep.removed == {"exact": 2, "near": 1}
    kept = {m.doc.idx: c.kept.idx for c in rep.clusters for m in c.members}
    assert kept == {60: 3, 61: 7, 63: 62}  # numbered after the clean version's 60 documents
    rows = (client.catalog.mount(rep.output) / "data.jsonl").read_text().splitlines()
    assert len(rows) == 61 and json.loads(rows[-1])["text"] == new_docs[2]
    steps = [p["step"] for p in rep.provenance]
    assert steps == ["raw", "dedup", "raw", "dedup"] and rep.provenance[-1]["params"]["against"] == "clean@d1"
    again = client.catalog.mount(rep.output) / "_starverse" / "dedup" / "meta.json"
    assert json.loads(again.read_text())["docs"] == 61  # the union can be the next --against


def test_a_static_encoder_distilled_from_a_transformer_finds_reordered_copies_inside_clusters(
    tmp_path: Path,
) -> None:
    import random

    from jupyter_starverse.data._models import StaticEncoder, distill_static
    from jupyter_starverse.data._steps import DedupParams, dedup
    from tests.data.corpus import _EN
    from tests.data.tiny_encoder import build_tiny_encoder

    static = StaticEncoder(distill_static(build_tiny_encoder(tmp_path / "enc"), tmp_path / "static", dims=16))
    assert static.kind == "static"
    rng = random.Random(4)
    texts = [" ".join(rng.choice(_EN) for _ in range(30)) for _ in range(80)]
    for i in range(5):
        words = texts[i].split()
        rng.shuffle(words)
        texts.append(" ".join(words))
    docs = [Doc(i, "c.jsonl", i + 1, t) for i, t in enumerate(texts)]
    kept: list[int] = []
    p = DedupParams(semantic=static, semantic_threshold=0.999, semantic_clusters=4, paragraph_share=None)
    res = dedup(lambda: iter(docs), lambda d, t: kept.append(d.idx), tmp_path / "w", params=p)
    assert res.removed == {"semantic": 5}
    assert {m.doc.idx: c.kept.idx for c in res.clusters for m in c.members} == {80 + i: i for i in range(5)}
    (note,) = [n for n in res.notes if n.startswith("semantic:")]
    assert "(static)" in note and "documents/s" in note and "k-means 4 clusters" in note and "threshold 0.999" in note


def test_two_near_identical_documents_either_side_of_a_cluster_boundary_are_still_compared(tmp_path: Path) -> None:
    import json

    import numpy as np

    from jupyter_starverse.data import _semantic as sem

    class Fixed:  # unit vectors by document text: a and b almost the same, on either side of the diagonal
        table = {"a": (1.0, 0.97), "b": (0.97, 1.0), "c": (1.0, -0.6), "d": (-0.6, 1.0)}
        name, kind = "fixed", "static"

        def embed(self, texts: list[str]) -> object:
            v = np.array([self.table[t] for t in texts], dtype=np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    cfg = st.StageConfig(semantic_threshold=0.99, paragraph_share=None, partitions=2)
    docs = [Doc(i, "c.jsonl", i + 1, t) for i, t in enumerate("cadb")]
    sem.embed_shard(iter(docs), Fixed(), tmp_path, 0)
    np.save(tmp_path / "sem" / "centroids.npy", np.eye(2, dtype=np.float32))  # a nearest (1,0), b nearest (0,1)
    (tmp_path / "sem" / "centroids.json").write_text(json.dumps({"k": 2}))

    def pairs(**kw: object) -> list[tuple[int, int]]:
        for f in (tmp_path / "sem").glob("grp-*"):
            f.unlink()
        sem.assign_shard(tmp_path, 0, 2, **kw)  # type: ignore[arg-type]
        found = []
        for g in range(2):
            sem.group_pairs(cfg, tmp_path, g, dim=2)
            rec = np.fromfile(tmp_path / "pairs" / f"sem-{g:04d}.bin", dtype=st._pair_dtype())
            found += list(zip(rec["later"].tolist(), rec["earlier"].tolist(), strict=True))
        return sorted(found)

    assert pairs(nearest=1) == []  # nearest centroid only: a and b never meet
    assert pairs() == [(3, 1)]  # b (3) meets a (1) where a spilled, once; c and d stay apart
