"""The .svpipeline document: structure, round trip, stable text, and clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.errors import BadInputError
from jupyter_starverse.pipelines import Pipeline, PipelineCheck

from .conftest import doc


def test_round_trip_is_stable_and_sorted() -> None:
    pipeline = Pipeline.from_json(doc(data="tiny@v1"))
    text = pipeline.dumps()
    assert Pipeline.loads(text).dumps() == text  # saving twice changes nothing: diffs stay small
    assert text.endswith("\n") and json.loads(text)["version"] == 1
    assert list(json.loads(text)) == sorted(json.loads(text))


def test_steps_come_in_dependency_order() -> None:
    data = doc(data="tiny@v1")
    data["nodes"].reverse()  # document order must not matter
    pipeline = Pipeline.from_json(data)
    assert [n.id for n in pipeline.steps] == ["prep", "train"]
    assert [n.id for n in pipeline.inputs("train")] == ["data", "prep"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d["edges"].append({"source": "train", "target": "prep"}), "circle"),
        (lambda d: d["edges"].append({"source": "prep", "target": "nowhere"}), "no node 'nowhere'"),
        (lambda d: d["edges"].append({"source": "prep", "target": "data"}), "only steps take inputs"),
        (lambda d: d["nodes"].append(dict(d["nodes"][1])), "duplicate id"),
        (lambda d: d["nodes"][1].update(kind="teleport"), "kind 'teleport' is unknown"),
        (lambda d: d["nodes"][1]["params"].update(cards="8"), "unknown parameter 'cards'"),
        (lambda d: d["nodes"][1]["params"].update(nodes="2"), "nodes has the wrong type"),
        (lambda d: d.update(backend="mainframe"), "'mainframe' is unknown"),
        (lambda d: d.update(version=7), "format 7 is not supported"),
    ],
)
def test_bad_documents_are_refused_with_a_reason(change: object, words: str) -> None:
    data = doc(data="tiny@v1")
    change(data)  # type: ignore[operator]
    with pytest.raises(BadInputError, match=words) as info:
        Pipeline.from_json(data)
    assert info.value.hint


def test_not_json_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="not a pipeline file"):
        Pipeline.loads("{nodes: [")


def test_the_magic_shares_the_command_table(ip: object, tmp_path: Path) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    assert isinstance(ip, InteractiveShell)
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / "one.svpipeline"
    train = {"id": "train", "kind": "train", "params": {"script": "train.py", "nodes": 2, "data_parallel": 3}}
    path.write_text(json.dumps({"version": 1, "name": "one", "nodes": [train]}))
    check = ip.run_line_magic("sv", f"pipeline validate {path}")
    assert isinstance(check, PipelineCheck) and not check.ok  # returned, not raised, in a notebook
    assert "data 3 x tensor 1 x pipeline 1 = 3" in str(check)
    cost = ip.run_line_magic("sv", f"pipeline cost {path}")
    assert "total: 0.20 CNY" in str(cost)
