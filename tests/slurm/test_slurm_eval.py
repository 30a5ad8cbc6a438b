"""`starverse eval ... --job --backend slurm` on the real test cluster (the session's one, conftest):
the job scores the model and its baseline on the store the nodes see, writes the predictions and the
reports there, and its metrics are the local run's on the same examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse.backends.slurm import SlurmBackend
from jupyter_starverse.cli import main
from jupyter_starverse.client import Starverse
from jupyter_starverse.evals._report import read_predictions
from jupyter_starverse.jobmodel import JobState
from tests.evals.conftest import store, tiny_models  # noqa: F401  (the evaluation's tiny models and labelled set)
from tests.feedback.conftest import tiny_folder  # noqa: F401

from ._cluster import APT_HINT, missing_programs

if missing_programs():
    pytest.skip(
        f"Slurm is not installed here (no {', '.join(missing_programs())}): {APT_HINT}", allow_module_level=True
    )


def test_eval_job_on_slurm_writes_the_reports_with_the_local_metrics(
    slurm: SlurmBackend,
    client: Starverse,
    store: dict[str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    m, base, data = store["model"], store["base"], store["data"]
    local = client.evals.evaluate(m, data, baselines=[base], limit=6)
    argv = ["eval", m, "--data", data, "--baseline", base, "--limit", "6", "--job", "--backend", "slurm", "--json"]
    assert main(argv) == 0
    submitted = json.loads(capsys.readouterr().out)
    assert submitted["backend"] == "slurm"
    job = slurm.wait(submitted["id"], timeout=240)
    log = "\n".join(line.render() for line in slurm.logs(job.id))
    assert job.state is JobState.SUCCEEDED, (job.reason, log[-3000:])
    assert f"delta vs {m}" in log  # the side-by-side table is in the job's log
    line = next(ln for ln in log.splitlines() if '{"eval_reports"' in ln)
    ids = json.loads(line[line.index('{"eval_reports"') :])
    remote = [client.evals.report(i) for i in ids["eval_reports"]]  # on the store this side reads
    assert [r.model for r in remote] == [m, base]
    for here, there in zip(local.reports, remote, strict=True):
        assert there.examples == 6 and there.dataset == data and there.model_version == here.model_version
        assert there.metrics == pytest.approx(here.metrics)
        rows = sorted(read_predictions(Path(there.predictions)), key=lambda r: r["idx"])
        mine = sorted(read_predictions(Path(here.predictions)), key=lambda r: r["idx"])
        assert [r["predicted"] for r in rows] == [r["predicted"] for r in mine]
    assert {r.id for r in client.evals.reports(model=m)} == {local.report.id, remote[0].id}
