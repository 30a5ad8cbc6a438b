"""Fixtures for evaluation tests: two tiny Llamas in the store and a small generated labelled set."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from tests.feedback.conftest import tiny_folder  # noqa: F401  (the session's tiny Llama)

LABELS = ("negative", "neutral", "positive")


@pytest.fixture(scope="session")
def tiny_models(
    tiny_folder: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, Path]:
    """The session's tiny Llama, and a copy with other weights (another "model" of the chain)."""
    import torch
    from safetensors.torch import load_file, save_file

    other = tmp_path_factory.mktemp("eval-tiny") / "b"
    shutil.copytree(tiny_folder, other)
    weights = next(other.glob("*.safetensors"))
    gen = torch.Generator().manual_seed(1)
    tensors = {k: v + 0.5 * torch.randn(v.shape, generator=gen) * v.std() for k, v in load_file(weights).items()}
    save_file(tensors, weights, metadata={"format": "pt"})
    return tiny_folder, other


def labelled_rows(n: int = 24, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    words = ["fox", "dog", "model", "data", "card", "node", "模型", "数据"]
    return [
        {"input": " ".join(rng.choice(words) for _ in range(rng.randint(2, 6))), "target": rng.choice(LABELS)}
        for _ in range(n)
    ]


def write_dataset(client: Starverse, folder: Path, rows: list[dict[str, str]], name: str = "reviews") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    entry = client.catalog.add_dataset(name, str(folder), version="1")
    return entry.ref


@pytest.fixture
def store(client: Starverse, tiny_models: tuple[Path, Path], tmp_path: Path) -> dict[str, str]:
    a, b = tiny_models
    client.catalog.import_model(a, repo="team/tiny@sft")
    client.catalog.import_model(b, repo="team/tiny@base")
    data = write_dataset(client, tmp_path / "reviews", labelled_rows())
    return {"model": "hf:team/tiny@sft", "base": "hf:team/tiny@base", "data": data}
