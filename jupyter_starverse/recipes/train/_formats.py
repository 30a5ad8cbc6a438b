"""The recipes' data formats: records, their JSON Lines reader and writer (standard library only).

- pairs (DPO, reward model): ``{"prompt", "chosen", "rejected"}``
- unpaired (KTO, thumbs up/down): ``{"prompt", "completion", "label": true|false}``
- chat (SFT): ``{"messages": [{"role", "content"}, ...]}`` or ``{"prompt", "response"}``
- text (continued pretraining): ``*.txt`` files, or ``{"text"}`` lines

``prompt`` is a string (one user turn) or a list of chat messages ending before the answer;
``chosen``/``rejected``/``completion`` are the assistant's answer as a string. Imported inside
training jobs, so it depends on nothing but the standard library and ``errors``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse.errors import BadInputError

__all__ = [
    "ChatMessage",
    "LabeledCompletion",
    "PreferencePair",
    "Prompt",
    "data_files",
    "read_records",
    "write_jsonl",
]

_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str

    def to_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


Prompt = str | tuple[ChatMessage, ...]


def _where(source: str, line: int) -> str:
    return f"{source}, line {line}"


def _text(data: dict[str, Any], key: str, where: str, example: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadInputError(f"{where}: {key!r} must be non-empty text", field=key, hint=f"each line is {example}")
    return value


def parse_prompt(value: object, where: str, example: str) -> Prompt:
    """A prompt: a string, or a list of ``{"role", "content"}`` messages."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value:
        return tuple(parse_message(m, where) for m in value)
    raise BadInputError(
        f"{where}: 'prompt' must be text or a non-empty list of chat messages",
        field="prompt",
        hint=f'each line is {example}; a chat prompt is [{{"role": "user", "content": "..."}}]',
    )


def parse_message(value: object, where: str) -> ChatMessage:
    if not isinstance(value, dict) or value.get("role") not in _ROLES or not isinstance(value.get("content"), str):
        raise BadInputError(
            f"{where}: a chat message must be {{'role': system|user|assistant, 'content': text}}, got {value!r:.80}",
            field="messages",
        )
    return ChatMessage(value["role"], value["content"])


def _prompt_json(prompt: Prompt) -> str | list[dict[str, str]]:
    return prompt if isinstance(prompt, str) else [m.to_json() for m in prompt]


@dataclass(frozen=True)
class PreferencePair:
    """One DPO / reward-model record: the same prompt, a preferred and a rejected answer."""

    prompt: Prompt
    chosen: str
    rejected: str

    EXAMPLE = '{"prompt": "...", "chosen": "...", "rejected": "..."}'

    def to_json(self) -> dict[str, Any]:
        return {"prompt": _prompt_json(self.prompt), "chosen": self.chosen, "rejected": self.rejected}

    @classmethod
    def from_json(cls, data: object, where: str = "record") -> PreferencePair:
        if not isinstance(data, dict):
            raise BadInputError(f"{where}: expected a JSON object", hint=f"each line is {cls.EXAMPLE}")
        return cls(
            parse_prompt(data.get("prompt"), where, cls.EXAMPLE),
            _text(data, "chosen", where, cls.EXAMPLE),
            _text(data, "rejected", where, cls.EXAMPLE),
        )


@dataclass(frozen=True)
class LabeledCompletion:
    """One KTO record: an answer to a prompt with a thumbs up (``True``) or down (``False``)."""

    prompt: Prompt
    completion: str
    label: bool

    EXAMPLE = '{"prompt": "...", "completion": "...", "label": true}'

    def to_json(self) -> dict[str, Any]:
        return {"prompt": _prompt_json(self.prompt), "completion": self.completion, "label": self.label}

    @classmethod
    def from_json(cls, data: object, where: str = "record") -> LabeledCompletion:
        if not isinstance(data, dict):
            raise BadInputError(f"{where}: expected a JSON object", hint=f"each line is {cls.EXAMPLE}")
        label = data.get("label")
        if not isinstance(label, bool):
            raise BadInputError(
                f"{where}: 'label' must be true or false, got {label!r:.40}",
                field="label",
                hint=f"each line is {cls.EXAMPLE}",
            )
        return cls(
            parse_prompt(data.get("prompt"), where, cls.EXAMPLE), _text(data, "completion", where, cls.EXAMPLE), label
        )


def data_files(folder: Path, suffixes: Sequence[str] = (".jsonl",)) -> list[Path]:
    """Every file of ``folder`` (recursively) with one of ``suffixes``, in a stable order."""
    folder = Path(folder)
    if folder.is_file():
        return [folder]
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in suffixes and not p.name.startswith("."))


def iter_jsonl(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, object)`` for every non-empty line of every ``*.jsonl`` file of ``folder``."""
    files = data_files(folder)
    if not files:
        raise BadInputError(
            f"no *.jsonl files in {Path(folder).name!r}",
            field="data",
            hint="put the records in files ending in .jsonl, one JSON object per line",
        )
    for path in files:
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = _where(path.name, n)
                try:
                    yield where, json.loads(line)
                except ValueError as e:
                    raise BadInputError(
                        f"{where}: not JSON ({e})", field="data", hint="one JSON object per line"
                    ) from None


def read_records(folder: Path, kind: type[PreferencePair] | type[LabeledCompletion]) -> list[Any]:
    """Every record of ``folder``'s ``*.jsonl`` files, validated as ``kind`` (errors name file and line)."""
    return [kind.from_json(obj, where) for where, obj in iter_jsonl(folder)]


def write_jsonl(path: str | os.PathLike[str], records: Iterable[PreferencePair | LabeledCompletion]) -> Path:
    """Write ``records`` as JSON Lines to ``path`` (temp file + rename: never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
