"""Training data from feedback: preference pairs (DPO) and unpaired labels (KTO).

The two formats the alignment recipes take, one JSON object per line:

- pairs: ``{"prompt", "chosen", "rejected"}``: a better answer beats the answer it replaces;
  for one prompt, every answer with more thumbs up than down beats every answer with more
  down than up.
- labels: ``{"prompt", "completion", "label"}``: each judged answer with its net verdict
  (``true`` more up than down, ``false`` more down than up; ties are left out), and each
  better answer as ``true``.

Only :func:`~._records.effective` records count (a user's newest vote on an answer).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._records import FeedbackRecord, effective

__all__ = ["LabelExample", "PreferencePair", "make_labels", "make_pairs", "write_jsonl"]


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LabelExample:
    prompt: str
    completion: str
    label: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _scores(records: Sequence[FeedbackRecord]) -> dict[str, dict[str, int]]:
    """prompt -> answer -> (ups - downs), in first-seen order."""
    out: dict[str, dict[str, int]] = {}
    for rec in records:
        if rec.vote is None:
            continue
        answers = out.setdefault(rec.prompt, {})
        answers[rec.answer] = answers.get(rec.answer, 0) + (1 if rec.vote == "up" else -1)
    return out


def make_pairs(records: Iterable[FeedbackRecord]) -> list[PreferencePair]:
    """Preference pairs from better answers and from up/down-voted answers to the same prompt."""
    eff = effective(records)
    out: dict[tuple[str, str, str], PreferencePair] = {}

    def add(prompt: str, chosen: str, rejected: str) -> None:
        if chosen.strip() != rejected.strip():
            out.setdefault((prompt, chosen, rejected), PreferencePair(prompt, chosen, rejected))

    for rec in eff:
        if rec.better is not None:
            add(rec.prompt, rec.better, rec.answer)
    for prompt, answers in _scores(eff).items():
        good = [a for a, s in answers.items() if s > 0]
        bad = [a for a, s in answers.items() if s < 0]
        for chosen in good:
            for rejected in bad:
                add(prompt, chosen, rejected)
    return list(out.values())


def make_labels(records: Iterable[FeedbackRecord]) -> list[LabelExample]:
    """Unpaired thumbs up/down labels (net verdict per prompt and answer) plus better answers as good."""
    eff = effective(records)
    out: dict[tuple[str, str], LabelExample] = {}
    for prompt, answers in _scores(eff).items():
        for answer, score in answers.items():
            if score:
                out[(prompt, answer)] = LabelExample(prompt, answer, score > 0)
    for rec in eff:
        if rec.better is not None:
            out[(rec.prompt, rec.better)] = LabelExample(rec.prompt, rec.better, True)
    return list(out.values())


def write_jsonl(path: Path, rows: Iterable[PreferencePair | LabelExample | FeedbackRecord]) -> int:
    """Write ``rows`` as JSON lines to ``path`` (temp + rename); returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row.to_json(), ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n
