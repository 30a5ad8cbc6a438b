"""``starverse launch --dry-run`` and ``starverse jobs`` on the local backend (no job started)."""

from __future__ import annotations

import json

import pytest
import yaml

from jupyter_starverse.cli import main as cli_main


def test_launch_dry_run_prints_every_node_as_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["launch", "--nodes", "2", "--procs", "2", "--steps", "5", "--dry-run"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert [n["index"] for n in data["nodes"]] == [0, 1]
    assert "--nproc-per-node=2" in data["nodes"][0]["argv"]


def test_launch_dry_run_json_with_resume_shows_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["launch", "--nodes", "1", "--procs", "3", "--resume", "--dry-run", "-o", "json", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["resume"]["new_world_size"] == 3 and out["resume"]["checkpoint"] is None
    assert json.loads(out["rendered"])["resume"]["start_step"] == 0
    assert cli_main(["launch", "--procs", "2", "--gpus-per-node", "4", "--dry-run"]) == 2
    assert "disagree" in capsys.readouterr().err


def test_launch_previews_tensor_parallel_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["launch", "--template", "tp", "--procs", "4", "--tp", "2", "--dry-run"]) == 0
    assert "STARVERSE_TENSOR_PARALLEL" in capsys.readouterr().out
    assert cli_main(["launch", "--template", "pp", "--procs", "1", "--pp", "2", "--dry-run"]) == 2
    assert "does not divide the world size 1" in capsys.readouterr().err


def test_jobs_with_no_jobs_and_unknown_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["jobs", "ls"]) == 0
    assert "no jobs" in capsys.readouterr().out
    assert cli_main(["jobs", "ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli_main(["jobs", "show", "nope-1"]) == 3
    assert "no job 'nope-1'" in capsys.readouterr().err
    assert cli_main(["jobs", "cancel", "../x"]) == 2
