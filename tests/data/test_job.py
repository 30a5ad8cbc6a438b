"""A data step as a job (``python -m jupyter_starverse.data._job``): its command, and one rank's run.

One rank in-process here (no process group); two ranks on the test Slurm cluster in
tests/slurm/test_pipeline_export.py.
"""

from __future__ import annotations

import json
from pathlib import Path

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
