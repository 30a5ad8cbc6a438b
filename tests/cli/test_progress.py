"""Long commands say what happens from the first second; Ctrl-C names the job and how to cancel it."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_starverse.cli import main as cli_main
from jupyter_starverse.cli._common import StatusLine, interrupted_text, tracking

REPO = str(Path(__file__).resolve().parents[2])


def test_status_line_is_one_line_per_change_off_a_terminal_and_a_spinner_on_one() -> None:
    out = io.StringIO()
    line = StatusLine(out, tty=False)
    line.update("starting 2 nodes")
    line.update("starting 2 nodes")
    line.update("waiting for rendezvous (1/4 ranks up)")
    line.close("done")
    assert out.getvalue().splitlines() == ["... starting 2 nodes", "... waiting for rendezvous (1/4 ranks up)", "done"]

    tty = io.StringIO()
    spinner = StatusLine(tty, tty=True, every=0.05)
    spinner.update("smoke test")
    time.sleep(0.2)
    spinner.close()
    text = tty.getvalue()
    assert text.count("\r") >= 3 and "smoke test (0s)" in text  # redrawn in place, with the seconds
    assert text.endswith("\r") and "\n" not in text  # and cleared at the end


def test_interrupt_names_the_followed_job_with_the_exact_commands() -> None:
    with pytest.raises(KeyboardInterrupt), tracking("big-run-20261201-000000-abcd", "kubernetes"):
        raise KeyboardInterrupt
    text = interrupted_text()
    assert "job big-run-20261201-000000-abcd keeps running" in text
    assert "starverse jobs cancel big-run-20261201-000000-abcd --backend kubernetes" in text
    assert "starverse jobs logs -f big-run-20261201-000000-abcd --backend kubernetes" in text
    assert interrupted_text() == "interrupted"  # said once
    with tracking("done-1"):
        pass
    assert interrupted_text() == "interrupted"  # a job no longer followed is not named


@pytest.mark.slow
def test_ctrl_c_in_the_demo_prints_the_job_id_and_the_cancel_command(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_starverse.cli", "demo", "--nodes", "1", "--procs", "2", "--steps", "400"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a test run started in the background (`cmd &`) ignores SIGINT, and so would the demo:
        # give it a terminal's default Ctrl-C handling
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stdout is not None
    lines = [proc.stdout.readline()]
    assert lines[0].startswith("creating the demo dataset")  # the first thing it says, before any work
    job_id = None
    while job_id is None:
        line = proc.stdout.readline()
        assert line, "the demo ended before it submitted its job"
        lines.append(line)
        if line.startswith("job "):
            job_id = line.split()[1].rstrip(":")
    lines.append(proc.stdout.readline())  # the first start-up phase, said while the nodes start
    assert any(p in lines[-1] for p in ("starting", "rendezvous", "process group", "training", "step ")), lines
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    try:
        assert proc.returncode == 130
        assert f"demo job {job_id} keeps running" in err
        assert f"starverse jobs cancel {job_id}" in err and f"starverse jobs logs -f {job_id}" in err
    finally:
        assert cli_main(["jobs", "cancel", job_id]) == 0
