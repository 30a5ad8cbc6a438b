"""``jobs show``: ranks, restarts and the cost so far, in text and in ``--json``."""

from __future__ import annotations

import json

import pytest

from jupyter_starverse._settings import Settings
from jupyter_starverse.cli import main as cli_main
from tests.widgets._jobs import quick_job, slow_job


def test_show_json_has_ranks_restarts_and_cost(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    handle = quick_job(settings)
    assert cli_main(["jobs", "show", handle.id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["restarts"] == 0
    (rank,) = shown["ranks"]
    assert rank["rank"] == 0 and rank["node"] == 0 and rank["state"] == "succeeded" and rank["last_step"] == 4
    assert rank["pid"]
    assert shown["cost"]["currency"] and shown["cost"]["text"]  # the meter's reading, as a decimal string
    assert shown["cost"]["amount"] is None or float(shown["cost"]["amount"]) >= 0

    assert cli_main(["jobs", "show", handle.id]) == 0
    text = capsys.readouterr().out
    assert "progress    step 5/5" in text  # counted as the monitor and the panel count
    assert f"cost        {shown['cost']['text']}\n" in text  # finished: no "so far"
    rank_line = next(line for line in text.splitlines() if line.strip().startswith("rank 0"))
    assert rank_line.split()[:5] == ["rank", "0", "node0", "succeeded", "step"] and "loss 0.4" in rank_line


@pytest.mark.slow
def test_show_of_a_running_job_says_the_cost_so_far(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    handle = slow_job(settings, steps=40)
    try:
        assert cli_main(["jobs", "show", handle.id]) == 0
        text = capsys.readouterr().out
        assert " so far" in text.split("cost", 1)[1].splitlines()[0]
        assert "rank 0  node0  running" in text
    finally:
        handle.cancel()
