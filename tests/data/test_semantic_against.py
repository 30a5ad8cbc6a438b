"""Incremental semantic dedup: a new batch against the vectors kept beside a clean version (issue 40)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.client import Starverse


def _setup(client: Starverse, tmp_path: Path) -> tuple[list[str], list[str]]:
    from jupyter_starverse.data._models import distill_static
    from tests.data.corpus import _EN
    from tests.data.tiny_encoder import build_tiny_encoder

    static = distill_static(build_tiny_encoder(tmp_path / "enc"), tmp_path / "static", dims=16)
    client.catalog.import_model(str(static), repo="test/static")
    rng = random.Random(21)
    old = [" ".join(rng.choice(_EN) for _ in range(30)) for _ in range(40)]
    words = old[5].split()
    rng.shuffle(words)  # the same words in another order: no shared 5-grams to speak of, the same mean vector
    batch = [" ".join(words), *(" ".join(rng.choice(_EN) for _ in range(30)) for _ in range(3))]
    for name, texts in (("clean", old), ("batch", batch)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        client.catalog.add_dataset(name, str(folder))
    return old, batch


def _count_embeds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the static encoder embeds from now on (the estimate's sample included)."""
    from jupyter_starverse.data._models import StaticEncoder

    seen: list[str] = []
    real = StaticEncoder.embed

    def counting(self: Any, texts: Any) -> Any:
        seen.extend(texts)
        return real(self, texts)

    monkeypatch.setattr(StaticEncoder, "embed", counting)
    return seen


def test_a_paraphrase_of_an_old_document_is_removed_against_its_kept_vectors_without_re_embedding_them(
    client: Starverse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, batch = _setup(client, tmp_path)
    opts: dict[str, Any] = dict(paragraph_share=None, semantic_model="hf:test/static", semantic_threshold=0.999)
    first = client.data.dedup("clean", to="clean@d1", **opts)
    assert first.docs_out == 40
    sem = client.catalog.mount("clean@d1") / "_starverse" / "dedup" / "sem"
    meta = json.loads((sem / "embed-9999.json").read_text())
    assert meta["docs"] == 40 and meta["encoder"] == "hf:test/static (static)" and (sem / "centroids.npy").is_file()
    seen = _count_embeds(monkeypatch)
    rep = client.data.dedup("batch", against="clean@d1", **opts)
    assert not set(seen) & set(old) and set(seen) == set(batch)  # only the new batch went through the encoder
    assert rep.removed == {"semantic": 1}
    assert {m.doc.idx: c.kept.idx for c in rep.clusters for m in c.members} == {40: 5}
    (note,) = [n for n in rep.notes if n.startswith("semantic:")]
    assert "encoder hf:test/static (static)" in note and "against 40 kept vectors" in note
    again = json.loads(
        (client.catalog.mount(rep.output) / "_starverse" / "dedup" / "sem" / "embed-9999.json").read_text()
    )
    assert again["docs"] == 43  # the union's vectors, for the next batch


def test_an_old_version_without_vectors_is_embedded_once_and_the_report_says_so(
    client: Starverse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _ = _setup(client, tmp_path)
    client.data.dedup("clean", to="clean@plain", paragraph_share=None)  # MinHash only: no vectors kept
    seen = _count_embeds(monkeypatch)
    said: list[str] = []
    rep = client.data.dedup(
        "batch", against="clean@plain", paragraph_share=None, semantic_model="hf:test/static", say=said.append
    )
    assert all(seen.count(t) == 1 for t in old) and rep.removed == {"semantic": 1}  # the old version once
    assert rep.params["semantic_threshold"] == 0.96  # the static encoder's default
    (note,) = [n for n in rep.notes if n.startswith("semantic:")]
    assert "keeps no vectors" in note and "embedded once" in note
    assert any("embedding it once" in s for s in said)
