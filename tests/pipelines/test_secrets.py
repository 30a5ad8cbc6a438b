"""Pipeline steps take secrets by reference (issue 34): the exports and the check hold no value."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline
from jupyter_starverse.pipelines._plan import step_plan

from .conftest import doc

SECRET = "hf_Pipe5Secret1Value8Kw3Zn6"


def test_a_step_takes_secrets_by_reference_and_exports_only_the_reference(
    client: Starverse, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", SECRET)
    train = {"secrets": {"HF_TOKEN": "env:MY_HF_TOKEN"}, "env": {"WANDB_API_KEY": "plain-value"}}
    pipeline = Pipeline.from_json(doc(train=train))
    [node] = [n for n in pipeline.nodes if n.id == "train"]
    step = step_plan(pipeline, node, base_dir=folder, facade=client)
    assert step.spec is not None and dict(step.spec.secrets) == {"HF_TOKEN": "env:MY_HF_TOKEN"}
    found = client.pipelines.check(pipeline, base_dir=folder)
    [warned] = [i for i in found.issues if i.node == "train" and i.field == "env"]
    assert warned.level == "warning" and "env WANDB_API_KEY looks like a secret" in warned.message
    assert "secrets WANDB_API_KEY=env:WANDB_API_KEY" in warned.message and found.ok
    for fmt in ("sbatch", "python"):
        for f in client.pipelines.export(pipeline, fmt, base_dir=folder).files:
            assert SECRET not in f.text, (fmt, f.name)
    sbatch = client.pipelines.export(pipeline, "sbatch", base_dir=folder).files[2].text
    assert "HF_TOKEN <- env:MY_HF_TOKEN" in sbatch
    bad = Pipeline.from_json(doc(train={"secrets": {"HF_TOKEN": SECRET}}))
    issues = [i for i in client.pipelines.check(bad, base_dir=folder).issues if i.node == "train"]
    assert any(i.field == "secrets" and i.level == "error" for i in issues)
    assert all(SECRET not in i.message and SECRET not in (i.hint or "") for i in issues)
