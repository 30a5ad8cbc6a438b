"""`launch -o sbatch` prints a script that `sbatch FILE` runs as printed, on the real test cluster."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from jupyter_starverse.backends.slurm import SlurmBackend
from jupyter_starverse.backends.slurm._commands import submit_env
from jupyter_starverse.experiments import read_metrics
from jupyter_starverse.jobmodel import JobSpec

from ._cluster import APT_HINT, SlurmCluster, missing_programs
from ._jobs import TINY, wait_for

if missing_programs():
    pytest.skip(
        f"Slurm is not installed here (no {', '.join(missing_programs())}): {APT_HINT}", allow_module_level=True
    )


def _state(cluster: SlurmCluster, sid: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", sid, check=False).stdout
    found = re.search(r"JobState=(\S+)", out)
    return found.group(1) if found else "UNKNOWN"


def test_the_printed_script_runs_with_sbatch_as_printed(
    slurm: SlurmBackend, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    spec = JobSpec(name="printed", code=TINY, nodes=1, steps=3, checkpoint_every=2)
    text = slurm.render(spec, output="sbatch")
    assert "<job-id>" not in text
    flags = [line.split()[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert "--output=starverse-%x-%j.log" in flags and not any(f.startswith("--chdir") for f in flags)
    assert "--cpus-per-task=1" in flags  # one core per rank
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    done = subprocess.run(  # sbatch by hand, from another folder: no starverse between it and Slurm
        ["sbatch", "--parsable", str(script)], cwd=tmp_path, env=submit_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    sid = done.stdout.strip().split(";")[0]
    # (not `sbatch --wait`: it polls at 2, 4, 8, ... 32 s)
    wait_for(lambda: _state(slurm_cluster, sid) not in ("PENDING", "RUNNING", "COMPLETING"), timeout=120,
             why=f"Slurm job {sid} to end")  # fmt: skip
    run = Path(slurm.settings.experiments) / "printed" / "runs" / f"printed-slurm{sid}"
    batch = (run / "logs" / "batch.log").read_text() if (run / "logs" / "batch.log").exists() else ""
    assert _state(slurm_cluster, sid) == "COMPLETED", (batch, list(tmp_path.iterdir()))
    assert re.search(rf"Slurm job {sid}, try 1", batch), batch
    exit_record = json.loads((run / "slurm-exit.json").read_text())
    assert exit_record["exit_code"] == 0
    assert read_metrics(run, from_logs=False)[-1].step == 2
    assert (run / "checkpoints" / "step-00000002").is_dir() and (run / "train.py").read_text() == TINY
