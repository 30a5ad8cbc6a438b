"""Exports come from the backends' own renderers (client.preview) and chain the steps."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.pipelines import Pipeline

from .conftest import doc


def test_sbatch_export_chains_the_steps_with_afterok(client: Starverse, folder: Path, dataset: str) -> None:
    pipeline = Pipeline.from_json(doc(data=dataset, train={"nodes": 2}))
    out = client.pipelines.export(pipeline, "sbatch", base_dir=folder)
    names = [f.name for f in out.files]
    assert names == ["submit.sh", "prep.sbatch", "train.sbatch"]
    submit = out.main.text
    assert "--dependency=afterok:${sid_0}" in submit  # train waits for prep
    assert submit.count("sbatch --parsable --dependency") == 1  # prep starts at once
    for f in out.files:
        assert subprocess.run(["bash", "-n"], input=f.text, text=True).returncode == 0, f.name
    # The very script `starverse launch --backend slurm --dry-run` renders for the step:
    step = client.pipelines.export(pipeline, "sbatch", base_dir=folder).files[2].text
    assert "#SBATCH --nodes=2" in step and f"{dataset}" in step
    written = out.write(folder / "out")
    assert (folder / "out" / "submit.sh").stat().st_mode & 0o111
    assert len(written.written) == 3


def test_yaml_export_lists_every_step_in_order(client: Starverse, folder: Path) -> None:
    out = client.pipelines.export(Pipeline.from_json(doc(train={"nodes": 2})), "yaml", base_dir=folder)
    text = out.main.text
    assert "# Steps: prep (first); train (after prep)" in text  # the pods of train wait for prep's Job
    assert text.count("kind: Job") >= 2 and "parallelism: 2" in text


def test_python_export_runs_the_same_pipeline_through_the_api(client: Starverse, folder: Path) -> None:
    data = doc()
    script = client.pipelines.export(Pipeline.from_json(data), "python", base_dir=folder).main.text
    compile(script, "demo.py", "exec")
    assert "client.pipelines.run(Pipeline.from_json(PIPELINE)" in script
    namespace: dict[str, object] = {"__name__": "exported"}
    exec(compile(script, "demo.py", "exec"), namespace)  # defines, does not run
    assert namespace["PIPELINE"] == json.loads(Pipeline.from_json(data).dumps())
    assert namespace["BASE_DIR"] == folder.resolve()


PREP = {
    "version": 1,
    "name": "prep-chain",
    "nodes": [
        {"id": "raw", "kind": "dataset", "params": {"ref": "tiny@v1"}},
        {"id": "clean", "kind": "prep", "params": {"step": "clean", "options": {"actions": {"person": "placeholder"}}}},
        {"id": "dedup", "kind": "prep", "params": {"step": "dedup", "shards": 2, "options": {"threshold": 0.8}}},
    ],
    "edges": [{"source": "raw", "target": "clean"}, {"source": "clean", "target": "dedup"}],
}


def test_sbatch_export_of_prep_steps_is_a_chain_of_sharded_jobs(client: Starverse, folder: Path, dataset: str) -> None:
    out = client.pipelines.export(Pipeline.from_json(PREP), "sbatch", base_dir=folder)
    assert [f.name for f in out.files] == ["submit.sh", "clean.sbatch", "dedup.sbatch"]
    for f in out.files:
        assert subprocess.run(["bash", "-n"], input=f.text, text=True).returncode == 0, f.name
    submit, clean, dedup = (f.text for f in out.files)
    assert "--dependency=afterok:${sid_0}" in submit and submit.count("sbatch --parsable --dependency") == 1
    assert "#SBATCH --nodes=2" in dedup and "--nnodes=2" in dedup  # two shard ranks
    assert "-m jupyter_starverse.data._job dedup tiny@clean-runSUBMITSTAMP-clean" in dedup  # reads what clean writes
    assert "--to tiny@clean-runSUBMITSTAMP-clean" in clean
    assert '"s/runSUBMITSTAMP/run$stamp/g"' in submit  # one stamp per submission names both versions
    # a training step that mounts what a prep step writes cannot be rendered before it exists
    fed = {**PREP, "nodes": [*PREP["nodes"], {"id": "train", "kind": "train", "params": {"script": "steps/train.py"}}],
           "edges": [*PREP["edges"], {"source": "dedup", "target": "train"}]}  # fmt: skip
    with pytest.raises(BadInputError, match="mounts the data dedup prepares") as e:
        client.pipelines.export(Pipeline.from_json(fed), "sbatch", base_dir=folder)
    assert "pipeline run" in (e.value.hint or "")
