"""Steps on store datasets: new versions with provenance and reports; the source is never touched."""

# ruff: noqa: RUF001 - Chinese punctuation is part of the test texts
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, ConflictError
from tests.data.corpus import dup_corpus, pii_corpus


def _raw(client: Starverse, tmp_path: Path, texts: list[str], name: str = "raw") -> Path:
    folder = tmp_path / f"{name}-src"
    folder.mkdir()
    with open(folder / "part.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")
        f.write("{broken\n")
    client.catalog.add_dataset(name, str(folder))
    return folder


def _rows(client: Starverse, ref: str) -> list[dict[str, Any]]:
    path = client.catalog.mount(ref) / "data.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_scan_then_clean_writes_a_new_version_with_provenance_and_no_secret(
    client: Starverse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = pii_corpus(40, seed=11)
    planted.docs.append("客户身份证号11010519491231002X，复核时再次出现11010519491231002X。")
    src = _raw(client, tmp_path, planted.docs)
    before = (src / "part.jsonl").read_bytes()
    said: list[str] = []
    scan = client.data.scan("raw", say=said.append)
    assert said[0].startswith("estimate for scan of raw@1")  # the estimate comes before the run
    assert scan.output is None and scan.docs_in == 41 and scan.malformed_total == 1
    assert scan.malformed[0]["line"] == 42
    by_type = {p.type: p for p in scan.pii}
    assert by_type["id_card"].suggested == "mask" and by_type["bank_card"].suggested == "keep_last4"
    shown = json.dumps(scan.to_json(), ensure_ascii=False)
    for _, _, value in planted.pii:
        assert value not in shown  # examples are masked
    monkeypatch.setenv("PII_SALT", "a-long-secret-value")
    rep = client.data.clean("raw", actions={"id_card": "hash"}, salt="env:PII_SALT")
    assert rep.output == "raw@1-clean" and rep.docs_out == 41
    rows = _rows(client, "raw@1-clean")
    text = "\n".join(r["text"] for r in rows)
    assert not [v for _, _, v in planted.pii if v in text]
    last = rows[-1]["text"]
    pseudonyms = [w for w in last.replace("，", " ").replace("。", " ").split() if "<ID_CARD_" in w]
    assert len(set(p[p.index("<") :] for p in pseudonyms)) == 1  # the same number, the same placeholder
    assert rows[0]["id"] == 0  # the other fields are kept
    folder = client.catalog.mount("raw@1-clean")
    stored = (folder / "_starverse" / "report.json").read_text() + (
        folder / "_starverse" / "provenance.json"
    ).read_text()
    assert "a-long-secret-value" not in stored and "env:PII_SALT" in stored
    prov = json.loads((folder / "_starverse" / "provenance.json").read_text())
    assert [p["step"] for p in prov] == ["raw", "clean"] and prov[1]["source"] == "raw@1"
    assert (folder / "_starverse" / "report.html").read_text().startswith("<!doctype html>")
    assert (src / "part.jsonl").read_bytes() == before  # the source is untouched
    with pytest.raises(ConflictError, match="never overwrites"):
        client.data.clean("raw@1", salt="env:PII_SALT")  # "raw" alone is now the newest version
    listed = client.data.reports().reports
    assert [r.step for r in listed][:2] == ["clean", "scan"]
    assert client.data.report(listed[0].id).output == "raw@1-clean"


def test_clean_refuses_a_missing_salt_before_reading(client: Starverse, tmp_path: Path) -> None:
    _raw(client, tmp_path, ["张伟的电话13812345678"])
    with pytest.raises(BadInputError, match="PII_SALT_NOPE is not set"):
        client.data.clean("raw", salt="env:PII_SALT_NOPE")
    with pytest.raises(BadInputError, match="by reference"):
        client.data.clean("raw", salt="the-secret-itself")
    assert client.data.reports().reports == ()


