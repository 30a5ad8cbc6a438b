"""Issue 28 on the test Slurm cluster: a package installed in the notebook reaches every rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jupyter_starverse.backends.slurm import SlurmBackend
from jupyter_starverse.client import Starverse
from jupyter_starverse.envs import JobEnvs
from jupyter_starverse.jobmodel import JobSpec, JobState
from tests.envs._wheels import install_in_notebook, write_wheel

SCRIPT = """
import json, os, pathlib, svpkg_slurm
out = pathlib.Path(os.environ["STARVERSE_EXPERIMENT_DIR"]) / f"seen{os.environ['RANK']}.json"
out.write_text(json.dumps({"value": svpkg_slurm.VALUE, "cwd": os.getcwd(), "data": open("data.txt").read()}))
"""


def test_notebook_package_reaches_every_slurm_rank(slurm: SlurmBackend, tmp_path: Path) -> None:
    site = tmp_path / "kernel-site"
    install_in_notebook(site, write_wheel(tmp_path / "wheels", "svpkg_slurm", "2.0"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    (project / "data.txt").write_text("packed")
    client = Starverse(slurm.settings)
    client.__dict__["envs"] = JobEnvs(slurm.settings, kernel_path=[*sys.path, str(site)])
    spec = JobSpec(name="envs", script=str(project / "train.py"), nodes=2, env_from="notebook", workdir=str(project))
    job = client.launch(spec, backend=slurm)
    job = slurm.wait(job.id, timeout=120)
    assert job.state is JobState.SUCCEEDED, job.reason
    seen = [json.loads((Path(job.experiment_dir) / f"seen{r}.json").read_text()) for r in range(2)]
    assert [s["value"] for s in seen] == ["svpkg_slurm-2.0"] * 2 and {s["data"] for s in seen} == {"packed"}
    assert (
        job.spec.env_id and f"envs/{job.spec.env_id}/env.json" in (Path(job.experiment_dir) / "job.sbatch").read_text()
    )
