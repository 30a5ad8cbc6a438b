"""A tiny Llama published through the loopback Hub and pulled into the store, and small datasets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_starverse.client import Starverse
from tests._tiny import CORPUS, build_tiny_llama, publish
from tests.catalog.conftest import hub as hub  # the loopback Hub fixture

MODEL = "hf:tiny/llama"


def write_lines(folder: Path, name: str, records: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return folder


def chat_records(n: int = 8) -> list[dict[str, object]]:
    answers = ["two nodes with eight cards each.", "checkpoints every ten steps.", "训练一个大模型需要很多显卡。"]
    return [
        {
            "messages": [
                {"role": "user", "content": f"question {i}: how do we train?"},
                {"role": "assistant", "content": answers[i % len(answers)]},
            ]
        }
        for i in range(n)
    ]


def pair_records(n: int = 8) -> list[dict[str, object]]:
    return [
        {
            "prompt": f"question {i}: what do we train?" if i % 2 else [{"role": "user", "content": f"what {i}?"}],
            "chosen": "large models on rented GPUs.",
            "rejected": "nothing at all, sorry.",
        }
        for i in range(n)
    ]


def unpaired_records(n: int = 8) -> list[dict[str, object]]:
    return [
        {
            "prompt": f"question {i}: what do we train?",
            "completion": "large models on rented GPUs." if i % 2 else "nothing at all, sorry.",
            "label": bool(i % 2),
        }
        for i in range(n)
    ]


@pytest.fixture
def store(client: Starverse, hub: object, tmp_path: Path) -> Iterator[Starverse]:
    """The facade with ``hf:tiny/llama`` pulled through the real ``hf:`` path and four datasets."""
    build_tiny_llama(tmp_path / "tiny")
    publish(hub, "tiny/llama", tmp_path / "tiny")
    client.catalog.pull(MODEL)
    text = tmp_path / "data" / "corpus"
    text.mkdir(parents=True)
    (text / "a.txt").write_text("\n".join(CORPUS * 3), encoding="utf-8")
    datasets = {
        "corpus": text,
        "chat": write_lines(tmp_path / "data" / "chat", "chat.jsonl", chat_records()),
        "pairs": write_lines(tmp_path / "data" / "pairs", "pairs.jsonl", pair_records()),
        "unpaired": write_lines(tmp_path / "data" / "unpaired", "unpaired.jsonl", unpaired_records()),
    }
    for name, folder in datasets.items():
        client.catalog.add_dataset(name, str(folder), version="v1")
        client.catalog.pull(f"{name}@v1")
    yield client
