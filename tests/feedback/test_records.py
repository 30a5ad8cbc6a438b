"""Feedback logs: append-only records from concurrent writers, a table, versions, pairs and labels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError, NotFoundError
from jupyter_starverse.feedback import make_labels, make_pairs

ROOT = Path(__file__).resolve().parents[2]


def _say(client: Starverse, prompt: str, answer: str, vote: str | None = None, **kw: str) -> None:
    client.feedback.record("team", model="hf:team/tiny@main", prompt=prompt, answer=answer, vote=vote, **kw)


def test_concurrent_writers_lose_nothing(client: Starverse, tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.feedback.writer", str(go), "team", who, "40"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("ana", "bo", "chen")
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.ready.*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    go.touch()  # all three start writing at the same moment
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    table = client.feedback.table("team")
    assert table.total == 120
    assert len({r.id for r in table.records}) == 120
    assert {r.user for r in table.records} == {"ana", "bo", "chen"}
    for who in ("ana", "bo", "chen"):  # every writer's records, complete and in its own order
        mine = [r.answer for r in table.records if r.user == who]
        assert mine == [f"answer {i} by {who}" for i in range(40)]
    leftovers = [
        p.name for p in (client.catalog.root / "feedback" / "team" / "records").iterdir() if p.name.startswith(".")
    ]
    assert leftovers == []


def test_pairs_and_labels_follow_votes_and_better_answers(client: Starverse) -> None:
    _say(client, "capital of France?", "Paris", "up")
    _say(client, "capital of France?", "Lyon", "down")
    _say(client, "2+2?", "5", "down", better="4", comment="arithmetic")
    _say(client, "tie?", "maybe", "up", user="ana")
    _say(client, "tie?", "maybe", "down", user="bo")  # one up, one down: no verdict
    pairs = [p.to_json() for p in client.feedback.pairs("team")]
    assert {"prompt": "capital of France?", "chosen": "Paris", "rejected": "Lyon"} in pairs
    assert {"prompt": "2+2?", "chosen": "4", "rejected": "5"} in pairs
    assert not any(p["prompt"] == "tie?" for p in pairs)
    labels = [x.to_json() for x in client.feedback.labels("team")]
    assert {"prompt": "capital of France?", "completion": "Lyon", "label": False} in labels
    assert {"prompt": "2+2?", "completion": "4", "label": True} in labels
    assert {"prompt": "2+2?", "completion": "5", "label": False} in labels
    assert not any(x["prompt"] == "tie?" for x in labels)


def test_a_changed_vote_replaces_the_first(client: Starverse) -> None:
    client.feedback.record("team", model="m", prompt="p", answer="a", vote="up", answer_id="t1")
    client.feedback.record("team", model="m", prompt="p", answer="b", vote="down", answer_id="t2")
    assert [p.chosen for p in client.feedback.pairs("team")] == ["a"]
    client.feedback.record("team", model="m", prompt="p", answer="a", vote="down", answer_id="t1")
    table = client.feedback.table("team")
    assert (table.total, len(table.records), table.pairs) == (3, 2, 0)
    assert "1 replaced by a newer vote" in table.summary
    assert [x.label for x in client.feedback.labels("team")] == [False, False]


def test_versions_are_frozen_and_exports_have_the_recipe_formats(client: Starverse, tmp_path: Path) -> None:
    _say(client, "capital of France?", "Paris", "up")
    _say(client, "capital of France?", "Lyon", "down")
    v1 = client.feedback.snapshot("team")
    assert (v1.ref, v1.created, v1.pairs) == ("team@1", True, 1)
    assert client.feedback.snapshot("team").ref == "team@1"  # nothing new: same version
    _say(client, "2+2?", "5", "down", better="4")
    v2 = client.feedback.snapshot("team")
    assert (v2.ref, v2.created, v2.pairs) == ("team@2", True, 2)
    assert client.feedback.table("team@1").total == 2  # the old version does not move
    assert client.feedback.versions("team") == ["team@1", "team@2"]
    frozen = client.feedback.path("team@2", "pairs")
    assert frozen.stat().st_mode & 0o222 == 0  # published read-only
    rows = [json.loads(line) for line in frozen.read_text().splitlines()]
    assert all(set(r) == {"prompt", "chosen", "rejected"} for r in rows) and len(rows) == 2
    out = client.feedback.export("team@2", "labels", tmp_path / "labels.jsonl")
    rows = [json.loads(line) for line in Path(out.path).read_text().splitlines()]
    assert out.rows == len(rows) == 4
    assert all(set(r) == {"prompt", "completion", "label"} and isinstance(r["label"], bool) for r in rows)
    assert client.feedback.dataset("team@2", "pairs") == "team-pairs@2"
    assert client.feedback.training_data("team@2", "kto") == "team-labels@2"
    # one format per dataset: a recipe reads every *.jsonl of what it mounts
    assert sorted(p.name for p in client.catalog.mount("team-pairs@2").iterdir()) == ["pairs.jsonl"]
    assert sorted(p.name for p in client.catalog.mount("team-labels@2").iterdir()) == ["labels.jsonl"]


def test_alignment_data_needs_the_right_feedback(client: Starverse) -> None:
    _say(client, "capital of France?", "Lyon", "down")
    with pytest.raises(BadInputError) as err:
        client.feedback.training_data("team", "dpo")  # one down vote: no pair
    assert "kto" in (err.value.hint or "")
    assert client.feedback.versions("team") == ["team@1"]  # a log name is frozen first
    assert client.feedback.training_data("team", "kto") == "team-labels@1"
    with pytest.raises(BadInputError):
        client.feedback.training_data("team@1", "ppo")


def test_table_shows_who_what_and_the_summary(client: Starverse) -> None:
    _say(client, "capital of France?", "Paris", "up", comment="good")
    text = str(client.feedback.table("team"))
    assert "tester" in text and "Paris" in text and "👍" in text and "good" in text
    assert "1 records" in text
    html = client.feedback.table("team")._repr_html_()
    assert "<table" in html and "Paris" in html


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"vote": "sideways"}, "vote"),
        ({"vote": None}, "vote"),
        ({"vote": "up", "prompt": "  "}, "prompt"),
        ({"vote": "up", "answer": "x" * 70_000}, "answer"),
    ],
)
def test_bad_records_are_refused_and_nothing_is_written(client: Starverse, kw: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"model": "m", "prompt": "p", "answer": "a", **kw}
    with pytest.raises(BadInputError) as err:
        client.feedback.record("team", **args)  # type: ignore[arg-type]
    assert err.value.field == field and err.value.hint
    with pytest.raises(NotFoundError):
        client.feedback.table("team")


def test_log_names_are_checked(client: Starverse) -> None:
    with pytest.raises(BadInputError):
        client.feedback.record("../evil", model="m", prompt="p", answer="a", vote="up")
    with pytest.raises(BadInputError):
        client.feedback.record("team@3", model="m", prompt="p", answer="a", vote="up")


def test_pure_functions_dedupe_pairs() -> None:
    from jupyter_starverse.feedback._records import new_record

    recs = [
        new_record(user="a", model="m", prompt="p", answer="good", vote="up"),
        new_record(user="b", model="m", prompt="p", answer="good", vote="up"),
        new_record(user="a", model="m", prompt="p", answer="bad", vote="down"),
    ]
    assert [p.to_json() for p in make_pairs(recs)] == [{"prompt": "p", "chosen": "good", "rejected": "bad"}]
    assert [(x.completion, x.label) for x in make_labels(recs)] == [("good", True), ("bad", False)]