def test_dedup_chains_versions_and_records_clusters(client: Starverse, tmp_path: Path) -> None:
    corpus = dup_corpus(80, seed=2, dup_share=0.25)
    _raw(client, tmp_path, corpus.docs)
    est = client.data.estimate("dedup", "raw")
    assert est.docs > 50 and est.memory_bytes > 0 and est.seconds > 0
    rep = client.data.dedup("raw")
    planted = {copy for _, copy in corpus.near}
    assert rep.removed.get("near", 0) >= 0.95 * len(planted)
    assert rep.docs_out == len(_rows(client, "raw@1-dedup"))
    log = (client.catalog.mount("raw@1-dedup") / "_starverse" / "removed.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in log]
    assert len(entries) == rep.removed_total  # every removed document, not only the report's sample
    assert all(
        e["kept"] < e["doc"] and e["similarity"] >= 0.7 and e["where"].startswith("part.jsonl:") for e in entries
    )
    member = rep.clusters[0].members[0]
    assert member.method == "near" and 0.7 <= member.similarity <= 1.0
    assert rep.removed_at(0.5) >= rep.removed_at(0.7) >= rep.removed_at(0.95)
    again = client.data.dedup("raw@1-dedup")
    assert again.removed == {} and again.docs_out == rep.docs_out
    prov = json.loads((client.catalog.mount("raw@1-dedup-dedup") / "_starverse" / "provenance.json").read_text())
    assert [p["step"] for p in prov] == ["raw", "dedup", "dedup"]


def test_a_dedup_report_groups_copies_into_collapsed_clusters_largest_first(client: Starverse, tmp_path: Path) -> None:
    # 50 exact copies of one line are one cluster (kept + 49), shown first and collapsed
    copies = ["the same line pasted fifty times into the corpus"] * 50
    pair = ["a document that appears twice, about rented GPUs and their price"] * 2
    others = [f"document {i} talks about topic {i * 7919 % 1000} in its own words" for i in range(20)]
    _raw(client, tmp_path, pair + others + copies)
    rep = client.data.dedup("raw")
    first, second = rep.clusters[0], rep.clusters[1]
    assert first.count == 49 and len(first.members) == 20 and first.kept.where == "part.jsonl:23"
    assert second.count == 1 and second.kept.where == "part.jsonl:1"  # the user's file and line
    html = rep._repr_html_()
    assert html.count("<details class='sv-cluster'") == len(rep.clusters) and "<details open" not in html
    assert "data-count='49'" in html and "and 29 more" in html and "2 cluster(s), 50 removed document(s)" in html
    assert "kept part.jsonl:23 (49 removed as its duplicates)" in str(rep)
    assert type(first).from_json(json.loads(json.dumps(rep.to_json()))["clusters"][0]).count == 49


def test_a_folder_input_needs_a_target(client: Starverse, tmp_path: Path) -> None:
    folder = tmp_path / "loose"
    folder.mkdir()
    (folder / "a.txt").write_text("one line\nanother line\n")
    with pytest.raises(BadInputError, match="--to"):
        client.data.dedup(str(folder))
    rep = client.data.dedup(str(folder), to="loose@deduped")
    assert rep.output == "loose@deduped" and [r["text"] for r in _rows(client, "loose@deduped")] == [
        "one line",
        "another line",
    ]


def test_a_dedup_after_clean_names_the_users_files_and_lines(client: Starverse, tmp_path: Path) -> None:
    folder = tmp_path / "two-src"
    folder.mkdir()
    others = [f"document {i} talks about topic {i * 7919 % 1000} in its own words" for i in range(6)]
    (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in others))
    copies = ["a line the user pasted three times into the second file"] * 3
    (folder / "b.jsonl").write_text("\n" + "".join(json.dumps({"text": t}) + "\n" for t in copies))  # line 1 blank
    client.catalog.add_dataset("two", str(folder))
    clean = client.data.clean("two", actions={"email": "placeholder", "person": "placeholder"})
    assert clean.output == "two@1-clean"
    rep = client.data.dedup("two@1-clean")  # reads the clean step's merged data.jsonl
    cluster = rep.clusters[0]
    assert cluster.kept.where == "b.jsonl:2" and cluster.count == 2  # not data.jsonl:7
    assert sorted(m.doc.where for m in cluster.members) == ["b.jsonl:3", "b.jsonl:4"]
    # and on through a third step: the dedup's own version still names the user's lines
    again = client.data.dedup("two@1-clean-dedup")
    assert again.removed == {}
    origins = (client.catalog.mount("two@1-clean-dedup") / "_starverse" / "origins.jsonl").read_text().splitlines()
    assert json.loads(origins[-1]) == ["b.jsonl", 2] and len(origins) == rep.docs_out
