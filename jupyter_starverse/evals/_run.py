"""One model over the examples: batched predictions appended to a JSONL file as they are made.

:func:`predict_all` skips the examples the file already holds (a killed evaluation resumes where
it stopped: the file is the state; a torn last line is cut off), predicts the rest batch by
batch, appends each batch and flushes it, and reports :class:`EvalProgress` (examples done, rate,
ETA). :func:`score` turns the finished file into the metrics of the task kind.
Nothing here knows the store or the facade: a job runs it as well as the notebook does.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._format import format_duration
from jupyter_starverse.errors import BadInputError

from ._metrics import classification_metrics, exact_match, generation_metrics, perplexity, qa_metrics, rouge_l, token_f1
from ._predict import Predictor
from ._report import read_predictions

__all__ = ["TASKS", "Dataset", "EvalProgress", "Example", "TaskOptions", "predict_all", "score"]

TASKS = ("classification", "extraction", "qa", "generation", "perplexity")


@dataclass(frozen=True)
class Example:
    idx: int
    input: str
    expected: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Dataset:
    """The examples of one dataset version an evaluation reads (``skipped``: rows without the fields)."""

    ref: str
    version: str | None
    examples: tuple[Example, ...]
    skipped: int


@dataclass(frozen=True)
class TaskOptions:
    """How examples become model inputs; part of the key of a resumable run."""

    task: str = "classification"
    prompt: str = "{input}"
    labels: tuple[str, ...] = ()  # classification: the candidates (default: every expected value)
    max_new_tokens: int = 32
    batch_size: int = 8

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "labels": list(self.labels)}

    def check(self) -> None:
        if self.task not in TASKS:
            raise BadInputError(f"unknown task {self.task!r}", field="task", hint=f"one of {', '.join(TASKS)}")
        if "{input}" not in self.prompt:
            raise BadInputError(
                "the prompt template has no {input}", field="prompt", hint="e.g. 'Review: {input}\\nLabel:'"
            )
        if not 1 <= self.batch_size <= 4096:
            raise BadInputError("batch size must be 1..4096", field="batch_size", hint="e.g. 8")
        if not 1 <= self.max_new_tokens <= 2048:
            raise BadInputError("max new tokens must be 1..2048", field="max_new_tokens", hint="e.g. 32")


@dataclass(frozen=True)
class EvalProgress:
    model: str
    done: int
    total: int
    elapsed_s: float
    rate: float | None  # examples/s of this session (resumed examples do not count)
    eta_s: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        share = self.done / self.total if self.total else 1.0
        bar = "#" * round(share * 20) + "." * (20 - round(share * 20))
        rate = f", {self.rate:.1f} examples/s" if self.rate else ""
        eta = format_duration(self.eta_s)
        return f"eval {self.model} [{bar}] {share * 100:3.0f}% {self.done}/{self.total}{rate}, ETA {eta}"


def _predict_batch(
    pred: Predictor, opts: TaskOptions, batch: Sequence[Example], labels: Sequence[str]
) -> list[dict[str, Any]]:
    prompts = [pred.encode(opts.prompt.format(input=ex.input)) for ex in batch]
    rows: list[dict[str, Any]] = []
    if opts.task == "classification":
        conts = [pred.encode(" " + label) for label in labels]
        lls = pred.logliks([(p, c) for p in prompts for c in conts])
        for i, ex in enumerate(batch):
            scores = lls[i * len(labels) : (i + 1) * len(labels)]
            best = max(range(len(labels)), key=lambda k: scores[k])
            rows.append(
                {
                    "idx": ex.idx,
                    "input": ex.input,
                    "expected": ex.expected,
                    "predicted": labels[best],
                    "correct": labels[best] == ex.expected,
                    "score": scores[best],
                }
            )
    elif opts.task == "perplexity":
        texts = [pred.encode(opts.prompt.format(input=ex.input)) for ex in batch]
        lls = pred.logliks([([], t) for t in texts])
        for ex, t, ll in zip(batch, texts, lls, strict=True):
            rows.append(
                {
                    "idx": ex.idx,
                    "input": ex.input,
                    "expected": "",
                    "predicted": "",
                    "nll": -ll,
                    "tokens": max(0, min(len(t), pred.context) - 1),
                }
            )
    else:
        outs = pred.generate(prompts, opts.max_new_tokens)
        for ex, out in zip(batch, outs, strict=True):
            text = pred.decode(out).strip()
            if opts.task == "extraction":
                text = text.splitlines()[0].strip() if text else ""
                ok: bool = text == ex.expected
                value = float(ok)
            elif opts.task == "qa":
                value = token_f1(ex.expected, text)
                ok = exact_match(ex.expected, text) == 1.0
            else:
                value = rouge_l(ex.expected, text)
                ok = value >= 0.5
            rows.append(
                {
                    "idx": ex.idx,
                    "input": ex.input,
                    "expected": ex.expected,
                    "predicted": text,
                    "correct": ok,
                    "score": value,
                }
            )
    return rows


def _resume(path: Path) -> set[int]:
    """The examples already predicted; a torn last line (a kill mid-write) is cut off."""
    rows = read_predictions(path)
    if path.is_file():
        good = sum(len((json.dumps(r, ensure_ascii=False) + "\n").encode()) for r in rows)
        if path.stat().st_size != good:  # rewrite what was whole
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
            tmp.replace(path)
    return {int(r["idx"]) for r in rows}


def candidate_labels(opts: TaskOptions, examples: Sequence[Example]) -> list[str]:
    labels = list(opts.labels) or sorted({ex.expected for ex in examples})
    if opts.task == "classification" and len(labels) < 2:
        raise BadInputError(
            f"classification needs at least two labels (found {labels})",
            field="labels",
            hint="give --labels A,B,... or check --target-field",
        )
    return labels


def predict_all(
    pred: Predictor,
    examples: Sequence[Example],
    opts: TaskOptions,
    path: Path,
    *,
    model: str = "",
    progress: Callable[[EvalProgress], None] | None = None,
) -> int:
    """Predict every example not yet in ``path``; returns how many were predicted now."""
    labels = candidate_labels(opts, examples) if opts.task == "classification" else []
    path.parent.mkdir(parents=True, exist_ok=True)
    seen = _resume(path)
    todo = [ex for ex in examples if ex.idx not in seen]
    total, done0 = len(examples), len(examples) - len(todo)
    started = time.monotonic()
    made = 0
    say = progress or (lambda p: None)
    say(EvalProgress(model, done0, total, 0.0, None, None))
    with path.open("a", encoding="utf-8") as f:
        for at in range(0, len(todo), opts.batch_size):
            batch = todo[at : at + opts.batch_size]
            rows = _predict_batch(pred, opts, batch, labels)
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
            f.flush()
            os.fsync(f.fileno())
            made += len(rows)
            elapsed = time.monotonic() - started
            rate = made / elapsed if elapsed > 0 else None
            left = len(todo) - made
            say(EvalProgress(model, done0 + made, total, elapsed, rate, left / rate if rate else None))
    return made


def score(task: str, rows: Sequence[dict[str, Any]]) -> tuple[dict[str, float], list[dict[str, Any]], list[str]]:
    """Metrics, per-label scores and notes of a finished predictions file (in example order)."""
    rows = sorted(rows, key=lambda r: int(r["idx"]))
    expected = [str(r.get("expected", "")) for r in rows]
    predicted = [str(r.get("predicted", "")) for r in rows]
    if task in ("classification", "extraction"):
        metrics, per = classification_metrics(expected, predicted)
        return metrics, [s.to_json() for s in per], []
    if task == "qa":
        return qa_metrics(expected, predicted), [], []
    if task == "generation":
        metrics, notes = generation_metrics(expected, predicted)
        return metrics, [], notes
    return perplexity([float(r["nll"]) for r in rows], [int(r["tokens"]) for r in rows]), [], []
