"""Exports come from the backends' own renderers (client.preview) and chain the steps."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

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
    assert "#SBATCH --nodes=2" in dedup and "#SBATCH --ntasks-per-node=1" in dedup  # two shard ranks
    assert "-m jupyter_starverse.data._job dedup tiny@clean-runSUBMITSTAMP-clean" in dedup  # reads what clean writes
    assert "--to tiny@clean-runSUBMITSTAMP-clean" in clean
    assert '"s/runSUBMITSTAMP/run$stamp/g"' in submit  # one stamp per submission names both versions


FED = {**PREP, "nodes": [*PREP["nodes"], {"id": "train", "kind": "train", "params": {"script": "steps/train.py"}}],
       "edges": [*PREP["edges"], {"source": "dedup", "target": "train"}]}  # fmt: skip


def test_a_training_step_reads_what_the_prep_step_before_it_writes_in_the_sbatch_export(
    client: Starverse, folder: Path, dataset: str
) -> None:
    from jupyter_starverse.catalog import DatasetRef

    out = client.pipelines.export(Pipeline.from_json(FED), "sbatch", base_dir=folder)
    assert [f.name for f in out.files] == ["submit.sh", "clean.sbatch", "dedup.sbatch", "train.sbatch"]
    for f in out.files:
        assert subprocess.run(["bash", "-n"], input=f.text, text=True).returncode == 0, f.name
    submit, _, dedup, train = (f.text for f in out.files)
    assert "--to tiny@dedup-runSUBMITSTAMP-dedup" in dedup
    # train is submitted after dedup succeeded, and reads the folder dedup's version will have
    assert submit.count("--dependency=afterok:${sid_1} --kill-on-invalid-dep=yes") == 1
    assert submit.index("sid_1=") < submit.index("sid_2=") and "afterok:${sid_1}" in submit.split("sid_2=")[1]
    folder_of = client.catalog.layout.data_dir(DatasetRef("tiny", "dedup-runSUBMITSTAMP-dedup"))
    assert f"DATA_PATH={folder_of}" in train.replace("'", "").replace('"', "")
    assert "DATA_PATH_DEDUP" in train
    assert "mounted catalog entries" not in train  # not the stand-in (the source, tiny@v1): nothing else mounted
    # one stamp fills both: the version dedup writes and the folder train reads
    stamped = subprocess.run(["sed", "-e", "s/runSUBMITSTAMP/run20261202-0000/g"], input=train + dedup,
                             text=True, capture_output=True).stdout  # fmt: skip
    assert "tiny@dedup-run20261202-0000-dedup" in stamped and "data/tiny/dedup-run20261202-0000-dedup" in stamped


def test_a_training_step_reads_what_the_prep_step_before_it_writes_in_the_yaml_export(
    client: Starverse, folder: Path, dataset: str
) -> None:
    import yaml

    from jupyter_starverse.catalog import DatasetRef
    from tests.k8s._psa import violations

    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    text = client.pipelines.export(Pipeline.from_json({**FED, "backend": "kubernetes"}), "yaml", base_dir=folder)
    objs = [o for o in yaml.safe_load_all(text.main.text) if o]
    for obj in objs:
        kubernetes_validate.validate(obj, "1.32.0", strict=True)
    jobs = {o["metadata"]["labels"]["starverse.io/experiment"].removeprefix("prep-chain-"): o
            for o in objs if o["kind"] == "Job"}  # fmt: skip
    assert set(jobs) == {"clean", "dedup", "train"}
    pod = jobs["train"]["spec"]["template"]
    assert violations(pod) == []
    (wait,) = [c for c in pod["spec"]["initContainers"] if c["name"] == "wait-for-steps"]
    assert wait["command"][-1] == f"job/{jobs['dedup']['metadata']['name']}"  # starts after dedup completed
    trainer = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    dedup_cmd = jobs["dedup"]["spec"]["template"]["spec"]["containers"][0]["command"]
    version = dedup_cmd[dedup_cmd.index("--to") + 1]
    folder_of = client.catalog.layout.data_dir(DatasetRef("tiny", version.split("@")[1]))
    assert env["DATA_PATH"] == env["DATA_PATH_DEDUP"] == str(folder_of)
    assert next(m for m in trainer["volumeMounts"] if m["name"] == "store")["readOnly"]  # it only reads


def _eval_fed(data: str) -> dict[str, Any]:
    """data -> clean (prep) -> train, and an eval step scoring train's output on what clean writes."""
    return {"version": 1, "name": "prep-eval", "nodes": [
        {"id": "raw", "kind": "dataset", "params": {"ref": data}},
        {"id": "clean", "kind": "prep", "params": {"step": "clean", "options": {"actions": {"person": "placeholder"}}}},
        {"id": "train", "kind": "train", "params": {"script": "steps/train.py"}},
        {"id": "score", "kind": "eval", "params": {"task": "classification"}},
    ], "edges": [{"source": "raw", "target": "clean"}, {"source": "clean", "target": "train"},
                 {"source": "clean", "target": "score"}, {"source": "train", "target": "score"}]}  # fmt: skip


