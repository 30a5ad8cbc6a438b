"""Issue 27: a pipeline's dataset node is pinned to the exact version at its first check or run."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_starverse.cli._pipeline import _keep_pins
from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline

from .conftest import doc, write


def test_a_bare_dataset_name_is_pinned_and_a_newer_original_warns_naming_it(
    client: Starverse, folder: Path, dataset: str, tmp_path: Path, capsys: object
) -> None:
    file = write(folder, doc(data="tiny"))
    pipeline, _ = client.pipelines.load(file)
    first = client.pipelines.check(pipeline, base_dir=folder)
    assert first.info["data"] == {"ref": "tiny", "pinned": None, "latest": "tiny@v1"}  # the editor pins this

    pinned = _keep_pins(client, pipeline, str(file))  # what `pipeline run FILE` does first
    assert "pinned data -> tiny@v1" in capsys.readouterr().err  # type: ignore[attr-defined]
    on_disk = json.loads(file.read_text())
    assert on_disk["nodes"][0]["params"] == {"ref": "tiny", "pinned": "tiny@v1"}  # kept in the pipeline file
    assert _keep_pins(client, pinned, str(file)) == pinned  # nothing more to pin: the file is left alone

    src = tmp_path / "tiny-v2"
    src.mkdir()
    (src / "train.jsonl").write_text('{"text": "new"}\n')
    client.catalog.add_dataset("tiny", str(src), version="v2")  # a newer original
    client.catalog.pull("tiny@v2")
    again = client.pipelines.check(Pipeline.loads(file.read_text()), base_dir=folder)
    assert again.info["train"]["mounts"] == ["tiny@v1"]  # the steps still read the pinned version
    assert again.info["data"] == {"ref": "tiny@v1", "pinned": "tiny@v1", "latest": "tiny@v2"}
    warning = next(i for i in again.issues if i.node == "data" and i.level == "warning")
    assert "tiny@v2" in warning.message and "tiny@v1" in warning.message and warning.field == "ref"

    # the user picks another entry: the old pin no longer applies (and is replaced at the next pin)
    moved = Pipeline.from_json({**on_disk, "nodes": [{**on_disk["nodes"][0], "params": {"ref": "other",
                                                                                         "pinned": "tiny@v1"}},
                                                     *on_disk["nodes"][1:]]})  # fmt: skip
    assert moved.by_id["data"].entry_ref == "other"
