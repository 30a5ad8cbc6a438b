"""A pipeline folder with two tiny step scripts and a pulled dataset on the test store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_starverse.client import Starverse

# Each step writes where it ran, what data it saw and when, so a test can check the order.
STEP = """\
import json, os, pathlib, time
out = pathlib.Path(os.environ["STARVERSE_EXPERIMENT_DIR"]) / f"step-{os.environ['RANK']}.json"
data = os.environ.get("DATA_PATH")
seen = sorted(p.name for p in pathlib.Path(data).iterdir()) if data else None
out.write_text(json.dumps({"start": time.time(), "data": data, "files": seen}))
print("step ran, data files:", seen, flush=True)
time.sleep(0.5)
"""
FAIL = "import sys\nprint('this step fails on purpose', flush=True)\nsys.exit(3)\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    home = tmp_path / "project"
    (home / "steps").mkdir(parents=True)
    (home / "steps" / "prep.py").write_text(STEP)
    (home / "steps" / "train.py").write_text(STEP)
    (home / "steps" / "fail.py").write_text(FAIL)
    return home


@pytest.fixture
def dataset(client: Starverse, tmp_path: Path) -> str:
    """``tiny@v1``, added from a folder and pulled, so it mounts."""
    src = tmp_path / "tiny-src"
    src.mkdir()
    (src / "train.jsonl").write_text('{"text": "hello"}\n')
    client.catalog.add_dataset("tiny", str(src), version="v1")
    client.catalog.pull("tiny@v1")
    return "tiny@v1"


def doc(*, backend: str = "local", data: str | None = None, first: str = "steps/prep.py",
        train: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """A data -> prep -> train pipeline document (the data node only when ``data`` is given)."""
    nodes: list[dict[str, Any]] = [
        {"id": "prep", "kind": "train", "params": {"script": first}, "position": {"x": 0, "y": 0}},
        {"id": "train", "kind": "train", "params": {"script": "steps/train.py", **(train or {})},
         "position": {"x": 300, "y": 0}},
    ]  # fmt: skip
    edges = [{"source": "prep", "target": "train"}]
    if data is not None:
        nodes.insert(0, {"id": "data", "kind": "dataset", "params": {"ref": data}, "position": {"x": -300, "y": 0}})
        edges.insert(0, {"source": "data", "target": "train"})
    return {"version": 1, "name": "demo", "backend": backend, "nodes": nodes, "edges": edges}


def write(folder: Path, data: dict[str, Any], name: str = "demo.svpipeline") -> Path:
    path = folder / name
    path.write_text(json.dumps(data))
    return path
