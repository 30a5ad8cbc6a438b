"""What a job writes into its run folder takes the folder's modes whatever the umask (issue 34's leftovers).

metrics.jsonl, ranks/rankN.jsonl, the TensorBoard folder and DeepSpeed's ds_config.json: 0700/0600 in
a private run folder, 2770/0640 in a group's, under umask 002 (group work) and 077 alike.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyter_starverse.backends.templates import write_framework_files
from jupyter_starverse.jobmodel import JobSpec
from tests._users import ROOT

CASES = [(0o002, 0o700, 0o700, 0o600), (0o077, 0o700, 0o700, 0o600), (0o002, 0o2770, 0o2770, 0o640),
         (0o077, 0o2770, 0o2770, 0o640)]  # fmt: skip


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode) | (path.stat().st_mode & stat.S_ISGID)


def _run_folder(tmp_path: Path, mode: int) -> Path:
    run = tmp_path / "exp" / "runs" / "r1"
    run.mkdir(parents=True)
    run.chmod(mode)
    return run


def _log(run: Path, rank: int, umask: int) -> None:
    code = textwrap.dedent(f"""
        import os; os.umask({umask:#o})
        from jupyter_starverse.runtime import close_metrics, log_metrics
        log_metrics(1, loss=1.0)
        close_metrics()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARVERSE_")}
    env.update({"STARVERSE_EXPERIMENT_DIR": str(run), "RANK": str(rank), "WORLD_SIZE": "2", "PYTHONPATH": str(ROOT)})
    env.update({"TENSORBOARD_LOGDIR": str(run / "tensorboard"), "STARVERSE_WANDB": "off"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(("umask", "run_mode", "folder", "file"), CASES)
def test_metrics_rank_records_and_tensorboard_take_the_run_folders_modes(
    tmp_path: Path, umask: int, run_mode: int, folder: int, file: int
) -> None:
    run = _run_folder(tmp_path, run_mode)
    _log(run, 0, umask)
    _log(run, 1, umask)
    assert oct(_mode(run / "metrics.jsonl")) == oct(file)
    assert oct(_mode(run / "ranks")) == oct(folder)
    assert oct(_mode(run / "ranks" / "rank1.jsonl")) == oct(file)
    assert oct(_mode(run / "tensorboard")) == oct(folder)


def test_a_link_planted_as_a_rank_record_is_not_written_through(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, 0o700)
    (run / "ranks").mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("")
    (run / "ranks" / "rank1.jsonl").symlink_to(victim)
    with pytest.raises(AssertionError):
        _log(run, 1, 0o022)
    assert victim.read_text() == ""


@pytest.mark.parametrize(("umask", "run_mode", "folder", "file"), CASES)
def test_deepspeeds_config_takes_the_run_folders_file_mode(
    tmp_path: Path, umask: int, run_mode: int, folder: int, file: int
) -> None:
    run = _run_folder(tmp_path, run_mode)
    spec = JobSpec(name="ds", script="train.py", framework="deepspeed")
    old = os.umask(umask)
    try:
        write_framework_files(spec, run)
    finally:
        os.umask(old)
    assert oct(_mode(run / "ds_config.json")) == oct(file)
