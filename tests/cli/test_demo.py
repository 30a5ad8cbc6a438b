"""``starverse demo``: dataset into the store, 2 nodes x 2 processes, the loss falls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_starverse._procs import job_processes
from jupyter_starverse.cli import main as cli_main

pytestmark = pytest.mark.slow


def test_demo_trains_and_prints_the_loss_falling(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["demo", "--steps", "24"]) == 0
    out = capsys.readouterr().out
    assert "dataset demo-text" in out and "2 nodes x 2 processes" in out
    said = out.splitlines()
    assert said[0] == "creating the demo dataset demo-text in the store"  # before any work
    first_step = next(i for i, line in enumerate(said) if line.startswith("step "))
    assert said[first_step].startswith("step 1/24")  # steps counted as everywhere else
    # while the nodes start, it says so (the ~10 s before the first step are not silent)
    assert any("starting" in line or "rendezvous" in line for line in said[:first_step]), said[:first_step]
    last = out.strip().splitlines()
    assert last[-2].startswith("loss ") and last[-1].startswith("experiment folder: ")
    first_loss, final_loss = (float(x) for x in last[-2].split()[1:4:2])
    assert final_loss < first_loss
    run = Path(last[-1].split(": ", 1)[1])
    assert (run / "metrics.jsonl").is_file() and (run / "logs" / "rank3.log").is_file()
    assert json.loads((run / "spec.json").read_text())["mounts"] == ["demo-text"]
    assert not job_processes(run.name)

    assert cli_main(["jobs", "ls"]) == 0
    assert run.name in capsys.readouterr().out
    assert cli_main(["jobs", "show", run.name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "succeeded" and shown["progress"]["step"] == 23 and shown["checkpoint_step"] == 23
    assert cli_main(["jobs", "logs", run.name, "--rank", "0"]) == 0
    assert "[0] step 0 loss" in capsys.readouterr().out
