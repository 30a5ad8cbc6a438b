"""Exports come from the backends' own renderers (client.preview) and chain the steps."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from jupyter_starverse.client import Starverse
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
    assert text.index("# step prep (first)") < text.index("# step train (after prep)")
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
