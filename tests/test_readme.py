"""README's "Use it" notebook cells run as written, top to bottom, in a real kernel.

The cells are read from README.md (the python blocks of "## Use it" before its first
subsection), so an edit to the README is what is tested (``tests/_readme.py``). The cells run in a
fresh store; the folder ``./corpus`` they add is made by the test, the ``hf:`` repos they pull are
served by the loopback Hub stand-in through ``HF_ENDPOINT``. Afterwards the test looks at what
they did: the pulls landed (only ``data/en/*`` of the dataset), the cost is the one the comment
shows, the training job the ``%%sv train`` cell started succeeded with its 200 steps.

``benchmarks/bench_readme.py`` runs the same cells in a fresh clone's venv after README's first
command (the install this test cannot afford in CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._readme import ROOT, cell_seconds, cell_text, make_corpus, run_cells, serve_use_it_repos, use_it_cells
from tests.catalog.servers import HubServer


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    server = HubServer()
    server.start()
    serve_use_it_repos(server)
    monkeypatch.setenv("HF_ENDPOINT", server.url)  # the Hub setting (huggingface_hub's own)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield server
    server.stop()


def test_use_it_cells_are_found() -> None:
    cells = use_it_cells((ROOT / "README.md").read_text())
    assert cells[0].startswith("%load_ext jupyter_starverse")
    assert any(cell.startswith("%%sv train") for cell in cells)


@pytest.mark.slow
def test_use_it_cells_run_as_written(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse

    work = tmp_path / "work"
    work.mkdir()
    make_corpus(work / "corpus")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    nb = run_cells(work)  # raises CellExecutionError naming the README cell that failed

    for i, cell in enumerate(nb.cells):  # where the time went (pytest -s)
        print(f"cell {i}: {cell_seconds(cell)} s")
    text = [cell_text(cell) for cell in nb.cells]
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert "230.40" in text[0], text[0]  # the cost the comment promises
    assert "steps 199" in text[-1], text[-1]  # steps 0..199: the cell's --steps 200

    client = Starverse(Settings.from_env())
    for ref in ("corpus", "hf:org/model@main", "hf:datasets/org/corpus"):
        assert client.catalog.status(ref).state == "cached", ref
    pulled = client.catalog.mount("hf:datasets/org/corpus")
    files = sorted(str(p.relative_to(pulled)) for p in pulled.rglob("*.jsonl"))
    assert files == ["data/en/part-0.jsonl"], files  # --allow 'data/en/*' pulled the subset only
    (job,) = client.jobs()
    assert job.state.value == "succeeded"
    assert "corpus" in str(job.spec.mounts)
