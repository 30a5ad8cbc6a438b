"""The feedback service: append records, view them, freeze versions, export training data.

A log ``NAME`` is live and append-only (``<store>/feedback/NAME/records/``). ``snapshot(NAME)``
freezes what it holds now into the store dataset ``NAME@N`` (N = 1, 2, ...): a read-only folder
with ``feedback.jsonl`` (the records), ``pairs.jsonl`` and ``labels.jsonl`` (the recipes'
inputs) and ``snapshot.json``. Training jobs mount that version, so a run always names exactly
the feedback it learnt from. Two snapshots racing for the same number: the catalog creates a
record with link(2), so one wins and the other takes the next number.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_starverse._format import html_table, pretty_text
from jupyter_starverse._settings import Settings
from jupyter_starverse.catalog import Catalog, DatasetRef, Entry, parse_ref
from jupyter_starverse.errors import BadInputError, ConflictError, NotFoundError

from ._pairs import LabelExample, PreferencePair, make_labels, make_pairs, write_jsonl
from ._records import FeedbackLog, FeedbackRecord, effective, new_record

__all__ = ["EXPORT_KINDS", "FeedbackLogs", "FeedbackService", "FeedbackSnapshot", "FeedbackTable", "SnapshotFile"]

EXPORT_KINDS = ("pairs", "labels", "records")
_FILES = {"records": "feedback.jsonl", "pairs": "pairs.jsonl", "labels": "labels.jsonl"}
_SNAPSHOT = "snapshot.json"


def _clip(text: str | None, n: int) -> str:
    if not text:
        return ""
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


@dataclass(frozen=True)
class FeedbackTable:
    """The records of a log or of a frozen version, with what they export to."""

    ref: str
    records: tuple[FeedbackRecord, ...]
    total: int
    pairs: int
    labels: int

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "records": [r.to_json() for r in self.records],
            "total": self.total,
            "pairs": self.pairs,
            "labels": self.labels,
        }

    @property
    def summary(self) -> str:
        ups = sum(r.vote == "up" for r in self.records)
        downs = sum(r.vote == "down" for r in self.records)
        better = sum(r.better is not None for r in self.records)
        replaced = self.total - len(self.records)
        extra = f" ({replaced} replaced by a newer vote)" if replaced else ""
        return (
            f"{self.ref}: {len(self.records)} records{extra}, {ups} up, {downs} down, {better} better answers"
            f" -> {self.pairs} preference pairs, {self.labels} labels"
        )

    def _rows(self) -> list[list[str]]:
        return [
            [
                time.strftime("%Y-%m-%d %H:%M", time.localtime(r.at)),
                r.user,
                r.model,
                {"up": "👍", "down": "👎"}.get(r.vote or "", ""),
                _clip(r.prompt, 40),
                _clip(r.answer, 40),
                _clip(r.better, 30),
                _clip(r.comment, 30),
            ]
            for r in self.records
        ]

    _HEADER = ("when", "who", "model", "vote", "prompt", "answer", "better answer", "comment")

    def __str__(self) -> str:
        rows = [list(self._HEADER), *self._rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(len(self._HEADER))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
        return "\n".join([*lines, self.summary])

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))

    def _repr_html_(self) -> str:
        return html_table(self._HEADER, self._rows(), caption=self.summary)


@dataclass(frozen=True)
class FeedbackSnapshot:
    """A frozen version of a log: its store entry and what it holds."""

    entry: Entry
    records: int
    pairs: int
    labels: int
    created: bool

    @property
    def ref(self) -> str:
        return self.entry.ref

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "entry": self.entry.to_json(),
            "records": self.records,
            "pairs": self.pairs,
            "labels": self.labels,
            "created": self.created,
        }

    def __str__(self) -> str:
        how = "new version" if self.created else "unchanged since"
        return f"{how} {self.ref}: {self.records} records, {self.pairs} preference pairs, {self.labels} labels"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


@dataclass(frozen=True)
class SnapshotFile:
    """An exported JSON-lines file."""

    ref: str
    kind: str
    path: str
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "kind": self.kind, "path": self.path, "rows": self.rows}

    def __str__(self) -> str:
        return f"{self.rows} {self.kind} from {self.ref} -> {self.path}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


@dataclass(frozen=True)
class FeedbackLogs:
    """The feedback logs on the store: records so far and frozen versions of each."""

    logs: tuple[tuple[str, int, tuple[str, ...]], ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [{"name": n, "records": r, "versions": list(v)} for n, r, v in self.logs]

    def __str__(self) -> str:
        if not self.logs:
            return "no feedback yet (chat with a model, or `starverse feedback add`)"
        rows = [("log", "records", "versions")] + [(n, str(r), ", ".join(v) or "-") for n, r, v in self.logs]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        pretty_text(p, str(self))


class FeedbackService:
    """Feedback logs on the store (``client.feedback``)."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog
        self._logs: dict[str, FeedbackLog] = {}

    # -- live logs ---------------------------------------------------------------------
    @staticmethod
    def _name(name: object) -> str:
        ref = parse_ref(name)
        if not isinstance(ref, DatasetRef) or ref.version is not None:
            raise BadInputError(
                f"{name!r} is not a feedback log name", field="name", hint="use a plain name such as chat-feedback"
            )
        return ref.name

    def log(self, name: str) -> FeedbackLog:
        name = self._name(name)
        if name not in self._logs:
            self._logs[name] = FeedbackLog(self.catalog.root / "feedback" / name, name)
        return self._logs[name]

    def logs(self) -> list[str]:
        """Names of the logs on the store."""
        top = self.catalog.root / "feedback"
        return sorted(p.name for p in top.iterdir() if (p / "records").is_dir()) if top.is_dir() else []

    def ls(self) -> FeedbackLogs:
        """Every log with its record count and versions."""
        return FeedbackLogs(tuple((n, len(self.log(n).read()), tuple(self.versions(n))) for n in self.logs()))

    def record(
        self,
        name: str,
        *,
        model: str,
        prompt: str,
        answer: str,
        vote: str | None = None,
        better: str | None = None,
        comment: str | None = None,
        answer_id: str | None = None,
        session: str | None = None,
        user: str | None = None,
    ) -> FeedbackRecord:
        """Append one judgement to log ``name`` (safe with any number of concurrent writers)."""
        rec = new_record(
            user=user or self.settings.user,
            model=model,
            prompt=prompt,
            answer=answer,
            vote=vote,
            better=better,
            comment=comment,
            answer_id=answer_id,
            session=session,
        )
        self.log(name).append(rec)
        return rec

    # -- reading a log or a version -----------------------------------------------------
    def _version_dir(self, ref: str) -> tuple[str, Path]:
        folder = self.catalog.mount(ref)
        resolved = str(self.catalog.entry(ref).ref)
        if not (folder / _SNAPSHOT).is_file():
            raise BadInputError(
                f"{resolved} is not a feedback version",
                field="ref",
                hint="give a log name or a version made by `starverse feedback snapshot NAME`",
            )
        return resolved, folder

    def records(self, ref: str) -> tuple[str, list[FeedbackRecord]]:
        """``(resolved ref, records)`` of a live log (``NAME``) or a frozen version (``NAME@N``)."""
        parsed = parse_ref(ref)
        if not isinstance(parsed, DatasetRef):
            raise BadInputError(f"{ref!r} is not feedback", field="ref", hint="give NAME or NAME@VERSION")
        if parsed.version is None:
            log = self.log(parsed.name)
            if not log.records_dir.is_dir():
                raise NotFoundError(
                    f"no feedback log named {parsed.name!r}",
                    hint="record feedback first (chat widget, `starverse feedback add`), "
                    "or list logs with `starverse feedback ls`",
                )
            return parsed.name, log.read()
        resolved, folder = self._version_dir(str(parsed))
        out = []
        for line in (folder / _FILES["records"]).read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(FeedbackRecord.from_json(json.loads(line)))
        return resolved, out

    def table(self, ref: str) -> FeedbackTable:
        resolved, recs = self.records(ref)
        eff = effective(recs)
        return FeedbackTable(resolved, tuple(eff), len(recs), len(make_pairs(eff)), len(make_labels(eff)))

    def pairs(self, ref: str) -> list[PreferencePair]:
        return make_pairs(self.records(ref)[1])

    def labels(self, ref: str) -> list[LabelExample]:
        return make_labels(self.records(ref)[1])

    def export(self, ref: str, kind: str, path: str | Path) -> SnapshotFile:
        """Write ``pairs`` ({prompt, chosen, rejected}), ``labels`` ({prompt, completion, label}) or
        ``records`` as JSON lines to ``path``."""
        if kind not in EXPORT_KINDS:
            raise BadInputError(f"unknown export {kind!r}", field="kind", hint=f"one of {', '.join(EXPORT_KINDS)}")
        resolved, recs = self.records(ref)
        rows: list[Any]
        if kind == "pairs":
            rows = list(make_pairs(recs))
        elif kind == "labels":
            rows = list(make_labels(recs))
        else:
            rows = list(effective(recs))
        target = Path(path).expanduser().absolute()
        return SnapshotFile(resolved, kind, str(target), write_jsonl(target, rows))

    # -- versions --------------------------------------------------------------------------
    def versions(self, name: str) -> list[str]:
        """Frozen versions of log ``name``, oldest first."""
        folder = self.catalog.root / "catalog" / "datasets" / self._name(name)
        found = [p.stem for p in folder.glob("*.json") if re.fullmatch(r"[0-9]+", p.stem)] if folder.is_dir() else []
        return [f"{name}@{v}" for v in sorted(found, key=int)]

    def snapshot(self, name: str) -> FeedbackSnapshot:
        """Freeze log ``name`` into the next store version ``name@N`` (the newest if nothing changed)."""
        name = self._name(name)
        log = self.log(name)
        recs = log.read()
        if not recs:
            raise NotFoundError(f"feedback log {name!r} has no records", hint="record some feedback first")
        eff = effective(recs)
        pairs, labels = make_pairs(eff), make_labels(eff)
        ids = sorted(r.id for r in recs)
        for ref in reversed(self.versions(name)):
            with_meta = self._meta(ref)
            if with_meta is not None and with_meta.get("ids_sha") == _ids_sha(ids):
                entry = self.catalog.entry(ref)
                return FeedbackSnapshot(entry, len(eff), len(pairs), len(labels), created=False)
            break
        staging = log.folder / "snapshots" / uuid.uuid4().hex
        write_jsonl(staging / "records" / _FILES["records"], recs)
        write_jsonl(staging / "pairs" / _FILES["pairs"], pairs)
        write_jsonl(staging / "labels" / _FILES["labels"], labels)
        meta = {
            "kind": "feedback",
            "log": name,
            "records": len(recs),
            "effective": len(eff),
            "pairs": len(pairs),
            "labels": len(labels),
            "ids_sha": _ids_sha(ids),
            "frozen_at": time.time(),
        }
        (staging / "records" / _SNAPSHOT).write_text(json.dumps(meta), encoding="utf-8")
        number = len(self.versions(name)) + 1
        for _ in range(1000):
            try:
                entry = self.catalog.add_dataset(
                    name,
                    str(staging / "records"),
                    version=str(number),
                    description=f"feedback: {len(eff)} records, {len(pairs)} pairs, {len(labels)} labels",
                )
            except ConflictError:  # another snapshot took this number first
                number += 1
                continue
            self.catalog.pull(entry.ref)
            # one format per dataset: a recipe reads every *.jsonl of the folder it mounts
            for kind, rows in (("pairs", len(pairs)), ("labels", len(labels))):
                derived = self.catalog.add_dataset(
                    f"{name}-{kind}",
                    str(staging / kind),
                    version=str(number),
                    description=f"{rows} {kind} from {entry.ref}",
                )
                self.catalog.pull(derived.ref)
            return FeedbackSnapshot(entry, len(eff), len(pairs), len(labels), created=True)
        raise ConflictError(f"could not find a free version number for {name}", hint="try again")

    def _meta(self, ref: str) -> dict[str, Any] | None:
        try:
            folder = self.catalog.mount(ref)
            data = json.loads((folder / _SNAPSHOT).read_text(encoding="utf-8"))
        except (OSError, ValueError, NotFoundError, ConflictError):
            return None
        return data if isinstance(data, dict) else None

    def dataset(self, ref: str, kind: str) -> str:
        """The store dataset of a frozen version holding one format: ``NAME-pairs@N``, ``NAME-labels@N``
        (or ``NAME@N`` for the records), the ``data`` a DPO, reward or KTO recipe mounts."""
        if kind not in _FILES:
            raise BadInputError(f"unknown file {kind!r}", field="kind", hint=f"one of {', '.join(_FILES)}")
        resolved, _ = self._version_dir(ref)
        if kind == "records":
            return resolved
        name, _, version = resolved.partition("@")
        return f"{name}-{kind}@{version}"

    def path(self, ref: str, kind: str) -> Path:
        """The file of a frozen version a job reads (``pairs``, ``labels`` or ``records``)."""
        return self.catalog.mount(self.dataset(ref, kind)) / _FILES[kind]

    def training_data(self, ref: str, method: str) -> str:
        """The dataset an alignment ``method`` learns from: pairs for ``dpo``/``reward``, labels for ``kto``.

        A log name (no ``@N``) is frozen first, so the job names exactly the feedback it read.
        """
        kinds = {"dpo": "pairs", "reward": "pairs", "kto": "labels"}
        if method not in kinds:
            raise BadInputError(
                f"alignment method {method!r} is not offered",
                field="method",
                hint="dpo (preference pairs), kto (thumbs up/down labels) or reward (a reward model on pairs)",
            )
        parsed = parse_ref(ref)
        if isinstance(parsed, DatasetRef) and parsed.version is None:
            ref = self.snapshot(parsed.name).ref
        kind = kinds[method]
        meta = self._meta(ref) or {}
        if not meta.get(kind):
            other = "kto (it learns from single thumbs up/down)" if kind == "pairs" else "record some votes first"
            raise BadInputError(
                f"{ref} has no {'preference pairs' if kind == 'pairs' else 'labels'} for {method}",
                field="feedback",
                hint=f"pairs need a better answer, or an up- and a down-voted answer to one prompt; or use {other}",
            )
        return self.dataset(ref, kind)


def _ids_sha(ids: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(ids).encode()).hexdigest()
