"""A data step as a job (``python -m jupyter_starverse.data._job``): its command, and one rank's run.

One rank in-process here (no process group); two ranks on the test Slurm cluster in
tests/slurm/test_pipeline_export.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.client import Starverse
from jupyter_starverse.data._job import REPORT, job_command, main, parse_shards
from jupyter_starverse.errors import BadInputError


def test_shards_and_the_command_say_what_is_wrong() -> None:
    assert parse_shards(4) == (4, 1) and parse_shards("2x3") == (2, 3)
    for bad in (0, "x", "2x2x2", True, 10**6):
        with pytest.raises(BadInputError) as e:
            parse_shards(bad)
        assert e.value.field == "shards" and e.value.hint
    with pytest.raises(BadInputError, match="score runs on one rank"):
        parse_shards(2, step="score")
    cmd = job_command("dedup", "raw@v1", to="raw@d", options={"threshold": 0.8}, shards=(2, 1), python="py")
    assert cmd[:4] == ("py", "-m", "jupyter_starverse.data._job", "dedup")
    assert json.loads(cmd[cmd.index("--options") + 1]) == {"threshold": 0.8}
    with pytest.raises(BadInputError, match="scan writes no version"):
        job_command("scan", "raw@v1", to="raw@x")
    with pytest.raises(BadInputError, match="where should the clean output go"):
        job_command("clean", "raw@v1", to=None)


def test_one_rank_runs_the_step_and_publishes_the_version(
    client: Starverse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "raw"
    src.mkdir()
    rows = ["the same line of text for the dedup job"] * 3 + ["a different line entirely, kept"]
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    client.catalog.add_dataset("raw", str(src), version="v1")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(run_dir))
    monkeypatch.setenv("STARVERSE_JOB_ID", "job-1")
    cmd = job_command("dedup", "raw@v1", to="raw@deduped", shards=(1, 1))
    assert main(cmd[3:]) == 0
    report = json.loads((run_dir / REPORT).read_text())
    assert report["output"] == "raw@deduped" and (report["docs_in"], report["docs_out"]) == (4, 2)
    text = (client.catalog.mount("raw@deduped") / "data.jsonl").read_text()
    assert text.count("the same line") == 1 and "kept" in text
    assert "-> raw@deduped" in capsys.readouterr().out
    # the step's own error, in words, and a failed exit (nothing overwritten)
    assert main(cmd[3:]) == 1
    assert "already exists" in capsys.readouterr().err


def test_data_step_backend_submits_the_step_as_one_job_that_runs(
    client: Starverse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``starverse data dedup SRC --backend slurm --shards 2x1``: one job through client.data_job, whose
    command (run here as its one rank) publishes the version the CLI named."""
    import time

    from jupyter_starverse.cli import main as cli
    from jupyter_starverse.jobmodel import Job, JobSpec, JobState

    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in ["same words here"] * 2 + ["x y"]))
    client.catalog.add_dataset("raw", str(src), version="v1")
    submitted: list[tuple[JobSpec, object]] = []

    def launch(self: Starverse, spec: JobSpec, *, backend: object = None, **kw: object) -> Job:
        submitted.append((spec, backend))
        return Job("data-dedup-raw-1", str(backend), spec, JobState.PENDING, str(tmp_path / "run"), time.time())

    monkeypatch.setattr(Starverse, "launch", launch)
    argv = ["data", "dedup", "raw@v1", "--backend", "slurm", "--shards", "2x1", "--no-paragraph", "--json"]
    assert cli(argv) == 0
    ((spec, backend),) = submitted
    assert backend == "slurm" and (spec.nodes, spec.procs_per_node) == (2, 1) and spec.accelerator == "cpu"
    assert json.loads(capsys.readouterr().out)["id"] == "data-dedup-raw-1"
    cmd = list(spec.command or ())
    assert cmd[cmd.index("--to") + 1] == "raw@v1-dedup"  # what the step in-process would write
    assert json.loads(cmd[cmd.index("--options") + 1])["paragraph_share"] is None  # --no-paragraph reaches it
    with pytest.raises(BadInputError, match="score runs on one rank"):
        client.data_job("score", "raw@v1", shards=(2, 1), backend="slurm")
    # the job's command, as its one rank here
    (tmp_path / "run").mkdir()
    monkeypatch.setenv("STARVERSE_EXPERIMENT_DIR", str(tmp_path / "run"))
    cmd[cmd.index("--shards") + 1] = "1x1"
    assert main(cmd[3:]) == 0
    assert (client.catalog.mount("raw@v1-dedup") / "data.jsonl").read_text().count("same words") == 1
    from jupyter_starverse.errors import ConflictError

    with pytest.raises(ConflictError):  # refused before submitting: the version exists now
        client.data_job("dedup", "raw@v1", backend="slurm")


async def test_rest_data_steps_with_a_backend_submit_the_same_job(
    jp_fetch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST data/steps with ``backend``: client.data_job, answered 202 with the job."""
    import time

    from jupyter_starverse.jobmodel import Job, JobSpec, JobState

    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.jsonl").write_text('{"text": "hello"}\n')
    Starverse().catalog.add_dataset("raw", str(src), version="v1")
    submitted: list[tuple[JobSpec, object]] = []

    def launch(self: Starverse, spec: JobSpec, *, backend: object = None, **kw: object) -> Job:
        submitted.append((spec, backend))
        return Job("data-clean-raw-1", str(backend), spec, JobState.PENDING, str(tmp_path), time.time())

    monkeypatch.setattr(Starverse, "launch", launch)
    body = {"step": "clean", "source": "raw@v1", "to": "raw@masked", "backend": "kubernetes",
            "options": {"shards": [2, 1], "actions": {"person": "placeholder"}}}  # fmt: skip
    r = await jp_fetch("jupyter-starverse", "data", "steps", method="POST", body=json.dumps(body))
    assert r.code == 202 and json.loads(r.body)["id"] == "data-clean-raw-1"
    ((spec, backend),) = submitted
    cmd = list(spec.command or ())
    assert backend == "kubernetes" and spec.nodes == 2 and cmd[0] == "python"  # the image's interpreter
    assert cmd[cmd.index("--to") + 1] == "raw@masked"
    assert json.loads(cmd[cmd.index("--options") + 1]) == {"actions": {"person": "placeholder"}}


def test_rest_shards_are_parsed_by_the_core_as_the_cli_takes_them() -> None:
    """The panel sends shards as typed (``4``, ``"2x2"``); the server parses them with ``data.parse_shards``."""
    from jupyter_starverse.server._data import _options

    assert _options("dedup", {"shards": "2x2"}) == {"shards": (2, 2)}
    assert _options("clean", {"shards": 3}) == {"shards": (3, 1)}
    assert _options("scan", {"shards": [2, 1]}) == {"shards": (2, 1)}
    with pytest.raises(BadInputError, match="is not N or NxP") as e:
        _options("dedup", {"shards": "2x2x2"})
    assert e.value.field == "shards" and e.value.hint
    with pytest.raises(BadInputError, match="score has no option 'shards'"):
        _options("score", {"shards": "2"})
    # the CLI's --shards reads them with the same parser
    import argparse

    from jupyter_starverse.cli._data import _shards

    assert _shards("2x2") == (2, 2)
    with pytest.raises(argparse.ArgumentTypeError, match="is not N or NxP"):
        _shards("2x2x2")
