"""A pipeline exported as sbatch scripts runs on the real test cluster: ``bash submit.sh`` submits
each step, and the second starts only after the first succeeded (``--dependency=afterok``).

It lives here, beside the session's one Slurm cluster (tests/slurm/conftest.py); the export's
text is tested in tests/pipelines/test_export.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from jupyter_starverse._settings import Settings
from jupyter_starverse.backends.slurm import SlurmBackend
from jupyter_starverse.client import Starverse
from jupyter_starverse.pipelines import Pipeline
from tests.pipelines.conftest import STEP, doc

from ._cluster import SlurmCluster


def _state(cluster: SlurmCluster, sid: str) -> str:
    out = cluster.run("scontrol", "show", "job", sid, check=False).stdout
    found = re.search(r"JobState=(\S+)", out)
    return found.group(1) if found else "UNKNOWN"


def test_exported_sbatch_runs_the_steps_in_order(
    slurm: SlurmBackend, slurm_cluster: SlurmCluster, settings: Settings, tmp_path: Path
) -> None:
    folder = tmp_path / "project"
    (folder / "steps").mkdir(parents=True)
    for name in ("prep.py", "train.py"):
        (folder / "steps" / name).write_text(STEP)
    pipeline = Pipeline.from_json(doc(backend="slurm"))
    out = Starverse(settings).pipelines.export(pipeline, "sbatch", base_dir=folder)
    out.write(folder / "exported")

    done = subprocess.run(
        ["bash", str(folder / "exported" / "submit.sh")],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = re.findall(r"^(\w+): Slurm job (\d+) \(run folder (.+)\)$", done.stdout, re.M)
    steps = {node: (sid, Path(run)) for node, sid, run in found}
    assert set(steps) == {"prep", "train"}, done.stdout

    deadline = time.monotonic() + 180
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {node: _state(slurm_cluster, sid) for node, (sid, _run) in steps.items()}
        if all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") for s in states.values()):
            break
        time.sleep(0.5)
    assert states == {"prep": "COMPLETED", "train": "COMPLETED"}, (states, done.stdout)
    began = {node: json.loads((run / "step-0.json").read_text())["start"] for node, (_sid, run) in steps.items()}
    assert began["train"] >= began["prep"] + 0.5  # prep sleeps 0.5 s after it starts: train waited for it


def test_pipeline_run_on_slurm_runs_a_prep_step_as_a_sharded_job(
    slurm: SlurmBackend, settings: Settings, tmp_path: Path
) -> None:
    """raw -> dedup over 2 ranks (2 nodes): one Slurm job whose rank 0 publishes the new version.

    One job only (CI time): the afterok chain between prep jobs is checked in the export's text
    (tests/pipelines/test_export.py) and is the same ``JobSpec.after`` as between training steps.
    """
    from jupyter_starverse.cli import main

    client = Starverse(settings)
    src = tmp_path / "raw"
    src.mkdir()
    rows = ["a line that appears twice in the corpus, once per shard"] * 2 + ["a line of its own", "and another"]
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    client.catalog.add_dataset("raw", str(src), version="v1")
    client.catalog.pull("raw@v1")
    pipeline = {
        "version": 1,
        "name": "prep",
        "nodes": [
            {"id": "raw", "kind": "dataset", "params": {"ref": "raw@v1"}},
            {"id": "dedup", "kind": "prep", "params": {"step": "dedup", "shards": 2}},
        ],
        "edges": [{"source": "raw", "target": "dedup"}],
    }
    (tmp_path / "prep.svpipeline").write_text(json.dumps(pipeline))
    assert main(["pipeline", "run", str(tmp_path / "prep.svpipeline"), "--backend", "slurm"]) == 0
    (run,) = client.pipelines.runs()
    assert run.state == "succeeded", run
    job = client.attach(run.step("dedup").job_id or "", backend="slurm")
    assert job.backend == "slurm" and job.spec.nodes == 2
    (written,) = [e.ref for e in client.catalog.ls() if e.ref.startswith("raw@dedup-")]
    text = (client.catalog.mount(written) / "data.jsonl").read_text()
    assert text.count("appears twice") == 1 and "of its own" in text and "another" in text
    report = json.loads((Path(job.experiment_dir) / "data-report.json").read_text())
    assert report["output"] == written and report["docs_in"] == 4 and report["removed"] == {"exact": 1}
    assert any("2 x 1 ranks" in n for n in report["notes"])  # the shards were the job's two ranks


def test_the_same_prep_chain_file_runs_on_local_and_on_slurm(
    slurm: SlurmBackend, settings: Settings, tmp_path: Path
) -> None:
    """scan -> clean -> dedup -> score, one pipeline file: ``pipeline run`` on local (the driver runs
    each step) and on Slurm (each step a job, after the one before it) keep the same documents."""
    from jupyter_starverse.cli import main

    client = Starverse(settings)
    src = tmp_path / "corpus"
    src.mkdir()
    rows = ["a line that appears twice in the corpus"] * 2 + ["mail me at someone@example.com today", "and another"]
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    client.catalog.add_dataset("corpus", str(src), version="v1")
    client.catalog.pull("corpus@v1")
    chain = ["scan", "clean", "dedup", "score"]
    nodes = [{"id": "raw", "kind": "dataset", "params": {"ref": "corpus@v1"}}]
    options = {"clean": {"actions": {"email": "placeholder", "person": "placeholder"}}}
    nodes += [{"id": s, "kind": "prep", "params": {"step": s, "options": options.get(s, {})}} for s in chain]
    edges = [{"source": a, "target": b} for a, b in zip(["raw", *chain], chain)]
    path = tmp_path / "chain.svpipeline"
    path.write_text(json.dumps({"version": 1, "name": "chain", "nodes": nodes, "edges": edges}))

    kept: dict[str, list[str]] = {}
    for backend in ("local", "slurm"):
        before = {e.ref for e in client.catalog.ls()}
        assert main(["pipeline", "run", str(path), "--backend", backend]) == 0, backend
        run = client.pipelines.runs()[0]
        assert run.state == "succeeded", (backend, run)
        assert [s for s in chain if run.step(s).state == "succeeded"] == chain, (backend, run)
        if backend == "slurm":  # each step a Slurm job (on local, the driver ran them)
            assert all(run.step(s).job_id for s in chain), run
        new = {e.ref for e in client.catalog.ls()} - before
        (dedup,) = [r for r in new if r.startswith("corpus@dedup-")]
        text = (client.catalog.mount(dedup) / "data.jsonl").read_text()
        kept[backend] = sorted(json.loads(line)["text"] for line in text.splitlines() if line.strip())
    assert kept["local"] == kept["slurm"], kept
    assert sum("appears twice" in t for t in kept["slurm"]) == 1 and len(kept["slurm"]) == 3
    assert not any("someone@example.com" in t for t in kept["slurm"])  # clean ran before dedup