def test_an_eval_step_fed_by_a_prep_step_exports_to_sbatch_and_yaml_after_it(
    client: Starverse, folder: Path, tmp_path: Path
) -> None:
    import yaml

    from jupyter_starverse.catalog import DatasetRef
    from tests.evals.conftest import labelled_rows, write_dataset
    from tests.k8s._psa import violations

    data = write_dataset(client, tmp_path / "reviews", labelled_rows(6))
    client.catalog.pull(data)
    name = data.split("@")[0]
    out = client.pipelines.export(Pipeline.from_json(_eval_fed(data)), "sbatch", base_dir=folder)
    assert [f.name for f in out.files] == ["submit.sh", "clean.sbatch", "train.sbatch", "score.sbatch"]
    for f in out.files:
        assert subprocess.run(["bash", "-n"], input=f.text, text=True).returncode == 0, f.name
    submit, clean, _, score = (f.text for f in out.files)
    version = f"{name}@clean-runSUBMITSTAMP-clean"
    assert f"--to {version}" in clean
    # score waits for clean (sid_0) and train (sid_1), and reads the folder clean's version will have
    after = submit.split("sid_2=")[1].split("\n")[0]
    assert "afterok:${sid_0}" in after and "${sid_1}" in after
    assert submit.index("sid_0=") < submit.index("sid_1=") < submit.index("sid_2=")
    folder_of = str(client.catalog.layout.data_dir(DatasetRef(name, "clean-runSUBMITSTAMP-clean")))
    assert folder_of in score and "jupyter_starverse.evals.job" in score

    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    text = client.pipelines.export(Pipeline.from_json({**_eval_fed(data), "backend": "kubernetes"}), "yaml",
                                   base_dir=folder)  # fmt: skip
    objs = [o for o in yaml.safe_load_all(text.main.text) if o]
    for obj in objs:
        kubernetes_validate.validate(obj, "1.32.0", strict=True)
    jobs = {o["metadata"]["labels"]["starverse.io/experiment"].removeprefix("prep-eval-"): o
            for o in objs if o["kind"] == "Job"}  # fmt: skip
    assert set(jobs) >= {"clean", "train"}
    kube_score = [o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] not in
                  {jobs["clean"]["metadata"]["name"], jobs["train"]["metadata"]["name"]}]  # fmt: skip
    (score_job,) = kube_score
    pod = score_job["spec"]["template"]
    assert violations(pod) == []
    (wait,) = [c for c in pod["spec"]["initContainers"] if c["name"] == "wait-for-steps"]
    assert {f"job/{jobs[s]['metadata']['name']}" for s in ("clean", "train")} <= set(wait["command"])
    clean_cmd = jobs["clean"]["spec"]["template"]["spec"]["containers"][0]["command"]
    written = clean_cmd[clean_cmd.index("--to") + 1]
    folder_k = str(client.catalog.layout.data_dir(DatasetRef(name, written.split("@")[1])))
    assert folder_k in json.dumps(pod["spec"]["containers"][0])  # the eval reads the version clean writes
