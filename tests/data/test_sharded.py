"""Steps as a 2 x 2 job on the local backend: the same result as one process, across shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from tests.data.corpus import dup_corpus, pii_corpus


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sharded_clean_and_dedup_match_one_process_and_find_cross_shard_duplicates(
    client: Starverse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PII_SALT", "shard-secret")
    pii = pii_corpus(30, seed=5).docs
    dups = dup_corpus(40, seed=9, dup_share=0.25)
    texts = pii + dups.docs
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.jsonl").write_text(
        "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts) + "{oops\n"
    )
    client.catalog.add_dataset("raw", str(folder))
    one = client.data.clean("raw@1", salt="env:PII_SALT", to="raw@one")
    many = client.data.clean("raw@1", salt="env:PII_SALT", to="raw@many", shards=(2, 2))
    read = lambda ref: (client.catalog.mount(ref) / "data.jsonl").read_text(encoding="utf-8")  # noqa: E731
    assert read("raw@many") == read("raw@one")  # merged in document order, byte for byte
    assert [(p.type, p.count, p.docs) for p in many.pii] == [(p.type, p.count, p.docs) for p in one.pii]
    assert [e.before for p in many.pii for e in p.examples] == [e.before for p in one.pii for e in p.examples]
    assert many.malformed_total == 1 and many.malformed[0]["line"] == len(texts) + 1
    d_one = client.data.dedup("raw@one", to="raw@d-one")
    d_many = client.data.dedup("raw@one", to="raw@d-many", shards=(2, 2))
    assert read("raw@d-many") == read("raw@d-one")
    assert d_many.removed == d_one.removed and d_many.removed.get("near", 0) >= 9
    # a copy and its original usually sit on different ranks (idx % 4): found all the same
    offset = len(pii)
    cross = [(s, c) for s, c in dups.near if (s + offset) % 4 != (c + offset) % 4]
    removed = {m.doc.idx for cl in d_many.clusters for m in cl.members}
    assert cross and all(c + offset in removed for _, c in cross)
    jobs = client.jobs(backend="local")
    assert len(jobs) == 2 and all(j.state.value == "succeeded" for j in jobs)
    assert all(j.spec.nodes == 2 and j.spec.procs_per_node == 2 for j in jobs)
