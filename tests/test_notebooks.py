"""Every notebook in notebooks/ runs top to bottom without an error (each in its own STARVERSE_HOME)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert any(p.name == "quickstart.ipynb" for p in NOTEBOOKS)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    for name in [k for k in os.environ if k.startswith("STARVERSE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("STARVERSE_HOME", str(home))
    monkeypatch.setenv("STARVERSE_MODE", "cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    repo = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError with the failing cell and its traceback
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # the jobs the notebook started are finished: nothing is left running
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse

    jobs = Starverse(Settings.from_env()).jobs()
    assert jobs, "the notebook launched no job"
    assert all(job.state.finished for job in jobs)
