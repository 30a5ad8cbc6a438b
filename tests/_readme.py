"""README's "Use it" notebook cells, run as written in a real kernel (no pytest needed).

Used by ``tests/test_readme.py`` (the dev venv, a fresh store) and by
``benchmarks/bench_readme.py`` (the venv README's first command made in a fresh clone)::

    python -m tests._readme WORKDIR      # runs the cells in WORKDIR, prints each cell's time

Around the cells this provides only what a user's machine would: the folder ``./corpus`` the
first cell adds, and the Hugging Face repos it pulls (``org/model``, the dataset ``org/corpus``),
served by the loopback Hub stand-in through ``HF_ENDPOINT`` (huggingface_hub's own setting).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from tests.catalog.servers import Blob, HubServer

ROOT = Path(__file__).resolve().parents[1]

#: The cell the test adds after the README's: wait for the job the ``%%sv train`` cell returned.
WAIT_CELL = (
    "job = _\n"
    "job.wait(timeout=600)\n"
    "assert job.state.value == 'succeeded', job.job.reason\n"
    "print('steps', job.progress().step)"
)


def use_it_cells(readme: str) -> list[str]:
    """The ```python blocks of README's "## Use it" section before its first "###" subsection."""
    section = re.search(r"^## Use it\n(.*?)(?=^##)", readme, re.S | re.M)
    if not section:
        raise AssertionError("README has no '## Use it' section followed by another heading")
    cells = re.findall(r"^```python\n(.*?)^```", section.group(1), re.S | re.M)
    if not cells:
        raise AssertionError("README's 'Use it' section has no python cells")
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


def make_corpus(folder: Path) -> None:
    """The folder the first cell adds as ``corpus`` (what a user has before they follow the README)."""
    folder.mkdir()
    (folder / "train.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 50)


def run_cells(work: Path, readme: Path = ROOT / "README.md") -> Any:
    """Run the README's cells (then ``WAIT_CELL``) in a kernel whose working folder is ``work``.

    The environment (HF_ENDPOINT, STARVERSE_HOME) is the caller's; returns the executed notebook.
    Raises nbclient's CellExecutionError naming the README cell that failed, with its traceback.
    """
    import nbformat
    from nbclient import NotebookClient

    cells = use_it_cells(readme.read_text())
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [*cells, WAIT_CELL]])
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}})
    client.execute()
    return nb


def cell_text(cell: Any) -> str:
    """What a cell printed or returned (text/plain)."""
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif "data" in o:
            parts.append(o["data"].get("text/plain", ""))
    return "".join(parts)


def cell_seconds(cell: Any) -> float | None:
    """How long the kernel ran ``cell`` (nbclient's timing metadata)."""
    from datetime import datetime

    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def main(argv: list[str]) -> None:
    work = Path(argv[0]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    make_corpus(work / "corpus")
    hub = HubServer()
    hub.start()
    serve_use_it_repos(hub)
    os.environ["HF_ENDPOINT"] = hub.url
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ.setdefault("STARVERSE_HOME", str(work / "sv-home"))  # a fresh store
    start = time.perf_counter()
    try:
        nb = run_cells(work)
    finally:
        hub.stop()
    for i, cell in enumerate(nb.cells):
        first = cell.source.splitlines()[0][:60]
        print(f"cell {i} {cell_seconds(cell) or 0:6.1f} s  {first}")
    print(f"all cells with the kernel's start {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
