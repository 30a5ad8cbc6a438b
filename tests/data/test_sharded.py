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


def _ranks_as_processes(catalog: object, root: Path) -> tuple[object, object]:
    """A submit/wait pair that runs a shard job's ranks as processes of this machine (file barriers)."""
    import os
    import subprocess
    import sys
    import time

    from jupyter_starverse.jobmodel import Job, JobSpec, JobState

    def submit(spec: JobSpec) -> Job:
        mounts = {m: str(catalog.mount(m)) for m in spec.mounts}  # type: ignore[attr-defined]
        world = spec.nodes * spec.procs_per_node
        procs = []
        for rank in range(world):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "STARVERSE_JOB_ID": "test-shards",
                   "STARVERSE_MOUNTS": json.dumps(mounts), "OMP_NUM_THREADS": "1"}  # fmt: skip
            code = spec.code or ""
            procs.append(subprocess.Popen([sys.executable, "-c", code, *spec.args], env=env, cwd=root))
        ok = all(p.wait(timeout=300) == 0 for p in procs)
        state = JobState.SUCCEEDED if ok else JobState.FAILED
        return Job("test-shards", "local", spec, state, str(root), time.time())

    return submit, lambda job, timeout: job


def test_a_sharded_incremental_dedup_embeds_on_every_rank_and_matches_one_process(
    client: Starverse, tmp_path: Path
) -> None:
    """``data dedup NEW --against CLEAN --shards 2`` with a static encoder: each rank signs and embeds its
    shard, the result is the one-process result, and the report has each rank's figures."""
    import random

    from jupyter_starverse.data import DataPrep
    from jupyter_starverse.data._models import distill_static
    from tests.data.corpus import _EN
    from tests.data.tiny_encoder import build_tiny_encoder

    static = distill_static(build_tiny_encoder(tmp_path / "enc"), tmp_path / "static", dims=16)
    client.catalog.import_model(str(static), repo="test/static")
    old = dup_corpus(60, seed=11, dup_share=0.0).docs
    rng = random.Random(7)
    fresh = [" ".join(rng.choice(_EN) for _ in range(30)) for _ in range(6)]
    words = fresh[1].split()
    rng.shuffle(words)
    batch = [old[3], old[7][:-3] + "xyz", *fresh, fresh[0], " ".join(words)]  # exact, near, 6 new, exact, semantic
    for name, texts in (("clean", old), ("batch", batch)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        client.catalog.add_dataset(name, str(folder))
    client.data.dedup("clean", to="clean@d1")
    opts = dict(against="clean@d1", paragraph_share=None, semantic_model="hf:test/static", semantic_threshold=0.999)
    one = client.data.dedup("batch", to="clean@one", **opts)  # type: ignore[arg-type]
    submit, wait = _ranks_as_processes(client.catalog, tmp_path)
    prep = DataPrep(client.data.settings, client.catalog, submit=submit, wait=wait)  # type: ignore[arg-type]
    many = prep.dedup("batch", to="clean@many", shards=(1, 2), **opts)  # type: ignore[arg-type]
    read = lambda ref: (client.catalog.mount(ref) / "data.jsonl").read_text(encoding="utf-8")  # noqa: E731
    assert read("clean@many") == read("clean@one") and read("clean@many").count("\n") == 60 + 6
    assert many.removed == one.removed == {"exact": 2, "near": 1, "semantic": 1}
    kept = {m.doc.idx: c.kept.idx for c in many.clusters for m in c.members}
    assert kept == {60: 3, 61: 7, 68: 62, 69: 63}  # numbered after the clean version's 60 documents
    (note,) = [n for n in many.notes if n.startswith("semantic:")]
    assert "(static)" in note and "documents/s over 2 ranks" in note and "threshold 0.999" in note
    assert [r["rank"] for r in many.ranks] == [0, 1] and sum(r["docs"] for r in many.ranks) == len(batch)
    stages = {s["stage"]: s for s in many.ranks[1]["stages"]}
    assert stages["embed"]["docs"] == len(batch) // 2 and stages["embed"]["docs_per_s"] > 0
    assert "components" in {s["stage"] for s in many.ranks[0]["stages"]} and stages["filter"]["peak_rss_mib"] > 0
    beside = client.catalog.mount("clean@many") / "_starverse" / "dedup" / "meta.json"
    assert json.loads(beside.read_text())["docs"] == 66  # the union can be the next --against
