"""README's "Use it" notebook cells run as written, top to bottom, in a real kernel.

The cells are read from README.md (the python blocks of "## Use it" before its first
subsection), so an edit to the README is what is tested. Around them the test provides only what
a user's machine would: the folder ``./corpus`` the first cell adds, and the Hugging Face repos it
pulls (``org/model``, the dataset ``org/corpus``), served by the loopback Hub stand-in through
``HF_ENDPOINT``. The cells run in a fresh store (their own STARVERSE_HOME); afterwards the test
looks at what they did: the pulls landed (only ``data/en/*`` of the dataset), the cost is the one
the comment shows, and the training job the ``%%sv train`` cell started succeeded with its steps.

``benchmarks/bench_readme.py --use-it`` runs the same cells in a fresh clone's venv after README's
first command (the install this test cannot afford in CI).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.catalog.servers import Blob, HubServer

ROOT = Path(__file__).resolve().parents[1]


def use_it_cells(readme: str) -> list[str]:
    """The ```python blocks of README's "## Use it" section before its first "###" subsection."""
    section = re.search(r"^## Use it\n(.*?)(?=^##)", readme, re.S | re.M)
    assert section, "README has no '## Use it' section followed by another heading"
    cells = re.findall(r"^```python\n(.*?)^```", section.group(1), re.S | re.M)
    assert cells, "README's 'Use it' section has no python cells"
    return cells


def serve_use_it_repos(hub: HubServer) -> None:
    """The Hub repos the cells pull: ``org/model@main`` and the dataset ``org/corpus``."""
    hub.add_repo(
        "org/model",
        {"config.json": Blob(b'{"model_type": "llama"}'), "model.safetensors": Blob(size=4096, seed=1)},
    )
    hub.add_repo(
        "org/corpus",
        {
            "data/en/part-0.jsonl": Blob(b'{"text": "hello"}\n'),
            "data/fr/part-0.jsonl": Blob(b'{"text": "bonjour"}\n'),
            "README.md": Blob(b"# corpus\n"),
        },
        repo_type="dataset",
    )


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    server = HubServer()
    server.start()
    serve_use_it_repos(server)
    monkeypatch.setenv("HF_ENDPOINT", server.url)  # the project's Hub setting (huggingface_hub's own)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield server
    server.stop()


def test_use_it_cells_are_found() -> None:
    cells = use_it_cells((ROOT / "README.md").read_text())
    assert cells[0].startswith("%load_ext jupyter_starverse")
    assert any(cell.startswith("%%sv train") for cell in cells)


def make_corpus(folder: Path) -> None:
    """The folder the first cell adds as ``corpus`` (what a user has before they follow the README)."""
    folder.mkdir()
    (folder / "train.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 50)


@pytest.mark.slow
def test_use_it_cells_run_as_written(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    from jupyter_starverse._settings import Settings
    from jupyter_starverse.client import Starverse

    work = tmp_path / "work"
    work.mkdir()
    make_corpus(work / "corpus")
    repo = str(ROOT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p))
    cells = use_it_cells((ROOT / "README.md").read_text())
    # the README's cells, then one cell of the test's own: wait for the job the train cell returned
    wait = (
        "job = _\n"
        "job.wait(timeout=600)\n"
        "assert job.state.value == 'succeeded', job.job.reason\n"
        "print('steps', job.progress().step)"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [*cells, wait]])
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}})
    client.execute()  # raises CellExecutionError naming the README cell that failed and its traceback

    for i, cell in enumerate(nb.cells):  # where the time went (pytest -s)
        timing = cell.metadata.get("execution", {})
        start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        print(f"cell {i}: {start} -> {end}")
    text = {i: _text(cell) for i, cell in enumerate(nb.cells)}
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert "230.40" in text[0], text[0]  # the cost the comment promises
    assert "steps 199" in text[len(cells)], text[len(cells)]  # steps 0..199: the cell's --steps 200

    client_ = Starverse(Settings.from_env())
    for ref in ("corpus", "hf:org/model@main", "hf:datasets/org/corpus"):
        assert client_.catalog.status(ref).state == "cached", ref
    pulled = client_.catalog.mount("hf:datasets/org/corpus")
    files = sorted(str(p.relative_to(pulled)) for p in pulled.rglob("*.jsonl"))
    assert files == ["data/en/part-0.jsonl"], files  # --allow 'data/en/*' pulled the subset only
    (job,) = client_.jobs()
    assert job.state.value == "succeeded"


def _text(cell: object) -> str:
    parts = []
    for o in cell.get("outputs", []):  # type: ignore[attr-defined]
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif "data" in o:
            parts.append(o["data"].get("text/plain", ""))
    return "".join(parts)
